"""The line kinds: one table entry per kind of NCCL INFO line worth knowing (folds in folds.py,
the network's in netfolds.py).

An entry is (name, needle, pattern, fold): ``needle`` is a substring every such message
contains, tested with ``in`` before the regex runs; ``pattern`` is matched at the start of the
message (the text after ``NCCL INFO``); ``fold`` writes the match into the process record.
The first entry whose needle and pattern both match wins. Adding a kind is adding one entry.
A ``counted`` kind (the collective trace, most of a long log) is counted in bulk and only its
latest line per communicator parsed; the parser finds every other line from the table's markers
(``TEXT_KINDS`` for the lines that are not NCCL's), so a new entry needs no parser change.
Every entry names the NCCL releases it was checked against (``versions``) and where its format
string is in NVIDIA/nccl (``source``: tag, file under ``src/``, line); the shapes of each era are
described in docs/nccl-log-formats.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

from nccldoctor.ncclog import folds, netfolds
from nccldoctor.ncclog.envelope import Envelope
from nccldoctor.ncclog.records import LogSet, ProcessLog

Fold = Callable[[ProcessLog, "re.Match[str]", Envelope], None]


class LineKind(NamedTuple):
    name: str
    needle: str
    pattern: re.Pattern[str]
    fold: Fold
    versions: str  # the NCCL releases whose format the pattern was checked against
    source: str  # where the format string is, in NVIDIA/nccl (paths under src/, tag:file:line)
    # identical lines recur (one per call): the parser memoises them and folds each run of a
    # line once, its fold told how many lines it stands for (``times``)
    repeats: bool = False
    counted: bool = False  # one line per call per rank: counted, the latest per comm parsed


def _k(
    name: str,
    needle: str,
    pattern: str,
    fold: Fold,
    versions: str,
    source: str,
    repeats: bool = False,
    counted: bool = False,
) -> LineKind:
    return LineKind(name, needle, re.compile(pattern), fold, versions, source, repeats, counted)


# init.cc, every era: 2.4 "comm %p rank %d nranks %d cudaDev %d nvmlDev %d - Init COMPLETE";
# 2.5–2.16 "... cudaDev %d busId %x - Init COMPLETE" (%lx from 2.8); 2.17–2.18 add "commId 0x%llx";
# 2.19+ "... cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init START|COMPLETE", 2.21+ the API
# name in front, 2.29+ "[Rank N] " before START (docs/nccl-log-formats.md#version-and-init)
_INIT = (
    r"(?:\[Rank \d+\] )?(?:(?P<api>\w+) )?comm (?P<comm>\S+) rank (?P<rank>\d+) nranks "
    r"(?P<nranks>\d+) cudaDev (?P<cuda_dev>-?\d+)(?: nvmlDev (?P<nvml_dev>-?\d+))?(?: busId "
    r"(?P<bus_id>[0-9a-fA-F]+))?(?: commId (?P<comm_id>0x[0-9a-fA-F]+))?.*?- ?Init "
    r"(?P<phase>START|COMPLETE)"
)
# transport/{net,p2p,shm}.cc: 2.4 "Ring %02d : %d -> %d [send] via NET/%s/%d%s" (no ids) and
# "Ring %02d : %d[%d] -> %d[%d] via P2P/IPC" (cudaDev); 2.5–2.6 "Ring %02d : %d[%lx] -> %d[%lx]"
# (busId, hex); 2.7–2.11 "Channel %02d : …"; 2.12+ "Channel %02d/%d : …"
_VIA = (
    r"(?:Channel|Ring) (?P<channel>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)(?:\[[0-9a-fA-F]+\])? -> "
    r"(?P<dst>\d+)(?:\[[0-9a-fA-F]+\])? (?:\[(?P<dir>send|receive)\] )?via (?P<via>.+)"
)

KINDS: tuple[LineKind, ...] = (
    # collectives first: with NCCL_DEBUG_SUBSYS=COLL they are most of the log
    _k("coll", ": opCount ",
       r"(?P<func>\w+): opCount (?P<op>[0-9a-fA-F]+) sendbuff \S+ recvbuff \S+ count "
       r"(?P<count>\d+) datatype (?P<dtype>\d+) op (?P<redop>\d+) root (?P<root>-?\d+) "
       r"comm (?P<comm>\S+) \[nranks=(?P<nranks>\d+)\]", folds.coll,
       "2.4–2.32", "v2.4.8-1:enqueue.cc:412, v2.30.7-1:enqueue.cc:3152", counted=True),
    # per-call algorithm: 2.20–2.22 no name, 2.23 numeric, 2.24+ names (TRACE before 2.20)
    _k("algorithm", " Bytes -> Algo ",
       r"(?:(?P<func>\w+): )?(?P<bytes>\d+) Bytes -> Algo (?P<algo>\w+) proto (?P<proto>\w+)",
       folds.algo, "2.20–2.32", "v2.30.7-1:enqueue.cc:822", repeats=True),
    _k("algorithm_special", " Bytes -> ",
       r"(?P<func>\w+) \[(?P<how>Symmetric|Copy Engine|Hierarchical CE)\]: (?P<bytes>\d+) "
       r"Bytes -> (?P<detail>.+)", folds.special_algo,
       "2.27–2.32", "v2.27.7-1:enqueue.cc:1429, v2.30.7-1:scheduler/symmetric_sched.cc:356",
       repeats=True),
    # every rank, every call, no size (docs/nccl-log-formats.md#nccl-2-32)
    _k("best_tuning", "Best tuning, ",
       r"Best tuning, algorithm, (?P<algo>\w+), protocol, (?P<proto>\w+)", folds.best_tuning,
       "2.32", "libnccl.so.2 2.32.3 strings (no source tag)", repeats=True),
    _k("transport", " via ", _VIA, folds.connection, "2.4–2.32",
       "v2.4.8-1:transport/net.cc:306, p2p.cc:504, shm.cc:152; v2.7.8-1:transport/net.cc:100; "
       "v2.12.12-1:transport/net.cc:184; v2.30.7-1:transport/p2p.cc:429"),
    _k("collnet", "CollNet ",
       r"CollNet (?P<channel>\d+)/(?P<conn>\d+) : (?P<rank>\d+) \[(?P<dir>send|receive)\] "
       r"via (?P<via>.+)", folds.collnet, "2.14–2.32", "v2.30.7-1:transport/coll_net.cc:187"),
    _k("tuning_row", " |", r"\s*(?P<func>[A-Za-z]+) \|(?P<cells>(?:\s*-?[\d.]+/\s*-?[\d.]+ \|)+)",
       folds.tuning_row, "2.18–2.32", "v2.30.7-1:graph/tuning.cc:560"),
    _k("tuning_algorithms", "Algorithm", r"\s*Algorithm\s*\|(?P<cells>.*)", folds.tuning_algorithms,
       "2.18–2.32", "v2.18.6-1:graph/tuning.cc:304, v2.30.7-1:graph/tuning.cc:548"),
    _k("tuning_protocols", "Protocol", r"\s*Protocol\s*\|(?P<cells>.*)", folds.tuning_protocols,
       "2.18–2.32", "v2.18.6-1:graph/tuning.cc:310, v2.30.7-1:graph/tuning.cc:556"),
    # rank 0's ring order: 2.4–2.6 "Channel %02d : " then the ranks, 2.7+ "Channel %02d/%02d :"
    _k("ring_order", "Channel ",
       r"Channel (?P<channel>\d+)(?:/(?P<nch>\d+))? :(?P<ranks>(?: +\d+)+)", folds.ring,
       "2.4–2.32", "v2.4.8-1:init.cc:541, v2.7.8-1:graph/rings.cc:35, v2.30.7-1:graph/rings.cc:48"),
    _k("ring_neighbours", "Ring ",
       r"Ring (?P<channel>\d+) : (?P<prev>-?\d+) -> \d+ -> (?P<next>-?\d+)", folds.neighbours,
       "2.10–2.32", "v2.10.3-1:init.cc:754, v2.30.7-1:init.cc:1493"),
    # 2.4 " [%d] %d->%d->%d/%d/%d", 2.5–2.11 " [%d] %d/%d/%d->%d->%d|%d->%d->%d/%d/%d", 2.12+ up only
    _k("trees", "Trees", r"Trees(?P<trees>(?: \[\d+\] \S+)*)", folds.trees,
       "2.4–2.32", "v2.4.8-1:init.cc:828, v2.7.8-1:init.cc:748, v2.30.7-1:init.cc:1497"),
    _k("init", "Init ", _INIT, folds.init, "2.4–2.32",
       "v2.4.8-1:init.cc:957, v2.7.8-1:init.cc:843, v2.17.1-1:init.cc:1123, "
       "v2.19.3-1:init.cc:1394, v2.30.7-1:init.cc:1912,1945"),
    # the same line with its fields garbled (OCR of a screenshot, a hand-edited paste)
    _k("init_complete_garbled", "Init COMPLETE",
       r".*?(?:comm (?P<comm>0x[0-9a-fA-F]+))?.*- ?Init COMPLETE", folds.init_garbled,
       "2.4–2.32", "as init"),
    _k("ended", " COMPLETE",
       r"comm (?P<comm>\S+) rank \d+ n[Rr]anks \d+ cudaDev .*?- (?P<what>\w+) COMPLETE", folds.ended,
       "2.9–2.32", "v2.12.12-1:init.cc:1047,1065"),
    # 2.3 commAlloc "comm %p rank %d nranks %d" (no cudaDev, no Init), 2.3 ncclCommInitRank
    # "rank %d nranks %d", 2.3–2.4 ncclCommInitAll "nranks %d"
    _k("comm_sized", "nranks ",
       r"(?:comm (?P<comm>0x[0-9a-fA-F]+) )?(?:rank (?P<rank>\d+) )?nranks (?P<nranks>\d+)\s*$",
       folds.comm_sized, "2.2–2.4",
       "v2.3.7-1:init.cu:174,618,736, v2.4.8-1:init.cc:1101"),
    # VERSION_STRING "NCCL version %d.%d.%d%s+cuda%d.%d": printf by rank 0 up to 2.21, INFO after
    _k("nccl_version", "NCCL version ",
       r"NCCL version (?P<version>\d+\.\d+\.\d+)(?P<suffix>[^+\s,]*)(?:\+cuda(?P<cuda>[\d.]+))?",
       folds.version, "2.4–2.32", "v2.4.8-1:init.cc:299, v2.30.7-1:init.cc:694"),
    _k("git_version", "NCCL git version ", r"NCCL git version (?P<rest>.+)", folds.git,
       "2.29–2.32", "v2.29.7-1:misc/git_version.cc:11"),
    _k("driver", "cudaDriverVersion ", r"cudaDriverVersion (?P<v>\d+)", folds.driver,
       "2.13–2.32", "v2.13.4-1:misc/cudawrap.cc:127, v2.30.7-1:misc/cudawrap.cc:282"),
    _k("timings", "Init timings",
       r"Init timings(?: - \w+)?: rank (?P<rank>\d+) nranks (?P<nranks>\d+) total (?P<total>[\d.]+) \((?P<parts>[^)]*)\)",
       folds.timings, "2.22–2.32", "v2.22.3-1:init.cc:1437, v2.30.7-1:init.cc:1951"),
    _k("topology", " nNodes ",
       r"comm (?P<comm>\S+) rank (?P<rank>\d+) nRanks (?P<nranks>\d+) nNodes (?P<nnodes>\d+) "
       r"localRanks (?P<local_ranks>\d+)", folds.topo,
       "2.20–2.32", "v2.20.5-1:init.cc:1125, v2.30.7-1:init.cc:1422"),
    _k("channels", " coll channels, ",
       r"(?P<coll>\d+) coll channels, (?:(?P<collnet>\d+) collnet channels, )?(?P<nvls>\d+) "
       r"nvls channels, (?P<p2p>\d+) p2p channels, (?P<p2p_per_peer>\d+) p2p channels per peer",
       folds.channels, "2.17–2.32", "v2.30.7-1:init.cc:1646"),
    _k("env", " set by environment to ",
       r"(?P<name>[A-Z][A-Z0-9_]*) set by environment to (?P<value>.*)", folds.env,
       "2.4–2.32", "v2.4.8-1:include/param.h:72, v2.30.7-1:bootstrap.cc:441"),
    _k("env_set_to", " set to ", r"(?P<name>NCCL_[A-Z0-9_]+) set to (?P<value>.*)", folds.env,
       "2.6–2.32", "v2.6.4-1:include/socket.h:294, v2.30.7-1:bootstrap.cc:553"),
    # 2.4–2.7 " [%d]%s:%s" per interface, 2.8–2.23 "Bootstrap : Using %s:%s", 2.24+ "Bootstrap: Using"
    _k("bootstrap", "Bootstrap",
       r"Bootstrap ?: Using (?:\[\d+\])?(?P<ifname>[^:\s]+):(?P<addr>\S+?)<\d+>", netfolds.bootstrap,
       "2.4–2.32", "v2.4.8-1:bootstrap.cc:44,48, v2.8.4-1:bootstrap.cc:45,47, "
       "v2.24.3-1:bootstrap.cc:120"),
    # 2.2–2.3 socket.h findInterfaces: one line per interface kept, then who kept them
    # ("NET : Found interface …" under NCCL_COMM_ID's subnet match)
    _k("found_interface", "NET : ",
       r"NET : (?:Using|Found) interface (?P<ifname>[^:\s]+):(?P<addr>\S+?)<\d+>",
       netfolds.found_interface, "2.2–2.3", "v2.3.5-5:include/socket.h:104,181, v2.3.7-1:include/socket.h:109"),
    _k("socket_count", "interfaces found", r"NET/Socket : (?P<n>\d+) interfaces found",
       netfolds.socket_count, "2.2–2.3", "v2.3.7-1:transport/net_socket.cu:36"),
    _k("ib_sideband", "sideband",
       r"NET/IB : Using interface (?P<ifname>\S+) for sideband communication", netfolds.ib_sideband,
       "2.2–2.3", "v2.3.7-1:transport/net_ib.cu:96"),
    _k("ib_device", "NET/IB: [", r"NET/IB: \[(?P<index>\d+)\] (?P<hca>[^:\s]+):(?P<port>\d+)/(?P<ll>\w+)",
       netfolds.ib_device, "2.3", "v2.3.7-1:transport/net_ib.cu:137"),
    # 2.3 ncclSocketDevices / ncclIbDevices: the devices the chosen network uses, with their
    # PCI distance to the GPU: "CUDA Dev 0, IP Interfaces : eth0(PHB) eth1(SOC) "
    _k("net_devices", "CUDA Dev ",
       r"CUDA Dev \d+, (?P<what>IP Interfaces|IB Ports) : (?P<devs>.*)", netfolds.net_devices,
       "2.2–2.3", "v2.3.7-1:transport/net_socket.cu:55, transport/net_ib.cu:168"),
    _k("network_internal", " Network ", r"Using (?:internal|external) Network (?P<name>\S+)",
       netfolds.network, "2.2–2.3", "v2.3.7-1:init.cu:74,77"),
    _k("plugin", "/Plugin", r"(?P<what>[A-Z]+)/Plugin ?: ?(?P<text>.*)", netfolds.plugin,
       "2.4–2.32", "v2.4.8-1:init.cc:106, v2.30.7-1:plugin/net/net_v10.cc:124"),
    # aws-ofi-nccl (NET/OFI, its own format strings: aws/aws-ofi-nccl, tag:file:line): 1.0–1.6
    # "Selected Provider is %s", 1.7–1.20 "… (found %d nics)", 1.21 "Selected provider is %s,
    # fabric is %s (found %d nics)"; 1.0.1–1.6 "Forcing AWS OFI ndev %d"
    _k("ofi_devices", "NET/OFI ",
       r"NET/OFI (?:Selected [Pp]rovider is (?P<provider>[^,(\s]+)(?:, fabric is (?P<fabric>[^(\s]+))?"
       r"(?: \(found (?P<nics>\d+) nics\))?|Forcing AWS OFI ndev (?P<ndev>\d+))", netfolds.ofi_devices,
       "2.4–2.32 (aws-ofi-nccl 1.0–1.21)", "aws-ofi-nccl v1.0.0:src/nccl_ofi_net.c:727,742(v1.0.1-aws), "
       "v1.7.0-aws:src/nccl_ofi_net.c:1006, v1.21.1:src/nccl_ofi_net.cpp:644"),
    _k("network", "Using network ", r"Using network (?P<name>.+)", netfolds.network,
       "2.6–2.32", "v2.6.4-1:init.cc:120, v2.30.7-1:init.cc:486"),
    # 2.4–2.11 "NET/IB : Using%s ; OOB %s:%s", 2.12+ "NET/IB : Using%s %s; OOB" (%s: [RO] or "")
    _k("ib_devices", "NET/IB",
       r"NET/IB ?: Using(?P<devs>[^;]*)(?:; OOB (?P<oob>\S+))?", netfolds.ib_devices,
       "2.4–2.32", "v2.4.8-1:transport/net_ib.cc:168, v2.12.12-1:transport/net_ib.cc:248, "
       "v2.30.7-1:transport/net_ib/init.cc:513"),
    _k("ib_no_device", "NET/IB", r"NET/IB ?: No device found", netfolds.ib_none,
       "2.4–2.32", "v2.4.8-1:transport/net_ib.cc:158, v2.30.7-1:transport/net_ib/init.cc:470"),
    _k("socket_interfaces", "NET/Socket",
       r"NET/Socket ?: Using(?P<ifs>(?: \[\d+\]\S+)+)", netfolds.socket_ifs,
       "2.4–2.32", "v2.4.8-1:transport/net_socket.cc:44, v2.30.7-1:transport/net_socket.cc:77"),
    # 2.5–2.12 net_ib.cc "NET/IB : GPU Direct RDMA Disabled for HCA %d '%s' (no module)",
    # 2.13+ graph/topo.cc "NET/%s : GPU Direct RDMA %s for HCA %d '%s'"
    _k("gdr_hca", "GPU Direct RDMA",
       r"NET/\w+ ?: GPU Direct RDMA (?P<state>Enabled|Disabled) for HCA \d+ '(?P<hca>[^']*)'",
       folds.gdr_hca, "2.4–2.32",
       "v2.5.7-1:transport/net_ib.cc:211, v2.13.4-1:graph/topo.cc:643, v2.30.7-1:graph/topo.cc:1653"),
    # 2.4–2.6 net.cc "NET/%s : … (distance %d >= %d)" / "(distance %d < %d)", 2.7+ paths.cc "> / <="
    _k("gdr_pair", "GPU Direct RDMA",
       r"(?:NET/\w+ ?: )?GPU Direct RDMA (?P<state>Enabled|Disabled) for GPU (?P<gpu>\S+) / HCA "
       r"(?P<hca>\S+) \(distance (?P<distance>\d+) (?:>=?|<=?) (?P<limit>\d+)\)", folds.gdr_pair,
       "2.4–2.29", "v2.4.8-1:transport/net.cc:271,280, v2.28.9-1:graph/paths.cc:483"),
    _k("connected_rings", "Connected all rings",
       r"Connected all rings(?:, use ring PXN (?P<pxn>\d+) GDR (?P<gdr>\d+))?", folds.connected_rings,
       "2.8–2.32", "v2.8.4-1:init.cc:814, v2.30.7-1:transport/generic.cc:40"),
    _k("connected_trees", "Connected all trees", r"Connected all trees", folds.connected_trees,
       "2.8–2.32", "v2.8.4-1:init.cc:824, v2.30.7-1:transport/generic.cc:61"),
    _k("nvls", "NVLS", r"NVLS comm |Connected NVLS", folds.nvls,
       "2.17–2.32", "v2.17.1-1:transport/nvls.cc:262, v2.30.7-1:transport/nvls.cc:433"),
    # "%s:%d -> %d", 2.30.7 "%s:%d (%s) -> %d"
    _k("backtrace", " -> ",
       r"(?P<file>\S+):(?P<line>\d+)(?: \((?P<func>[^)]*)\))? -> (?P<code>\d+)", folds.backtrace,
       "2.4–2.32", "v2.4.8-1:include/checks.h:59, v2.30.7-1:include/checks.h"),
    # misc/socket.cc retries (≤2.23, 2.24–2.26, 2.27+ shapes)
    _k("connect_retry", "retrying",
       r"(?:\w+: )?(?:Call to )?connect (?:to (?P<peer>\S+) )?returned .*retrying", netfolds.retry,
       "2.4–2.32", "v2.4.8-1:include/checks.h:48, v2.30.7-1:include/checks.h:72"),
    _k("hint", "HINT:", r"HINT:", folds.hint, "2.30–2.32", "v2.30.7-1:graph/xml.h:415"),
)  # fmt: skip


# WARN lines that carry a fact besides their signature: matched anywhere in the message (the
# function names in front changed with every release). One entry per kind, as KINDS.
WARN_KINDS: tuple[LineKind, ...] = (
    # ≤2.3 SYSCHECK "Call to connect failed : %s", SYSCHECKNTIMES "Call to connect timeout : %s"; 2.4–2.11 "Connect to %s failed : %s", 2.12–2.18
    # "Net : Connect to …", 2.19–2.26 "socketStartConnect: Connect to …" and "socketPollConnect:
    # connect returned %s, exceeded …" (no target); 2.27+ "%s: connect to %s returned %s,
    # exceeded error retry count …", "%s: connect to %s failed : %s", "socketPollConnect to %s
    # failed with error %s"
    _k("connect_failed", "onnect",
       r"(?:[Cc]onnect to (?P<peer>\S+)|[Cc]all to connect|: connect(?= returned)) "
       r"(?:(?:failed(?: with error)?|timeout) :? ?|returned )(?P<error>[^,]+)", netfolds.connect_failed,
       "2.2–2.32", "v2.3.7-1:include/core.h:282,298, v2.4.8-1:include/socket.h:390, "
       "v2.12.12-1:misc/socket.cc:450, v2.19.3-1:misc/socket.cc:484, v2.27.7-1:misc/socket.cc:578,592,618, "
       "v2.30.7-1:os/linux.cc:288"),
    _k("checked_in", "already checked in",
       r"rank \d+ of (?P<nranks>\d+) ranks has already checked in", folds.checked_in,
       "2.4–2.32", "v2.4.8-1:bootstrap.cc:210, v2.30.7-1:bootstrap.cc:348"),
)  # fmt: skip


def warned(p: ProcessLog, e: Envelope) -> None:
    """Fold the facts of one WARN (or ATTN) line: its WARN_KINDS, and the network a failing line
    belongs to."""
    for kind in WARN_KINDS:
        if kind.needle in e.msg:
            m = kind.pattern.search(e.msg)
            if m is not None:
                kind.fold(p, m, e)
    netfolds.failed_net(p, netfolds.failing_net(e.msg, e.head.file))


def match_kind(msg: str) -> tuple[LineKind, re.Match[str]] | None:
    """The first kind whose needle and pattern match ``msg`` (the text after ``NCCL INFO``)."""
    for kind in KINDS:
        if kind.needle in msg:
            m = kind.pattern.match(msg)
            if m is not None:
                return kind, m
    return None


TextFold = Callable[[LogSet, "re.Match[str]", str], None]


class TextKind(NamedTuple):
    """A line that is not NCCL's (PyTorch's, a launcher's) with a fact the parser keeps."""

    name: str
    needles: tuple[str, ...]  # the line holds one of them (digit-free: see the parser's shapes)
    pattern: re.Pattern[str]  # searched anywhere in the line
    fold: TextFold  # writes the match into the parse result
    source: str  # where the text is printed


