"""The summary and findings of fixture logs built from NCCL's format strings, per version."""

from __future__ import annotations

from pathlib import Path

import pytest

from nccldoctor.explain import explain
from nccldoctor.model import Severity
from nccldoctor.ncclog import expand_inputs

LOGS = Path(__file__).parent / "fixtures" / "logs"


def run(name: str, jobs: int = 1):
    extra, findings = explain(expand_inputs([str(LOGS / name)]), jobs=jobs)
    return extra, {f.id: f for f in findings}


def test_v218_healthy_two_node_socket():
    extra, findings = run("v2.18-socket-2node")
    assert (extra["nccl_version"], extra["cuda_version"]) == ("2.18.6", "12.2")
    assert (extra["nranks"], extra["nodes"], extra["channels"]) == (2, 2, 2)
    assert (extra["network"], extra["interfaces"], extra["gdrdma"]) == ("Socket", ["eth0"], False)
    assert extra["transports"] == ["NET/Socket/0"]
    assert extra["init_complete"] is True
    assert not [f for f in findings.values() if f.severity in (Severity.WARN, Severity.FAIL)]
    # no per-call lines before 2.20: the choice comes from NCCL's model over the printed table
    algos = [a for a in extra["algorithms"] if a["collective"] == "AllReduce"]
    assert {a["source"] for a in algos} == {"tuning-model"}
    assert algos[0]["min_bytes"] == 0 and algos[-1]["max_bytes"] is None
    assert [a["min_bytes"] for a in algos] == sorted(a["min_bytes"] for a in algos)
    nccl = extra["nccl"]
    proc = next(p for p in nccl["processes"] if p["rank"] == 0)
    assert proc["env"] == {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "eth0"}
    assert proc["bootstrap"] == {"ifname": "eth0", "address": "198.18.0.2"}
    assert proc["cuda_driver"] == 12020
    assert nccl["gdrdma_reason"].startswith("the network is Socket")
    comm = nccl["communicators"][0]
    assert comm["comm_id"] == "0x5b1e7a3c9d2f4e11"
    assert comm["rings"] == {"0": [0, 1], "1": [0, 1]}
    assert comm["tuning_table"]["AllReduce"][0] == {
        "algorithm": "Tree",
        "protocol": "LL",
        "latency_us": 10.4,
        "bandwidth_gbps": 2.4,
    }
    assert nccl["lines"]["other"] == 2  # the training output mixed into the files
    assert nccl["lines"]["unknown"] > 0 and nccl["lines"]["garbled"] == 0
    assert nccl["answer"].startswith("AllReduce over 2 ranks on 2 nodes: NET/Socket via eth0")


def test_v221_ib_with_gdrdma():
    extra, findings = run("v2.21-ib-gdr-2node")
    assert (extra["network"], extra["interfaces"], extra["gdrdma"]) == ("IB", ["mlx5_0:1"], True)
    assert extra["transports"] == ["NET/IB/0/GDRDMA"]
    assert extra["channels"] == 4
    logged = {(a["algorithm"], a["protocol"]): a for a in extra["algorithms"]}
    assert {a["source"] for a in logged.values()} == {"log"}
    assert (logged["Ring", "Simple"]["min_bytes"], logged["Ring", "Simple"]["max_bytes"]) == (
        1048576,
        8388608,
    )
    assert logged["Tree", "LL"]["min_bytes"] == 4096
    proc = extra["nccl"]["processes"][0]
    assert proc["ib_devices"] == [{"index": 0, "hca": "mlx5_0", "port": 1, "link_layer": "IB"}]
    assert proc["ib_relaxed_ordering"] is True
    assert proc["gdr_hca"] == {"mlx5_0": True}
    assert proc["gdr_pairs"][0]["distance"] == 3
    assert proc["env"]["NCCL_IB_HCA"] == "mlx5_0"
    assert "GPUDirect RDMA" in extra["nccl"]["answer"]
    assert "/GDRDMA" in extra["nccl"]["gdrdma_reason"]
    assert not findings


def test_v226_single_node_nvlink():
    extra, findings = run("v2.26-nvlink-1node")
    assert (extra["nranks"], extra["nodes"], extra["channels"]) == (4, 1, 8)
    assert extra["transports"] == ["P2P/CUMEM"]
    assert extra["gdrdma"] is None  # nothing crosses a network
    rows = extra["nccl"]["communicators"][0]["ranks"]
    assert [r["rank"] for r in rows] == [0, 1, 2, 3]
    assert rows[2]["cuda_dev"] == 2 and rows[2]["bus_id"] == "38000"
    assert rows[0]["init_seconds"] == 0.71 and rows[0]["timings"]["bootstrap"] == 0.02
    simple = [a for a in extra["algorithms"] if a["protocol"] == "Simple"]
    assert (simple[0]["min_bytes"], simple[0]["max_bytes"], simple[0]["calls"]) == (
        33554432,
        67108864,
        2,
    )
    assert any(a["collective"] == "Broadcast" for a in extra["algorithms"])
    assert not findings


