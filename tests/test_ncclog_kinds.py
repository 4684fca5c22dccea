"""Every line kind matches the shapes NCCL printed in each version; every kind has an example."""

from __future__ import annotations

import pytest

from nccldoctor.ncclog.folds import ALGORITHMS, canonical, transport_label
from nccldoctor.ncclog.kinds import KINDS, TEXT_KINDS, WARN_KINDS, match_kind

EXAMPLES = {
    "coll": [
        "AllReduce: opCount 2a sendbuff 0x7f1c40000000 recvbuff 0x7f1c40000000 count 2097152 "
        "datatype 7 op 0 root 0 comm 0x55d1c2a0 [nranks=16] stream 0x55d1d000",
    ],
    "algorithm": [
        "8388608 Bytes -> Algo 1 proto 2 time 172.447998",  # 2.20–2.22
        "AllReduce: 8388608 Bytes -> Algo 1 proto 2 time 172.447998",  # 2.23
        "AllReduce: 8388608 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..15}",  # 2.24+
        "AllReduce: 8388608 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..15} cgaClusterSize 1",
    ],
    "algorithm_special": [
        "AllReduce [Symmetric]: 1048576 Bytes -> Kernel AllReduce_AGxLL_R nchannels 8 nthreads 512 nWorks 1",
        "AllGather [Copy Engine]: 1048576 Bytes -> cudaMemcpyAsync",
    ],
    "best_tuning": ["Best tuning, algorithm, RING, protocol, SIMPLE"],
    "transport": [
        "Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer/read",
        "Channel 01/0 : 2[2] -> 3[3] via P2P/CUMEM/read",
        "Channel 00 : 0[0] -> 1[1] via SHM/direct/direct",
        "Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA",
        "Channel 00/0 : 8[0] -> 0[0] [receive] via NET/Socket/1",
        "Channel 02/1 : 0[0] -> 9[1] [send] via NET/IB/2(1)/GDRDMA/Shared",
        # older eras, as real threads carry them (tests/fixtures/real/)
        "Ring 00 : 43 -> 44 [receive] via NET/Socket/0",  # 2.4
        "Ring 00 : 155[3d000] -> 157[b2000] via P2P/IPC",  # 2.5–2.6
        "Channel 01 : 2[c7000] -> 0[87000] [receive] via NET/IB/5/GDRDMA",  # 2.7–2.11
        "Channel 00 : 0[0] -> 1[1] via direct shared memory",  # ≤2.12
    ],
    "collnet": ["CollNet 00/0 : 3 [send] via COLLNET/SHARP/0/GDRDMA"],
    "tuning_row": ["    AllReduce |    10.4/   3.2 |    18.6/  26.7 |    46.2/  62.5 |"],
    "tuning_algorithms": ["  Algorithm   |                            Tree                  |"],
    "tuning_protocols": ["  Protocol    |             LL |          LL128 |         Simple |"],
    "ring_order": [
        "Channel 00/02 :    0   1   2   3",
        "Channel 01/02 :  0  1  2  3 ...",
        "Channel 00 :    0   1   2   3",  # 2.4–2.6
    ],
    "ring_neighbours": ["Ring 00 : 3 -> 0 -> 1"],
    "trees": ["Trees [0] 1/-1/-1->0->-1 [1] -1/-1/-1->0->1"],
    "init": [
        "comm 0x55d1c2a0 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 18000 commId 0x9f3c1b2ad4e5f601 - Init START",
        "ncclCommInitRank comm 0x55d1c2a0 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 18000 commId 0x1 - Init COMPLETE",
        "ncclCommSplit comm 0x55 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 1b000 parent 0x44 color 3 key 1- Init START",
        "[Rank 3] ncclCommInitRankConfig comm 0x55 rank 3 nranks 4 cudaDev 1 nvmlDev 1 busId 1b000 commId 0x2 - Init START",
        "ncclCommSplit comm 0x55 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 1b000 commId 0x3 parent 0x44 childCount 2 color 3 key 1 - Init COMPLETE",
        "comm 0x7f3c rank 0 nranks 2 cudaDev 0 nvmlDev 0 - Init COMPLETE",  # 2.4
        "comm 0x55 rank 1 nranks 4 cudaDev 1 busId 1a000 - Init COMPLETE",  # 2.5–2.16
        # 2.17–2.18 (cupy/cupy#9090)
        "comm 0x55f205c38300 rank 1 nranks 2 cudaDev 1 busId 89000 commId 0x1328ee0a0e0cb7aa - Init COMPLETE",
    ],
    "init_complete_garbled": [
        # nccl-1664: an OCR'd screenshot ("ncc1CommInitRank", "nranlks")
        "ncc1CommInitRank comm 0x7bf8870 rank 13 nranlks 16 cudaDev 5 nvmlDev 5 busId 97000 "
        "commId 0xa1ffb74daef8a940 - Init COMPLETE",
    ],
    "ended": [
        "comm 0x55d1c2a0 rank 0 nranks 16 cudaDev 0 busId 18000 - Abort COMPLETE",
        "comm 0x55 rank 0 nRanks 2 cudaDev 0 busId 18000 commId 0x1 - Revoke COMPLETE, result 0",
    ],
    "nccl_version": [
        "NCCL version 2.21.5+cuda12.4",
        "NCCL version 2.27.3rc1+cuda12.9",
        "NCCL version 2.26.2",  # as PyTorch's DistBackendError ends
    ],
    "git_version": ["NCCL git version unknown unknown"],
    "driver": ["cudaDriverVersion 12040"],
    "timings": [
        "Init timings: rank 3 nranks 16 total 4.21 (kernels 0.35, bootstrap 2.91, allgathers 0.05, topo 0.40, graphs 0.02, connections 0.44, rest 0.02)",
        "Init timings - ncclCommInitRankConfig: rank 3 nranks 16 total 4.21 (kernels 0.35, alloc 0.02, bootstrap 2.91, allgathers 0.05, topo 0.40, graphs 0.02, connections 0.44, rest 0.02)",
    ],
    "topology": ["comm 0x55d1c2a0 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0"],
    "channels": [
        "2 coll channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer",
        "8 coll channels, 8 collnet channels, 0 nvls channels, 8 p2p channels, 2 p2p channels per peer",
    ],
    "env": [
        "NCCL_IB_DISABLE set by environment to 1.",
        "NCCL_SOCKET_IFNAME set by environment to =eth0",
        "NCCL_NET_GDR_LEVEL set by environment to PHB",
    ],
    "env_set_to": ["NCCL_IB_HCA set to mlx5_0:1,mlx5_1:1"],
    "bootstrap": [
        "Bootstrap : Using eth0:10.0.0.1<0>",
        "Bootstrap: Using ib0:fe80::1%ib0<0>",
        "Bootstrap : Using [0]eth0:192.168.0.172<0>",  # 2.4–2.7, a list (NVIDIA/nccl#262)
    ],
    "plugin": [
        "NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
        "NET/Plugin : No plugin found, using internal implementation",
        "TUNER/Plugin: Using internal tuner plugin.",
    ],
    "network": ["Using network IB", "Using network AWS Libfabric"],
    "ofi_devices": [
        "NET/OFI Selected Provider is efa",  # aws-ofi-nccl 1.0–1.6 (aws-samples/aws-efa-eks)
        "NET/OFI Forcing AWS OFI ndev 4",
        "NET/OFI Selected Provider is efa (found 4 nics)",  # 1.7–1.20's format
        "NET/OFI Selected provider is efa, fabric is efa-direct (found 32 nics)",  # 1.21's
    ],
    "ib_devices": [
        "NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:192.168.11.1<0>",  # 2.4–2.11 (NVIDIA/nccl#262)
        "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_4:1/RoCE [RO]; OOB ib0:10.1.0.11<0>",
    ],
    "ib_no_device": ["NET/IB : No device found."],
    "socket_interfaces": ["NET/Socket : Using [0]eth0:10.0.0.11<0> [1]eth1:10.0.1.11<0>"],
    "gdr_hca": ["NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'"],
    "gdr_pair": [
        "NET/IB : GPU Direct RDMA Disabled for GPU 0[0] / HCA 0 (distance 4 >= 2)",  # 2.4
        "GPU Direct RDMA Disabled for GPU 18000 / HCA 0 (distance 5 > 4)",
        "GPU Direct RDMA Enabled for GPU 1 / HCA 0 (distance 3 <= 4), read 1 mode Default",
    ],
    "connected_rings": ["Connected all rings", "Connected all rings, use ring PXN 0 GDR 1"],
    "connected_trees": ["Connected all trees"],
    "nvls": [
        "NVLS comm 0x55 headRank 0 nHeads 4 buffSize 1048576 nvlsPerRankSize 201326592 nvlsTotalSize 805306368"
    ],
    "backtrace": [
        "bootstrap.cc:88 -> 3",
        "init.cc:211 (ncclGetUniqueId) -> 5",
        "transport/net.cc:1390 (recvProxyProgress) -> 6 [Progress Thread]",
    ],
    "connect_retry": [
        "Call to connect returned Connection refused, retrying",
        "socketPollConnect: connect returned Connection refused, retrying (3/34) after sleep for 300 msec",
        "ncclOsSocketPollConnect: connect to 10.0.0.1<41237> returned Connection refused, retrying (3/34) after sleep for 300 msec",
    ],
    "hint": [
        "HINT: In many cases this error indicates that ACS is enabled, which breaks the GPU Direct RDMA protocol."
    ],
    # 2.2–2.3, as real threads carry them (horovod/horovod#584, NVIDIA/nccl-tests#15)
    "comm_sized": ["comm 0x7fc8e824c640 rank 0 nranks 4", "rank 0 nranks 2", "nranks 8"],
    "found_interface": [
        "NET : Using interface lo:127.0.0.1<0>",
        "NET : Using interface eth1:fe80::215:5dff:fe33:ff6d%eth1<0>",
        "NET : Found interface eth0:10.0.0.2<0> in the same subnet as remote address 10.0.0.1<23456>",
    ],
    "socket_count": ["NET/Socket : 3 interfaces found"],
    "ib_sideband": ["NET/IB : Using interface enp3s0 for sideband communication"],
    "ib_device": ["NET/IB: [0] mlx5_0:1/IB "],  # v2.3.7-1:transport/net_ib.cu:137's format
    "network_internal": ["Using internal Network Socket", "Using external Network IB"],
    "net_devices": [
        "CUDA Dev 0, IP Interfaces : lo(SOC) eth0(PXB) eth1(PXB)",  # horovod/horovod#584
        "CUDA Dev 1, IB Ports : mlx5_0/1(PIX) mlx5_1/1(SOC) ",  # v2.3.7-1:net_ib.cu:168's format
    ],
}

