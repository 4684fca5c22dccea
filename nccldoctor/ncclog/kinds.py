"""The line kinds: one table entry per kind of NCCL INFO line worth knowing.

An entry is (name, needle, pattern, fold): ``needle`` is a substring every such message
contains, tested with ``in`` before the regex runs; ``pattern`` is matched at the start of the
message (the text after ``NCCL INFO``); ``fold`` writes the match into the process record.
The first entry whose needle and pattern both match wins. Adding a kind is adding one entry.
Format strings are quoted from NCCL's source (file named per entry; versions as in
reference/nccl-logs.md, whose section is given as §n).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

from nccldoctor.ncclog.envelope import Envelope
from nccldoctor.ncclog.records import MAX_RING_CHANNELS, Op, ProcessLog

Fold = Callable[[ProcessLog, "re.Match[str]", Envelope], None]


class LineKind(NamedTuple):
    name: str
    needle: str
    pattern: re.Pattern[str]
    fold: Fold
    repeats: bool = False  # identical lines recur (one per call): the parser memoises them


# Names as the tuning table and NCCL_ALGO spell them (src/include/device.h, enqueue.cc).
ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOCOLS = ("LL", "LL128", "Simple")
_CANON = {n.upper(): n for n in ALGORITHMS + PROTOCOLS}
_CANON.update({"COLLNET_DIRECT": "CollNetDirect", "COLLNET_CHAIN": "CollNetChain"})
_CANON["NVLS_TREE"] = "NVLSTree"


def canonical(name: str, numbered: tuple[str, ...]) -> str:
    """``RING``/``1``/``Ring`` -> ``Ring`` (per-call lines are upper case 2.24+, numeric 2.20–2.23)."""
    if name.isdigit():
        idx = int(name)
        return numbered[idx] if idx < len(numbered) else name
    return _CANON.get(name.upper(), name)


def transport_label(via: str) -> str:
    """The transport class of a ``via …`` text: ``NET/IB/0/GDRDMA``, ``P2P/CUMEM``, ``SHM``."""
    parts = via.split("/")
    kind = parts[0]
    if kind == "P2P" and len(parts) > 1:
        return f"P2P/{parts[1]}"
    if kind == "SHM":
        return "SHM"
    if kind in ("NET", "COLLNET") and len(parts) > 2:
        dev = parts[2].split("(")[0]  # "2(1)" = device 2 through PXN proxy rank 1
        return f"{kind}/{parts[1]}/{dev}" + ("/GDRDMA" if "GDRDMA" in via else "")
    return via


def _int(text: str | None) -> int | None:
    return int(text) if text is not None else None


# ---- folds: each writes one kind of line into the process record -------------------------


def _version(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.nccl_version = m["version"] + (m["suffix"] or "")
    p.cuda_version = m["cuda"]


def _git(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.git_version = m["rest"]


def _driver(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.driver_version = int(m["v"])


def _init(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    c = p.comm(m["comm"])
    if m["phase"] == "START":
        p.current = m["comm"]
        c.init_start = True
    else:
        c.init_complete = True
    c.api = m["api"] or c.api
    c.rank, c.nranks = int(m["rank"]), int(m["nranks"])
    c.cuda_dev, c.nvml_dev, c.bus_id = int(m["cuda_dev"]), int(m["nvml_dev"]), m["bus_id"]
    c.comm_id = m["comm_id"] or c.comm_id


def _ended(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.comm(m["comm"]).ended = m["what"]


def _timings(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    c = p.comm()
    c.timings = {"total": float(m["total"])}
    for part in m["parts"].split(","):
        name, _, value = part.strip().partition(" ")
        try:
            c.timings[name] = float(value)
        except ValueError:
            continue


def _topo(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    c = p.comm(m["comm"])
    c.nnodes, c.local_ranks = int(m["nnodes"]), int(m["local_ranks"])
    c.rank, c.nranks = int(m["rank"]), int(m["nranks"])


def _channels(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.comm().channels = {k: int(v) for k, v in m.groupdict().items() if v is not None}


def _env(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    value = m["value"]
    if value.endswith(".") and value[:-1].lstrip("-").isdigit():
        value = value[:-1]  # integer params end with a period (misc/param.cc)
    p.env[m["name"]] = value


def _bootstrap(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.bootstrap = {"ifname": m["ifname"], "address": m["addr"]}


def _plugin(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.plugins[m["what"]] = m["text"].strip()


def _network(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    if m["name"] not in p.networks:
        p.networks.append(m["name"])


_IB_DEV = re.compile(r"\[(\d+)\]([^:\s]+):(\d+)(?::[\d:]*)?/(\w+)")
_SOCK_IF = re.compile(r"\[(\d+)\]([^:\s]+):(\S+?)<\d+>")


def _ib_devices(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.ib_devices = [
        {"index": int(i), "hca": hca, "port": int(port), "link_layer": ll}
        for i, hca, port, ll in _IB_DEV.findall(m["devs"])
    ]
    p.ib_relaxed_ordering = "[RO]" in m["devs"]
    p.ib_oob = m["oob"]


def _ib_none(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.ib_no_device = True


def _socket_ifs(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.socket_ifs = [{"ifname": n, "address": a} for _, n, a in _SOCK_IF.findall(m["ifs"])]


def _gdr_hca(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.gdr_hca[m["hca"]] = m["state"] == "Enabled"


def _gdr_pair(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    if len(p.gdr_pairs) < 64:
        p.gdr_pairs.append(
            {
                "enabled": m["state"] == "Enabled",
                "gpu": m["gpu"],
                "hca": m["hca"],
                "distance": int(m["distance"]),
                "limit": int(m["limit"]),
            }
        )


def _connection(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    via = m["via"].strip()
    key = (int(m["channel"]), _int(m["conn"]), int(m["src"]), int(m["dst"]), m["dir"])
    p.comm().add_connection(key, transport_label(via))


def _collnet(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    via = m["via"].strip()
    key = (int(m["channel"]), int(m["conn"]), int(m["rank"]), -1, m["dir"])
    p.comm().add_connection(key, transport_label(via))


def _ring(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    c = p.comm()
    if len(c.rings) < MAX_RING_CHANNELS:
        c.rings[int(m["channel"])] = [int(r) for r in m["ranks"].split()]


def _neighbours(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    c = p.comm()
    if len(c.ring_neighbours) < MAX_RING_CHANNELS:
        c.ring_neighbours[int(m["channel"])] = (int(m["prev"]), int(m["next"]))


_TREE = re.compile(r"\[(\d+)\] (\S+)")


def _trees(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    c = p.comm()
    for channel, shape in _TREE.findall(m["trees"])[:MAX_RING_CHANNELS]:
        c.trees[int(channel)] = shape


def _connected_rings(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    c = p.comm()
    c.connected_rings = True
    c.ring_pxn, c.ring_gdr = _int(m["pxn"]), _int(m["gdr"])


def _connected_trees(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.comm().connected_trees = True


def _nvls(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.comm().nvls = True


def _cells(text: str) -> list[str]:
    return [cell.strip() for cell in text.split("|")]


def _tuning_algorithms(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.comm().tuning.algorithms = [a for a in _cells(m["cells"]) if a]


def _tuning_protocols(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.comm().tuning.protocols = [a for a in _cells(m["cells"]) if a]


def _tuning_row(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    table = p.comm().tuning
    algos, protos = table.algorithms, table.protocols
    if not algos or not protos:
        return  # a row without its header (the log starts mid-table)
    per_algo = max(1, len(protos) // len(algos))
    row = table.rows.setdefault(m["func"], {})
    for i, cell in enumerate(c for c in _cells(m["cells"]) if c):
        lat, _, bw = cell.partition("/")
        if i // per_algo < len(algos) and i < len(protos):
            try:
                row[(algos[i // per_algo], protos[i])] = (float(lat), float(bw))
            except ValueError:
                continue


def _algo(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    algo = canonical(m["algo"], ALGORITHMS)
    proto = canonical(m["proto"], PROTOCOLS)
    c = p.comm()
    # 2.20–2.22 print no function name: the collective traced just before is the one tuned
    func = m["func"] or (c.last_op.func if c.last_op else "?")
    c.add_algo(func, algo, proto, int(m["bytes"]))


def _special_algo(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.comm().add_algo(m["func"], m["how"], m["detail"].split()[0], int(m["bytes"]))


def _coll(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    c = p.comm(m["comm"])
    c.nranks = c.nranks or int(m["nranks"])
    c.add_op(
        Op(
            int(m["op"], 16),
            m["func"],
            int(m["count"]),
            int(m["dtype"]),
            int(m["redop"]),
            int(m["root"]),
        )
    )


def _backtrace(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.error_code = int(m["code"])
    if len(p.backtrace) < 32:
        p.backtrace.append(e.msg)


def _retry(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    peer = m["peer"] or "?"
    if peer in p.connect_retries or len(p.connect_retries) < 64:
        p.connect_retries[peer] = p.connect_retries.get(peer, 0) + 1


def _hint(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    if p.warns and len(p.warns[-1].hints) < 8:
        p.warns[-1].hints.append(e.msg)


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
       r"comm (?P<comm>\S+) \[nranks=(?P<nranks>\d+)\]", _coll),
    # per-call algorithm (enqueue.cc: 2.20–2.22 no name, 2.23 numeric, 2.24+ names)
    _k("algorithm", " Bytes -> Algo ",
       r"(?:(?P<func>\w+): )?(?P<bytes>\d+) Bytes -> Algo (?P<algo>\w+) proto (?P<proto>\w+)",
       _algo, repeats=True),
    _k("algorithm_special", " Bytes -> ",
       r"(?P<func>\w+) \[(?P<how>Symmetric|Copy Engine|Hierarchical CE)\]: (?P<bytes>\d+) "
       r"Bytes -> (?P<detail>.+)", _special_algo, repeats=True),
    _k("transport", " via ", _VIA, _connection),
    _k("collnet", "CollNet ",
       r"CollNet (?P<channel>\d+)/(?P<conn>\d+) : (?P<rank>\d+) \[(?P<dir>send|receive)\] "
       r"via (?P<via>.+)", _collnet),
    _k("tuning_row", " |", r"\s*(?P<func>[A-Za-z]+) \|(?P<cells>(?:\s*-?[\d.]+/\s*-?[\d.]+ \|)+)",
       _tuning_row),
    _k("tuning_algorithms", "Algorithm", r"\s*Algorithm\s*\|(?P<cells>.*)", _tuning_algorithms),
    _k("tuning_protocols", "Protocol", r"\s*Protocol\s*\|(?P<cells>.*)", _tuning_protocols),
    _k("ring_order", "Channel ",
       r"Channel (?P<channel>\d+)/(?P<nch>\d+) :(?P<ranks>(?: +\d+)+)", _ring),
    _k("ring_neighbours", "Ring ",
       r"Ring (?P<channel>\d+) : (?P<prev>-?\d+) -> \d+ -> (?P<next>-?\d+)", _neighbours),
    _k("trees", "Trees", r"Trees(?P<trees>(?: \[\d+\] \S+)*)", _trees),
    _k("init", "Init ", _INIT, _init),
    _k("ended", " COMPLETE",
       r"comm (?P<comm>\S+) rank \d+ n[Rr]anks \d+ cudaDev .*?- (?P<what>\w+) COMPLETE", _ended),
    _k("nccl_version", "NCCL version ",
       r"NCCL version (?P<version>\d+\.\d+\.\d+)(?P<suffix>[^+\s]*)\+cuda(?P<cuda>[\d.]+)",
       _version),
    _k("git_version", "NCCL git version ", r"NCCL git version (?P<rest>.+)", _git),
    _k("driver", "cudaDriverVersion ", r"cudaDriverVersion (?P<v>\d+)", _driver),
    _k("timings", "Init timings",
       r"Init timings(?: - \w+)?: rank \d+ nranks \d+ total (?P<total>[\d.]+) \((?P<parts>[^)]*)\)",
       _timings),
    _k("topology", " nNodes ",
       r"comm (?P<comm>\S+) rank (?P<rank>\d+) nRanks (?P<nranks>\d+) nNodes (?P<nnodes>\d+) "
       r"localRanks (?P<local_ranks>\d+)", _topo),
    _k("channels", " coll channels, ",
       r"(?P<coll>\d+) coll channels, (?:(?P<collnet>\d+) collnet channels, )?(?P<nvls>\d+) "
       r"nvls channels, (?P<p2p>\d+) p2p channels, (?P<p2p_per_peer>\d+) p2p channels per peer",
       _channels),
    _k("env", " set by environment to ",
       r"(?P<name>[A-Z][A-Z0-9_]*) set by environment to (?P<value>.*)", _env),
    _k("env_set_to", " set to ", r"(?P<name>NCCL_[A-Z0-9_]+) set to (?P<value>.*)", _env),
    _k("bootstrap", "Bootstrap",
       r"Bootstrap ?: Using (?P<ifname>[^:\s]+):(?P<addr>\S+?)<\d+>", _bootstrap),
    _k("plugin", "/Plugin", r"(?P<what>[A-Z]+)/Plugin ?: ?(?P<text>.*)", _plugin),
    _k("network", "Using network ", r"Using network (?P<name>.+)", _network),
    _k("ib_devices", "NET/IB",
       r"NET/IB ?: Using(?P<devs>[^;]*)(?:; OOB (?P<oob>\S+))?", _ib_devices),
    _k("ib_no_device", "NET/IB", r"NET/IB ?: No device found", _ib_none),
    _k("socket_interfaces", "NET/Socket",
       r"NET/Socket ?: Using(?P<ifs>(?: \[\d+\]\S+)+)", _socket_ifs),
    _k("gdr_hca", "GPU Direct RDMA",
       r"NET/\w+ ?: GPU Direct RDMA (?P<state>Enabled|Disabled) for HCA \d+ '(?P<hca>[^']*)'",
       _gdr_hca),
    _k("gdr_pair", "GPU Direct RDMA",
       r"GPU Direct RDMA (?P<state>Enabled|Disabled) for GPU (?P<gpu>\S+) / HCA (?P<hca>\S+) "
       r"\(distance (?P<distance>\d+) (?:>|<=) (?P<limit>\d+)\)", _gdr_pair),
    _k("connected_rings", "Connected all rings",
       r"Connected all rings(?:, use ring PXN (?P<pxn>\d+) GDR (?P<gdr>\d+))?", _connected_rings),
    _k("connected_trees", "Connected all trees", r"Connected all trees", _connected_trees),
    _k("nvls", "NVLS", r"NVLS comm |Connected NVLS", _nvls),
    # include/checks.h back-trace: "%s:%d -> %d", 2.30.7 "%s:%d (%s) -> %d"
    _k("backtrace", " -> ",
       r"(?P<file>\S+):(?P<line>\d+)(?: \((?P<func>[^)]*)\))? -> (?P<code>\d+)", _backtrace),
    # misc/socket.cc retries (≤2.23, 2.24–2.26, 2.27+ shapes)
    _k("connect_retry", "retrying",
       r"(?:\w+: )?(?:Call to )?connect (?:to (?P<peer>\S+) )?returned .*retrying", _retry),
    _k("hint", "HINT:", r"HINT:", _hint),
)  # fmt: skip


def match_kind(msg: str) -> tuple[LineKind, re.Match[str]] | None:
    """The first kind whose needle and pattern match ``msg`` (the text after ``NCCL INFO``)."""
    for kind in KINDS:
        if kind.needle in msg:
            m = kind.pattern.match(msg)
            if m is not None:
                return kind, m
    return None