def test_v230_rank_stops_before_init_complete():
    extra, findings = run("v2.30-init-hang")
    assert extra["init_complete"] is False
    stuck = findings["logs.init-incomplete"]
    assert stuck.severity is Severity.FAIL and stuck.category == "collective_timeout_hang"
    assert "ranks 1, 3" in stuck.title
    assert any("retrying (2/34)" in e for e in stuck.evidence)  # the rank's last line
    assert findings["logs.nccl-error"].title.startswith("NCCL returned ncclInvalidUsage (5)")
    assert "198.18.3.2<40211>" in findings["logs.connect-retries"].evidence[0]
    warn = extra["nccl"]["processes"][1]["warnings"][0]
    assert (warn["file"], warn["line"], warn["func"]) == (
        "transport/net_socket.cc",
        512,
        "ncclNetSocketIrecv",
    )


@pytest.mark.parametrize("jobs", [1, 2])
def test_v232_diverging_ranks_in_one_torchrun_file(jobs):
    extra, findings = run("v2.32-diverge", jobs)
    assert (extra["nranks"], extra["nodes"], extra["nccl_version"]) == (4, 2, "2.32.3")
    div = findings["logs.collective-divergence"]
    assert div.severity is Severity.FAIL and div.rank == 2
    assert "opCount 0x29" in div.evidence[0] and "rank 2 (trn-1:7002)" in div.evidence[0]
    rows = extra["nccl"]["communicators"][0]["ranks"]
    assert [r["last_op"]["op_count"] for r in rows] == [0x2A, 0x2A, 0x28, 0x2A]
    assert extra["nccl"]["lines"]["other"] == 3  # launcher and PyTorch lines


def test_version_and_nranks_disagreement(tmp_path):
    a = "node-a:1:1 [0] NCCL INFO "
    b = "node-b:2:2 [0] NCCL INFO "
    init = "comm 0x1{r} rank {r} nranks {n} cudaDev 0 nvmlDev 0 busId 1000 commId 0xabc - Init {p}"
    (tmp_path / "a.log").write_text(
        "\n".join(
            [
                a + "NCCL version 2.21.5+cuda12.4",
                a + "NCCL_ALGO set by environment to Ring",
                a + init.format(r=0, n=2, p="START"),
                a + init.format(r=0, n=2, p="COMPLETE"),
            ]
        )
    )
    (tmp_path / "b.log").write_text(
        "\n".join(
            [
                b + "NCCL version 2.23.4+cuda12.6",
                b + init.format(r=1, n=3, p="START"),
                b + init.format(r=1, n=3, p="COMPLETE"),
            ]
        )
    )
    _, findings = explain(expand_inputs([str(tmp_path)]))
    ids = {f.id: f for f in findings}
    assert ids["logs.version-mismatch"].category == "version_mismatch"
    assert ids["logs.nranks-mismatch"].severity is Severity.FAIL
    differs = ids["logs.env-differs"]
    assert differs.title == "1 NCCL variable(s) differ between processes"
    assert differs.evidence == ["NCCL_ALGO: node-a:1=Ring, node-b:2=(unset)"]


def test_the_one_process_whose_setting_differs_is_named_among_many(tmp_path):
    """Eight processes, one with NCCL_ALGO=Tree: the evidence names it, the seven others are
    counted; each host's own NCCL_HOSTID is no difference (as between nodes in a check)."""
    for rank in range(8):
        line = f"node-{rank // 4}:{100 + rank}:{100 + rank} [0] NCCL INFO "
        algo = "Tree" if rank == 5 else "Ring"
        (tmp_path / f"{rank}.log").write_text(
            f"{line}NCCL version 2.21.5+cuda12.4\n"
            f"{line}NCCL_ALGO set by environment to {algo}\n"
            f"{line}NCCL_HOSTID set by environment to host{rank // 4}\n"
        )
    _, findings = explain(expand_inputs([str(tmp_path)]))
    (differs,) = [f for f in findings if f.id == "logs.env-differs"]
    assert differs.evidence == [
        "NCCL_ALGO: Tree on node-1:105; Ring on node-0:100, node-0:101, node-0:102 and 4 more"
    ]


def test_collective_mismatch_at_one_opcount(tmp_path):
    line = (
        "h{r}:{r}:{r} [0] NCCL INFO {f}: opCount {op:x} sendbuff 0x1 recvbuff 0x2 count {c} "
        "datatype 7 op 0 root 0 comm 0xc{r} [nranks=2] stream 0x3"
    )
    for r in (0, 1):
        rows = [line.format(r=r, f="AllReduce", op=op, c=1024) for op in range(5)]
        rows.append(line.format(r=r, f="AllReduce" if r == 0 else "Broadcast", op=5, c=1024))
        (tmp_path / f"r{r}.log").write_text("\n".join(rows) + "\n")
    _, findings = explain(expand_inputs([str(tmp_path)]))
    assert "logs.ranks-missing" not in {f.id for f in findings}  # ranks unknown without init
    mismatch = next(f for f in findings if f.id == "logs.collective-mismatch")
    assert "opCount 0x5" in mismatch.title
    assert any("Broadcast" in e for e in mismatch.evidence)