# WARN messages and the facts their kinds read (target, error / nranks)
WARN_EXAMPLES = {
    "connect_failed": [
        ("Call to connect failed : Connection timed out", ("?", "Connection timed out")),  # 2.2
        ("Call to connect timeout : Connection refused", ("?", "Connection refused")),  # 2.3
        ("Connect to 10.0.0.2<43817> failed : No route to host", ("10.0.0.2<43817>", "No route to host")),
        ("Net : Connect to 10.0.0.2<43817> failed : Connection refused", ("10.0.0.2<43817>", "Connection refused")),
        ("socketStartConnect: Connect to 10.0.0.2<43817> failed : Network is unreachable",
         ("10.0.0.2<43817>", "Network is unreachable")),
        ("socketPollConnect: connect returned Connection refused, exceeded error retry count (35)",
         ("?", "Connection refused")),
        ("ncclOsSocketPollConnect: connect to 10.0.0.2<43817> returned Connection timed out, "
         "exceeded error retry count after 35 attempts", ("10.0.0.2<43817>", "Connection timed out")),
        ("socketPollConnect to 10.0.0.2<43817> failed with error Connection reset by peer",
         ("10.0.0.2<43817>", "Connection reset by peer")),
    ],
    "checked_in": [("Bootstrap Root : rank 3 of 8 ranks has already checked in", ("8",))],
}  # fmt: skip


