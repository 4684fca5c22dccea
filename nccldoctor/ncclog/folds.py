"""How each kind of NCCL line changes the process record: one small function per kind.

The functions are the ``fold`` of the entries in :mod:`nccldoctor.ncclog.kinds`; each takes the
process record, the regex match and the line's envelope. Names here follow NCCL's own spelling
(src/include/device.h, graph/tuning.cc, enqueue.cc).
"""

from __future__ import annotations

import functools
import re

from nccldoctor.ncclog.envelope import Envelope
from nccldoctor.ncclog.netfolds import failed_net, failing_net, quote
from nccldoctor.ncclog.records import (
    MAX_BACKTRACE,
    MAX_LISTED,
    MAX_RING_CHANNELS,
    LogSet,
    Op,
    ProcessLog,
)

# Names as the tuning table and NCCL_ALGO spell them (src/include/device.h, enqueue.cc).
ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOCOLS = ("LL", "LL128", "Simple")
_CANON = {n.upper(): n for n in ALGORITHMS + PROTOCOLS}
_CANON.update({"COLLNET_DIRECT": "CollNetDirect", "COLLNET_CHAIN": "CollNetChain"})
_CANON["NVLS_TREE"] = "NVLSTree"


@functools.lru_cache(maxsize=256)  # twice per call on rank 0: the same few names
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
    if kind == "SHM" or via.startswith("direct shared memory"):  # ≤2.12 spelling of SHM
        return "SHM"
    if kind in ("NET", "COLLNET") and len(parts) > 2:
        dev = parts[2].split("(")[0]  # "2(1)" = device 2 through PXN proxy rank 1
        return f"{kind}/{parts[1]}/{dev}" + ("/GDRDMA" if "GDRDMA" in via else "")
    return via


def _int(text: str | None) -> int | None:
    return int(text) if text is not None else None


# ---- folds: each writes one kind of line into the process record -------------------------