# docs/nccl-log-formats.md#pytorch
TEXT_KINDS: tuple[TextKind, ...] = (
    # c10d's "world_size=8", torchrun's env dump "WORLD_SIZE=8" and "global_world_sizes=[8, 8]"
    # (not "group_world_size", which counts nodes)
    TextKind("world_size", ("orld_size", "WORLD_SIZE"),
             re.compile(r"(?<![\w])(?:WORLD_SIZE|world_size|global_world_sizes)\s*[=:]\s*\[?(\d+)"),
             folds.world_size, "torch/distributed/{rendezvous.py,elastic/agent/server/api.py}"),
    # the watchdog's "WorkNCCL(SeqNum=12, …" and "last completed work: 2634", the rank from
    # c10d's "[Rank N]" / "[PG ID 0 PG GUID 0 Rank N]" or torchrun's "[rankN]:"
    TextKind("completed_seq", ("SeqNum=", "last completed"),
             re.compile(r"\[(?:PG ID \S+ PG GUID \S+ )?Rank (\d+)\]|\[rank(\d+)\]:"),
             folds.completed_seq, "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"),
    TextKind("init_failed", ("ncclCommInitRank", "init_process_group"), re.compile(r"rror|ailed"),
             folds.init_failed, "torch/csrc/distributed/c10d/NCCLUtils.cpp, distributed_c10d.py"),
)  # fmt: skip
