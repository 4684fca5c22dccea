"""NCCL RAS output (``ncclras``, text and ``-f json``) as data: the job, the communicators, and
each error or warning RAS printed with the ranks and processes it names.

The text format is NCCL's src/ras/client_support.cc (``rasOutAppend`` calls), described in
the formats page (docs/nccl-tests-formats.md#ras); each detail line kind is one row of
``_DETAILS``. It judges nothing: the rules are ``checks/ras.py``. Bad input never raises: what
cannot be read is left out and ``error`` says why (JSON).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Peer:
    """A rank or process RAS names: what it printed of it."""

    rank: int | None = None
    pid: int | None = None
    node: str | None = None
    gpu: str | None = None


@dataclass
class Entry:
    """One entry of the Errors or Warnings section: ``DEAD``, ``#0-0 (hash) INCOMPLETE`` ..."""

    section: str  # errors | warnings
    kinds: list[str]  # DEAD, INCOMPLETE, MISMATCH, TIMEOUT, ERROR ...
    comm: str | None = None  # "#0-0" for a communicator's entry
    comm_hash: str | None = None
    lines: list[str] = field(default_factory=list)
    peers: list[Peer] = field(default_factory=list)
    missing_ranks: list[int] = field(default_factory=list)
    operations: list[tuple[int, int]] = field(default_factory=list)  # (ranks, up to operation)


@dataclass
class CommGroup:
    """A row of the communicators table: ``count`` communicators alike."""

    group: int
    count: int
    nodes: int
    ranks_per_node: str  # "8" or a range "7-8"
    ranks: int
    status: str
    errors: list[str]


@dataclass
class RasReport:
    source: str
    nccl_version: str | None = None
    nodes: int | None = None
    processes: int | None = None
    gpus: int | None = None
    groups: list[CommGroup] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RasReading:
    """The subject of the ``ras`` rules: the outputs, and where each rank's NCCL log in the same
    ticket stops, by communicator hash and rank (RAS prints a communicator's ``commHash``, which
    is the ``commId 0x…`` of NCCL's ``Init COMPLETE`` line: both are ``comm->commHash``)."""

    reports: list[RasReport]
    log_last_lines: dict[tuple[int, int], str] = field(default_factory=dict)

    def last_line(self, comm_hash: str | None, rank: int | None) -> str | None:
        if comm_hash is None or rank is None:
            return None
        try:
            return self.log_last_lines.get((int(comm_hash, 16), rank))
        except ValueError:
            return None


_VERSION = re.compile(r"^NCCL version (?P<v>[\d.]+)")
# The job's totals follow a "(total) ..." heading line: "%7d  %9ld  %11d  %9d  %8d" under
# "(total)   per node  per process    (total)  (total)" for a uniform job, three totals
# (nodes, processes, GPUs) under "(total)    (total)      (total)" otherwise.
_INTS = re.compile(r"^\s*\d+(?:\s+\d+)*\s*$")
# client_support.cc: "%5d  %8d  %8d  %8s  %8d  %8d  %8s  %6s"
_GROUP = re.compile(
    r"^\s*(?P<g>\d+)\s+(?P<n>\d+)\s+(?P<nodes>\d+)\s+(?P<rpn>[\d-]+)\s+(?P<ranks>\d+)\s+\d+\s+"
    r"(?P<status>[A-Z]+)\s+(?P<errors>[A-Z,]+)\s*$"
)
_COMM_ENTRY = re.compile(r"^#(?P<comm>\d+-\d+) \((?P<hash>[0-9a-f]+)\) (?P<kinds>[A-Z,]+)\s*$")
_ENTRY = re.compile(r"^(?P<kinds>[A-Z]+(?:,[A-Z]+)*)\s*$")
# "Process %d on node %s managing GPU%s %s"; "Rank %d -- GPU %s managed by process %d on node %s"
_PROCESS = re.compile(r"Process (?P<pid>\d+) on node (?P<node>\S+) managing GPUs? (?P<gpu>\S+)")
_RANK = re.compile(
    r"Rank (?P<rank>\d+) -- GPU (?P<gpu>\S+) managed by process (?P<pid>\d+) on node (?P<node>\S+)"
)
_MISSING = re.compile(r"The missing ranks?: (?P<ranks>[\d, ]+)")
_OPS = re.compile(r"(?P<n>\d+) ranks? ha(?:s|ve) launched up to operation (?P<op>\d+)")


def _detail(entry: Entry, line: str) -> None:
    entry.lines.append(line)
    if m := _RANK.search(line):
        entry.peers.append(Peer(int(m["rank"]), int(m["pid"]), m["node"], m["gpu"]))
    elif m := _PROCESS.search(line):
        entry.peers.append(Peer(None, int(m["pid"]), m["node"], m["gpu"]))
    elif m := _MISSING.search(line):
        entry.missing_ranks += [int(r) for r in re.findall(r"\d+", m["ranks"])]
    elif m := _OPS.search(line):
        entry.operations.append((int(m["n"]), int(m["op"])))


def is_text(head: str) -> bool:
    """RAS's own section headings (client_support.cc), as a ticket's file starts."""
    return "Job summary\n===" in head or bool(re.search(r"^Communicators\.\.\.", head, re.M))


