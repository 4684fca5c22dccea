"""The reader of ``ncclras``'s own output, text and ``-f json``: the job, the communicators, and
each error or warning RAS printed with the ranks and processes it names.

The text format is NCCL's src/ras/client_support.cc (``rasOutAppend`` calls), described in the
formats page (docs/nccl-tests-formats.md#ras); each detail line kind is one pattern below. A
text may hold diagnostics reports too (a job's stdout): ``diag.py`` reads those lines. It judges
nothing. Bad input never raises: what cannot be read is left out and ``error`` says why (JSON).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from nccldoctor import jsondoc
from nccldoctor.limits import MAX_EVIDENCE_CHARS, MAX_RAS_RANKS
from nccldoctor.ras.diag import DIAG_BUSY, DIAG_MARK, DiagReader
from nccldoctor.ras.records import CommGroup, Entry, Peer, RasReport

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
    if len(entry.lines) < MAX_RAS_RANKS:  # a line a rank: as many as the ranks kept
        entry.lines.append(line[:MAX_EVIDENCE_CHARS])  # a list of a million ranks is one line
    if m := _RANK.search(line):
        entry.keep([Peer(int(m["rank"]), int(m["pid"]), m["node"], m["gpu"])])
    elif m := _PROCESS.search(line):
        entry.keep([Peer(None, int(m["pid"]), m["node"], m["gpu"])])
    elif m := _MISSING.search(line):
        entry.keep([], [int(r) for r in re.findall(r"\d+", m["ranks"])])
    elif m := _OPS.search(line):
        entry.operations.append((int(m["n"]), int(m["op"])))


def parse_text(lines: Iterable[str], source: str) -> RasReport:
    """An ncclras text output, or any text with diagnostics reports in it (a job's stdout)."""
    report = RasReport(source)
    diag = DiagReader(report.diagnostics)
    section = ""
    entry: Entry | None = None
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line.strip() or set(line.strip()) == {"="}:
            entry = None if not line.strip() else entry
            continue
        if (at := line.find(DIAG_MARK)) >= 0:
            diag.line(line, at)
        elif line.startswith(DIAG_BUSY):
            diag.busy()
        elif m := _VERSION.match(line):
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
    data, report.error = jsondoc.load(text, is_json_document, "ncclras -f json output")
    if data is None:
        return report
    report.nccl_version = _s(data.get("nccl_version"))
    nodes: set[str] = set()
    for index, comm in enumerate(
        c for c in jsondoc.as_list(data.get("communicators")) if isinstance(c, dict)
    ):
        name, comm_hash = f"#{index}", _s(comm.get("hash"))
        ranks = [r for r in jsondoc.as_list(comm.get("ranks")) if isinstance(r, dict)]
        missing = [r for r in jsondoc.as_list(comm.get("missing_ranks")) if isinstance(r, dict)]
        nodes |= {str(r.get("host")) for r in ranks + missing if r.get("host")}
        if missing:
            dead = [r for r in missing if _status(r).get("considered_dead") is True]
            entry = Entry("errors", ["DEAD"] if dead else ["INCOMPLETE"], name, comm_hash)
            entry.keep([_peer(r) for r in missing[:MAX_RAS_RANKS]])
            entry.left_out += max(0, len(missing) - MAX_RAS_RANKS)
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
            entry.keep(min(counts.values(), key=len))
            entry.lines = ["Communicator ranks have different collective operation counts"]
            report.entries.append(entry)
        failed = [
            r
            for r in ranks
            if _status(r).get("init_state") not in (0, 7, None)
            or _status(r).get("async_error") not in (0, 7, None)
        ]
        if failed:
            entry = Entry("errors", ["ERROR"], name, comm_hash)
            entry.keep([_peer(r) for r in failed[:MAX_RAS_RANKS]])
            entry.left_out += max(0, len(failed) - MAX_RAS_RANKS)
            entry.lines = [
                f"rank {r.get('rank')}: init_state {_status(r).get('init_state')}, "
                f"async_error {_status(r).get('async_error')}"
                for r in failed[:MAX_RAS_RANKS]
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
    num = jsondoc.as_int
    return Peer(num(rank.get("rank")), num(rank.get("pid")), _s(rank.get("host")),
                _s(num(rank.get("cuda_dev"))))  # fmt: skip