def test_every_kind_names_its_versions_and_source():
    for kind in KINDS:
        assert kind.versions.startswith("2."), kind.name
        assert kind.source, kind.name


def test_every_kind_has_examples():
    assert {k.name for k in KINDS} == set(EXAMPLES)
    assert len({k.name for k in KINDS}) == len(KINDS)


@pytest.mark.parametrize(
    ("name", "msg"), [(name, msg) for name, msgs in EXAMPLES.items() for msg in msgs]
)
def test_kind_matches(name, msg):
    found = match_kind(msg)
    assert found is not None, msg
    assert found[0].name == name


def test_unknown_message():
    assert match_kind("P2P Chunksize set to 131072") is None


def test_names_and_transport_labels():
    assert canonical("1", ALGORITHMS) == "Ring"
    assert canonical("NVLS_TREE", ALGORITHMS) == "NVLSTree"
    assert canonical("SIMPLE", ("LL", "LL128", "Simple")) == "Simple"
    assert transport_label("NET/IB/2(1)/GDRDMA/Shared") == "NET/IB/2/GDRDMA"
    assert transport_label("NET/Socket/0") == "NET/Socket/0"
    assert transport_label("P2P/direct pointer/read") == "P2P/direct pointer"
    assert transport_label("P2P/CUMEM/read") == "P2P/CUMEM"
    assert transport_label("SHM/direct/direct") == "SHM"


def test_the_parser_can_skip_what_the_tables_do_not_mark() -> None:
    """The parser counts one kind in bulk and reads an application line only when a new shape
    of it (digits as 0) holds a TEXT_KINDS needle: so one counted kind, digit-free needles."""
    assert [k.name for k in KINDS if k.counted] == ["coll"]
    for kind in TEXT_KINDS:
        assert kind.needles and not any(c.isdigit() for n in kind.needles for c in n), kind.name


def test_every_warn_kind_has_examples():
    assert {k.name for k in WARN_KINDS} == set(WARN_EXAMPLES)
    for kind in WARN_KINDS:
        assert kind.versions.startswith("2.") and kind.source, kind.name


@pytest.mark.parametrize(
    ("name", "msg", "facts"),
    [(name, msg, facts) for name, cases in WARN_EXAMPLES.items() for msg, facts in cases],
)
def test_warn_kind_matches(name, msg, facts):
    (kind,) = (k for k in WARN_KINDS if k.name == name)
    m = kind.pattern.search(msg)
    assert kind.needle in msg and m is not None, msg
    read = tuple(v for v in m.groupdict().values() if v is not None)
    assert tuple(x.strip() for x in read) in (facts, facts[1:]), read