def test_teardown_abort_and_a_rank_that_stops_early(tmp_path):
    init = "comm 0x1{r} rank {r} nranks 3 cudaDev 0 nvmlDev 0 busId 1000 commId 0xfeed - Init {p}"
    end = "comm 0x1{r} rank {r} nranks 3 cudaDev 0 busId 1000 - {what} COMPLETE"
    for r, what in ((0, "Destroy"), (1, "Abort"), (2, None)):
        head = f"h{r}:{r + 10}:{r + 10} [0] NCCL INFO "
        rows = [head + init.format(r=r, p="START"), head + init.format(r=r, p="COMPLETE")]
        if what:
            rows.append(head + end.format(r=r, what=what))
        (tmp_path / f"r{r}.log").write_text("\n".join(rows) + "\n")
    _, findings = explain(expand_inputs([str(tmp_path)]))
    ids = {f.id: f for f in findings}
    assert "ranks 1" in ids["logs.comm-aborted"].title
    early = ids["logs.rank-stopped-early"]
    assert "(ranks 2)" in early.title and early.rank == 2
    assert "Init COMPLETE" in early.evidence[0]


def test_one_process_in_two_files_is_one_rank(tmp_path):
    """stdout captured by the launcher and NCCL_DEBUG_FILE hold the same process."""
    src = LOGS / "v2.21-ib-gdr-2node" / "rank0.log"
    (tmp_path / "stdout.log").write_text("[rank0]:" + src.read_text().replace("\n", "\n[rank0]:"))
    (tmp_path / "nccl.gpu-a.31001.log").write_text(src.read_text())
    extra, _ = explain(expand_inputs([str(tmp_path)]), jobs=1)
    (proc,) = extra["nccl"]["processes"]
    assert proc["process"] == "gpu-a:31001" and len(proc["sources"]) == 2
    (comm,) = extra["nccl"]["communicators"]
    assert comm["ranks_seen"] == 1 and comm["ranks"][0]["connections"] == 8


def test_per_call_lines_belong_to_the_communicator_of_rank_0(tmp_path):
    head = "h:1:1 [0] NCCL INFO "
    init = "comm {ptr} rank {r} nranks {n} cudaDev 0 nvmlDev 0 busId 1000 commId {cid} - Init {p}"
    rows = [head + init.format(ptr="0xa", r=0, n=8, cid="0x1", p=p) for p in ("START", "COMPLETE")]
    rows += [head + init.format(ptr="0xb", r=3, n=4, cid="0x2", p=p) for p in ("START", "COMPLETE")]
    rows.append(head + "AllReduce: 65536 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..1}")
    (tmp_path / "r.log").write_text("\n".join(rows) + "\n")
    extra, _ = explain(expand_inputs([str(tmp_path)]))
    world, sub = extra["nccl"]["communicators"]
    assert world["comm_id"] == "0x1" and world["algorithms"][0]["protocol"] == "LL128"
    assert sub["algorithms"] == []


@pytest.mark.parametrize(
    ("name", "sentence"),
    [
        ("v2.18-socket-2node", "AllReduce over 2 ranks on 2 nodes: NET/Socket via eth0 without "
         "GPUDirect RDMA, 2 channels, Ring/Simple for ≥ 256 KiB, Ring/LL128 for 16 KiB–256 KiB, "
         "Ring/LL below (by NCCL's tuning model)"),
        ("v2.26-nvlink-1node", "AllReduce over 4 ranks on 1 node: P2P/CUMEM, 8 channels, "
         "Ring/Simple for 32 MiB–64 MiB, Ring/LL128 for 256 KiB–1 MiB, Ring/LL for 1 KiB (as logged)"),
        ("v2.30-init-hang", "Communicator of 4 ranks on 2 nodes: NET/Socket via eth0 without "
         "GPUDirect RDMA, 2 channels; NCCL init did NOT complete on every rank"),
    ],
)  # fmt: skip
def test_answer_sentence(name, sentence):
    extra, _ = run(name)
    assert extra["nccl"]["answer"] == sentence


def test_interfaces_are_the_hcas_connections_use(tmp_path):
    head = "h{r}:{r}:{r} [0] NCCL INFO "
    init = "comm 0x{r} rank {r} nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x77 - Init {p}"
    for r in (0, 1):
        h = head.format(r=r)
        rows = [
            h + "NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE; OOB eth0:198.18.0.2<0>",
            h + "Using network IB",
            h + init.format(r=r, p="START"),
            h + f"Channel 00/0 : {r}[0] -> {1 - r}[0] [send] via NET/IB/1",
            h + init.format(r=r, p="COMPLETE"),
        ]
        (tmp_path / f"r{r}.log").write_text("\n".join(rows) + "\n")
    extra, _ = explain(expand_inputs([str(tmp_path)]))
    assert extra["interfaces"] == ["mlx5_1:1"]
    assert extra["gdrdma"] is False and extra["transports"] == ["NET/IB/1"]
    link = extra["nccl"]["processes"][0]["ib_devices"][1]["link_layer"]
    assert link == "RoCE"