def version(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.nccl_version = m["version"] + (m["suffix"] or "")
    p.cuda_version = m["cuda"] or p.cuda_version


def git(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.git_version = m["rest"]


def driver(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.driver_version = int(m["v"])


def init(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    if m["phase"] == "COMPLETE" and p.current is None:
        p.adopt(m["comm"])  # ≤2.18 print no START: the lines before were this init's
    c = p.comm(m["comm"])
    if m["phase"] == "START":
        p.current = m["comm"]
        c.init_start = True
    else:
        c.init_complete = True
    c.api = m["api"] or c.api
    c.rank, c.nranks = int(m["rank"]), int(m["nranks"])
    c.cuda_dev, c.nvml_dev = int(m["cuda_dev"]), _int(m["nvml_dev"])  # no nvmlDev 2.5–2.18
    c.bus_id = m["bus_id"] or c.bus_id  # no busId in 2.4
    c.comm_id = m["comm_id"] or c.comm_id


def init_garbled(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    if p.current is None and m["comm"]:
        p.adopt(m["comm"])
    p.comm(m["comm"]).init_complete = True


def comm_sized(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    """2.3 "comm %p rank %d nranks %d" (no Init START/COMPLETE yet): the lines after it are
    this communicator's init; 2.3 "rank %d nranks %d", 2.3–2.4 "nranks %d" (ncclCommInitAll)
    name no communicator."""
    if m["comm"]:
        p.current = m["comm"]
    c = p.comm(m["comm"])
    if m["rank"] is not None:
        c.rank = int(m["rank"])
    c.nranks = int(m["nranks"])


def ended(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.comm(m["comm"]).ended = m["what"]


def timings(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    c = p.comm()
    c.rank, c.nranks = (
        c.rank if c.rank is not None else int(m["rank"]),
        c.nranks or int(m["nranks"]),
    )
    c.init_complete = True  # printed right after Init COMPLETE (v2.22.3-1:init.cc:1434-1437)
    c.timings = {"total": float(m["total"])}
    for part in m["parts"].split(","):
        name, _, value = part.strip().partition(" ")
        try:
            c.timings[name] = float(value)
        except ValueError:
            continue


def topo(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    c = p.comm(m["comm"])
    c.nnodes, c.local_ranks = int(m["nnodes"]), int(m["local_ranks"])
    c.rank, c.nranks = int(m["rank"]), int(m["nranks"])


def channels(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.comm().channels = {k: int(v) for k, v in m.groupdict().items() if v is not None}


def env(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    value = m["value"]
    if value.endswith(".") and value[:-1].lstrip("-").isdigit():
        value = value[:-1]  # integer params end with a period (misc/param.cc)
    p.env[m["name"]] = value
    if m["name"].startswith("NCCL_SOCKET_"):  # what the network rules read of the env
        quote(p, m["name"])


def gdr_hca(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.gdr_hca[m["hca"]] = m["state"] == "Enabled"


def gdr_pair(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    if len(p.gdr_pairs) < MAX_LISTED:
        p.gdr_pairs.append(
            {
                "enabled": m["state"] == "Enabled",
                "gpu": m["gpu"],
                "hca": m["hca"],
                "distance": int(m["distance"]),
                "limit": int(m["limit"]),
            }
        )


def connection(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    via = m["via"].strip()
    key = (int(m["channel"]), _int(m["conn"]), int(m["src"]), int(m["dst"]), m["dir"])
    p.comm().add_connection(key, transport_label(via))


def collnet(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    via = m["via"].strip()
    key = (int(m["channel"]), int(m["conn"]), int(m["rank"]), -1, m["dir"])
    p.comm().add_connection(key, transport_label(via))


def ring(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    c = p.comm()
    if len(c.rings) < MAX_RING_CHANNELS:
        c.rings[int(m["channel"])] = [int(r) for r in m["ranks"].split()]


def neighbours(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    c = p.comm()
    if len(c.ring_neighbours) < MAX_RING_CHANNELS:
        c.ring_neighbours[int(m["channel"])] = (int(m["prev"]), int(m["next"]))


_TREE = re.compile(r"\[(\d+)\] (\S+)")


def trees(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    c = p.comm()
    for channel, shape in _TREE.findall(m["trees"])[:MAX_RING_CHANNELS]:
        c.trees[int(channel)] = shape


def connected_rings(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    c = p.comm()
    c.connected_rings = True
    c.ring_pxn, c.ring_gdr = _int(m["pxn"]), _int(m["gdr"])


def connected_trees(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.comm().connected_trees = True


def nvls(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.comm().nvls = True


def _cells(text: str) -> list[str]:
    return [cell.strip() for cell in text.split("|")]


def tuning_algorithms(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.comm().tuning.algorithms = [a for a in _cells(m["cells"]) if a]


def tuning_protocols(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.comm().tuning.protocols = [a for a in _cells(m["cells"]) if a]


def tuning_row(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
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


def algo(p: ProcessLog, m: re.Match[str], e: Envelope, times: int = 1) -> None:
    algo = canonical(m["algo"], ALGORITHMS)
    proto = canonical(m["proto"], PROTOCOLS)
    c = p.tuned_comm()
    # 2.20–2.22 print no function name: the collective traced just before is the one tuned
    func = m["func"] or (c.last_op.func if c.last_op else "?")
    c.add_algo(func, algo, proto, int(m["bytes"]), times)


def best_tuning(p: ProcessLog, m: re.Match[str], e: Envelope, times: int = 1) -> None:
    c = p.comm()
    pick = f"{canonical(m['algo'], ALGORITHMS)}/{canonical(m['proto'], PROTOCOLS)}"
    c.tuned[pick] = c.tuned.get(pick, 0) + times


def special_algo(p: ProcessLog, m: re.Match[str], e: Envelope, times: int = 1) -> None:
    p.tuned_comm().add_algo(m["func"], m["how"], m["detail"].split()[0], int(m["bytes"]), times)


def coll(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
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


def backtrace(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.error_code = int(m["code"])
    if len(p.backtrace) < MAX_BACKTRACE:
        p.backtrace.append(e.msg)
    failed_net(p, failing_net(e.msg, m["file"]))  # a chain through net_ib.cc: IB


# ---- warn folds: WARN lines with a fact besides their signature (kinds.WARN_KINDS) ---------


def checked_in(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    """The bootstrap root's "rank R of N ranks has already checked in": the size it expects."""
    c = p.comm()
    c.nranks = c.nranks or int(m["nranks"])


def hint(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    if p.warns and len(p.warns[-1].hints) < 8:
        p.warns[-1].hints.append(e.msg)


# ---- text folds: lines that are not NCCL's (TEXT_KINDS), written into the parse result ------

# ProcessGroupNCCL.cpp's watchdog: it waited on SeqNum=12, so 11 completed; or it says so
_SEQ_TIMEOUT = re.compile(r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+)")
_SEQ_COMPLETED = re.compile(r"last completed (?:NCCL )?work: (-?\d+)")
# ProcessGroupNCCL::createLogPrefix (2.3+): "[PG ID 1 PG GUID 5(dp) Rank 0] ": SeqNums count
# per process group, so a rank is behind only against the others of its group
_PG = re.compile(r"\[PG ID \S+ PG GUID (\S+?) Rank \d+\]")
MAX_RANKS_SEEN = 4096


def world_size(logs: LogSet, m: re.Match[str], text: str) -> None:
    size = int(m[1])
    logs.world_sizes[size] = logs.world_sizes.get(size, 0) + 1


def completed_seq(logs: LogSet, m: re.Match[str], text: str) -> None:
    """Remember the last collective PyTorch's watchdog says this rank (``m``: torchrun's
    ``[rankN]:`` first, else c10d's own) completed in its process group (None: not named)."""
    done = _SEQ_COMPLETED.search(text)
    seq = int(done[1]) if done else None
    if seq is None and (timeout := _SEQ_TIMEOUT.search(text)):
        seq = int(timeout[1]) - 1
    if seq is None:
        return
    pg = _PG.search(text)
    key = (pg[1] if pg else None, int(m[1] or m[2]))
    seqs = logs.completed_seq
    if key in seqs or len(seqs) < MAX_RANKS_SEEN:
        seqs[key] = max(seq, seqs.get(key, seq))


def init_failed(logs: LogSet, m: re.Match[str], text: str) -> None:
    logs.init_failures += 1
