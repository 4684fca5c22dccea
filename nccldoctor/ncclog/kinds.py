"""The line kinds: one table entry per kind of NCCL INFO line worth knowing (folds in folds.py).

An entry is (name, needle, pattern, fold): ``needle`` is a substring every such message
contains, tested with ``in`` before the regex runs; ``pattern`` is matched at the start of the
message (the text after ``NCCL INFO``); ``fold`` writes the match into the process record.
The first entry whose needle and pattern both match wins. Adding a kind is adding one entry.
Format strings are quoted from NCCL's source (file named per entry; the versions and lines are
described in docs/nccl-log-formats.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

from nccldoctor.ncclog import folds
from nccldoctor.ncclog.envelope import Envelope
from nccldoctor.ncclog.records import ProcessLog

Fold = Callable[[ProcessLog, "re.Match[str]", Envelope], None]


class LineKind(NamedTuple):
    name: str
    needle: str
    pattern: re.Pattern[str]
    fold: Fold
    repeats: bool = False  # identical lines recur (one per call): the parser memoises them


def _k(name: str, needle: str, pattern: str, fold: Fold, repeats: bool = False) -> LineKind:
    return LineKind(name, needle, re.compile(pattern), fold, repeats)


_INIT = (
    r"(?:\[Rank \d+\] )?(?:(?P<api>\w+) )?comm (?P<comm>\S+) rank (?P<rank>\d+) nranks "
    r"(?P<nranks>\d+) cudaDev (?P<cuda_dev>-?\d+) nvmlDev (?P<nvml_dev>-?\d+) busId "
    r"(?P<bus_id>[0-9a-fA-F]+)(?: commId (?P<comm_id>0x[0-9a-fA-F]+))?.*?- ?Init "
    r"(?P<phase>START|COMPLETE)"
)
_VIA = (
    r"Channel (?P<channel>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)\[\d+\] -> (?P<dst>\d+)\[\d+\] "
    r"(?:\[(?P<dir>send|receive)\] )?via (?P<via>.+)"
)

KINDS: tuple[LineKind, ...] = (
    # collectives first: with NCCL_DEBUG_SUBSYS=COLL they are most of the log (enqueue.cc)
    _k("coll", ": opCount ",
       r"(?P<func>\w+): opCount (?P<op>[0-9a-fA-F]+) sendbuff \S+ recvbuff \S+ count "
       r"(?P<count>\d+) datatype (?P<dtype>\d+) op (?P<redop>\d+) root (?P<root>-?\d+) "
       r"comm (?P<comm>\S+) \[nranks=(?P<nranks>\d+)\]", folds.coll),
    # per-call algorithm (enqueue.cc: 2.20–2.22 no name, 2.23 numeric, 2.24+ names)
    _k("algorithm", " Bytes -> Algo ",
       r"(?:(?P<func>\w+): )?(?P<bytes>\d+) Bytes -> Algo (?P<algo>\w+) proto (?P<proto>\w+)",
       folds.algo, repeats=True),
    _k("algorithm_special", " Bytes -> ",
       r"(?P<func>\w+) \[(?P<how>Symmetric|Copy Engine|Hierarchical CE)\]: (?P<bytes>\d+) "
       r"Bytes -> (?P<detail>.+)", folds.special_algo, repeats=True),
    # 2.32 (binary strings, docs/nccl-log-formats.md#nccl-2-32): every rank, every call, no size
    _k("best_tuning", "Best tuning, ",
       r"Best tuning, algorithm, (?P<algo>\w+), protocol, (?P<proto>\w+)", folds.best_tuning,
       repeats=True),
    _k("transport", " via ", _VIA, folds.connection),
    _k("collnet", "CollNet ",
       r"CollNet (?P<channel>\d+)/(?P<conn>\d+) : (?P<rank>\d+) \[(?P<dir>send|receive)\] "
       r"via (?P<via>.+)", folds.collnet),
    _k("tuning_row", " |", r"\s*(?P<func>[A-Za-z]+) \|(?P<cells>(?:\s*-?[\d.]+/\s*-?[\d.]+ \|)+)",
       folds.tuning_row),
    _k("tuning_algorithms", "Algorithm", r"\s*Algorithm\s*\|(?P<cells>.*)", folds.tuning_algorithms),
    _k("tuning_protocols", "Protocol", r"\s*Protocol\s*\|(?P<cells>.*)", folds.tuning_protocols),
    _k("ring_order", "Channel ",
       r"Channel (?P<channel>\d+)/(?P<nch>\d+) :(?P<ranks>(?: +\d+)+)", folds.ring),
    _k("ring_neighbours", "Ring ",
       r"Ring (?P<channel>\d+) : (?P<prev>-?\d+) -> \d+ -> (?P<next>-?\d+)", folds.neighbours),
    _k("trees", "Trees", r"Trees(?P<trees>(?: \[\d+\] \S+)*)", folds.trees),
    _k("init", "Init ", _INIT, folds.init),
    _k("ended", " COMPLETE",
       r"comm (?P<comm>\S+) rank \d+ n[Rr]anks \d+ cudaDev .*?- (?P<what>\w+) COMPLETE", folds.ended),
    _k("nccl_version", "NCCL version ",
       r"NCCL version (?P<version>\d+\.\d+\.\d+)(?P<suffix>[^+\s]*)\+cuda(?P<cuda>[\d.]+)",
       folds.version),
    _k("git_version", "NCCL git version ", r"NCCL git version (?P<rest>.+)", folds.git),
    _k("driver", "cudaDriverVersion ", r"cudaDriverVersion (?P<v>\d+)", folds.driver),
    _k("timings", "Init timings",
       r"Init timings(?: - \w+)?: rank \d+ nranks \d+ total (?P<total>[\d.]+) \((?P<parts>[^)]*)\)",
       folds.timings),
    _k("topology", " nNodes ",
       r"comm (?P<comm>\S+) rank (?P<rank>\d+) nRanks (?P<nranks>\d+) nNodes (?P<nnodes>\d+) "
       r"localRanks (?P<local_ranks>\d+)", folds.topo),
    _k("channels", " coll channels, ",
       r"(?P<coll>\d+) coll channels, (?:(?P<collnet>\d+) collnet channels, )?(?P<nvls>\d+) "
       r"nvls channels, (?P<p2p>\d+) p2p channels, (?P<p2p_per_peer>\d+) p2p channels per peer",
       folds.channels),
    _k("env", " set by environment to ",
       r"(?P<name>[A-Z][A-Z0-9_]*) set by environment to (?P<value>.*)", folds.env),
    _k("env_set_to", " set to ", r"(?P<name>NCCL_[A-Z0-9_]+) set to (?P<value>.*)", folds.env),
    _k("bootstrap", "Bootstrap",
       r"Bootstrap ?: Using (?P<ifname>[^:\s]+):(?P<addr>\S+?)<\d+>", folds.bootstrap),
    _k("plugin", "/Plugin", r"(?P<what>[A-Z]+)/Plugin ?: ?(?P<text>.*)", folds.plugin),
    _k("network", "Using network ", r"Using network (?P<name>.+)", folds.network),
    _k("ib_devices", "NET/IB",
       r"NET/IB ?: Using(?P<devs>[^;]*)(?:; OOB (?P<oob>\S+))?", folds.ib_devices),
    _k("ib_no_device", "NET/IB", r"NET/IB ?: No device found", folds.ib_none),
    _k("socket_interfaces", "NET/Socket",
       r"NET/Socket ?: Using(?P<ifs>(?: \[\d+\]\S+)+)", folds.socket_ifs),
    _k("gdr_hca", "GPU Direct RDMA",
       r"NET/\w+ ?: GPU Direct RDMA (?P<state>Enabled|Disabled) for HCA \d+ '(?P<hca>[^']*)'",
       folds.gdr_hca),
    _k("gdr_pair", "GPU Direct RDMA",
       r"GPU Direct RDMA (?P<state>Enabled|Disabled) for GPU (?P<gpu>\S+) / HCA (?P<hca>\S+) "
       r"\(distance (?P<distance>\d+) (?:>|<=) (?P<limit>\d+)\)", folds.gdr_pair),
    _k("connected_rings", "Connected all rings",
       r"Connected all rings(?:, use ring PXN (?P<pxn>\d+) GDR (?P<gdr>\d+))?", folds.connected_rings),
    _k("connected_trees", "Connected all trees", r"Connected all trees", folds.connected_trees),
    _k("nvls", "NVLS", r"NVLS comm |Connected NVLS", folds.nvls),
    # include/checks.h back-trace: "%s:%d -> %d", 2.30.7 "%s:%d (%s) -> %d"
    _k("backtrace", " -> ",
       r"(?P<file>\S+):(?P<line>\d+)(?: \((?P<func>[^)]*)\))? -> (?P<code>\d+)", folds.backtrace),
    # misc/socket.cc retries (≤2.23, 2.24–2.26, 2.27+ shapes)
    _k("connect_retry", "retrying",
       r"(?:\w+: )?(?:Call to )?connect (?:to (?P<peer>\S+) )?returned .*retrying", folds.retry),
    _k("hint", "HINT:", r"HINT:", folds.hint),
)  # fmt: skip


def match_kind(msg: str) -> tuple[LineKind, re.Match[str]] | None:
    """The first kind whose needle and pattern match ``msg`` (the text after ``NCCL INFO``)."""
    for kind in KINDS:
        if kind.needle in msg:
            m = kind.pattern.match(msg)
            if m is not None:
                return kind, m
    return None