def parse_text(lines: Iterable[str], source: str) -> RasReport:
    report = RasReport(source)
    section = ""
    entry: Entry | None = None
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line.strip() or set(line.strip()) == {"="}:
            entry = None if not line.strip() else entry
            continue
        if m := _VERSION.match(line):
            report.nccl_version = m["v"]
        elif line.startswith("Job summary"):
            section = "job"
        elif line.startswith("Communicators..."):
            section = "comms"
        elif line in ("Errors", "Warnings"):
            section = line.lower()
        elif section == "job" and line.startswith("(total)"):
            section = "totals"
        elif section == "totals" and _INTS.match(line):
            values = [int(v) for v in line.split()]
            if len(values) in (3, 5):
                report.nodes, report.processes, report.gpus = values[0], values[-2], values[-1]
            section = "job"
        elif section == "comms" and (m := _GROUP.match(line)):
            report.groups.append(
                CommGroup(
                    int(m["g"]),
                    int(m["n"]),
                    int(m["nodes"]),
                    m["rpn"],
                    int(m["ranks"]),
                    m["status"],
                    m["errors"].split(","),
                )
            )
        elif section in ("errors", "warnings"):
            if m := _COMM_ENTRY.match(line):
                entry = Entry(section, m["kinds"].split(","), "#" + m["comm"], m["hash"])
                report.entries.append(entry)
            elif (m := _ENTRY.match(line)) and not line.startswith(" "):
                entry = Entry(section, m["kinds"].split(","))
                report.entries.append(entry)
            elif entry is not None and line.startswith(" "):
                _detail(entry, line.strip())
    return report


# ---- -f json ----------------------------------------------------------------------------------


def is_json_document(data: Any) -> bool:
    """The keys of ``ncclras -f json`` (2.28.7+)."""
    return isinstance(data, dict) and "communicators" in data and "nccl_version" in data


def parse_json(text: str, source: str) -> RasReport:
    """The same reading from the JSON form: its raw per-rank data become the same entries
    (missing ranks: INCOMPLETE or DEAD; unequal collective counts: MISMATCH; a rank's init or
    async error: ERROR)."""
    report = RasReport(source)
    try:
        data = json.loads(text)
    except ValueError as exc:
        report.error = f"not a whole JSON document ({exc})"
        return report
    if not is_json_document(data):
        report.error = "JSON, but not ncclras -f json output"
        return report
    report.nccl_version = _s(data.get("nccl_version"))
    nodes: set[str] = set()
    for index, comm in enumerate(
        c for c in _list(data.get("communicators")) if isinstance(c, dict)
    ):
        name, comm_hash = f"#{index}", _s(comm.get("hash"))
        ranks = [r for r in _list(comm.get("ranks")) if isinstance(r, dict)]
        missing = [r for r in _list(comm.get("missing_ranks")) if isinstance(r, dict)]
        nodes |= {str(r.get("host")) for r in ranks + missing if r.get("host")}
        if missing:
            dead = [r for r in missing if _status(r).get("considered_dead") is True]
            entry = Entry("errors", ["DEAD"] if dead else ["INCOMPLETE"], name, comm_hash)
            entry.peers = [_peer(r) for r in missing]
            entry.missing_ranks = [p.rank for p in entry.peers if p.rank is not None]
            entry.lines = [f"Missing communicator data from {len(missing)} rank(s)"]
            report.entries.append(entry)
        counts: dict[tuple[tuple[str, int], ...], list[Peer]] = {}
        for r in ranks:
            ops = r.get("collective_counts")
            if isinstance(ops, dict):
                key = tuple(sorted((str(k), v) for k, v in ops.items() if isinstance(v, int)))
                counts.setdefault(key, []).append(_peer(r))
        if len(counts) > 1:
            entry = Entry("warnings", ["MISMATCH"], name, comm_hash)
            smallest = min(counts.values(), key=len)
            entry.peers = smallest
            entry.lines = ["Communicator ranks have different collective operation counts"]
            report.entries.append(entry)
        failed = [
            r
            for r in ranks
            if _status(r).get("init_state") not in (0, 7, None)
            or _status(r).get("async_error") not in (0, 7, None)
        ]
        if failed:
            entry = Entry("errors", ["ERROR"], name, comm_hash, peers=[_peer(r) for r in failed])
            entry.lines = [
                f"rank {r.get('rank')}: init_state {_status(r).get('init_state')}, "
                f"async_error {_status(r).get('async_error')}"
                for r in failed
            ]
            report.entries.append(entry)
    report.nodes = len(nodes) or None
    ras = data.get("ras")
    if (
        isinstance(ras, dict)
        and isinstance(ras.get("timeouts_count"), int)
        and ras["timeouts_count"]
    ):
        report.entries.append(
            Entry(
                "warnings", ["TIMEOUT"], lines=[f"{ras['timeouts_count']} communication timeouts"]
            )
        )
    return report


def _s(value: Any) -> str | None:
    return str(value) if isinstance(value, str | int) else None


def _status(rank: dict[str, Any]) -> dict[str, Any]:
    status = rank.get("status")
    return status if isinstance(status, dict) else {}


def _peer(rank: dict[str, Any]) -> Peer:
    def num(key: str) -> int | None:
        value = rank.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return Peer(num("rank"), num("pid"), _s(rank.get("host")), _s(num("cuda_dev")))


def _list(value: Any) -> list[Any]:
    """A list a document holds, or none: a key of the wrong type is no data."""
    return value if isinstance(value, list) else []
