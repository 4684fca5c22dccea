"""Rules over NCCL RAS output (scope ``ras``): dead processes, communicators missing ranks,
ranks that disagree, errors, and timeouts while RAS gathered its data.

The subject is a :class:`~nccldoctor.ras.RasReading`: one report per ``ncclras`` output in the
ticket, whose entries RAS itself put under Errors and Warnings, and where each rank's NCCL log
in the same ticket stops, so a rank RAS names missing is shown with its log's last line.
"""

from __future__ import annotations

from collections.abc import Iterator

from checks import Problem, check
from nccldoctor.model import Severity
from nccldoctor.ras import Entry, Peer, RasReading, RasReport

MAX_EVIDENCE = 12


def _peer(p: Peer) -> str:
    rank = f"rank {p.rank} " if p.rank is not None else ""
    return f"{rank}process {p.pid} on node {p.node} (GPU {p.gpu})"


def _entries(reading: RasReading, kind: str) -> Iterator[tuple[RasReport, Entry]]:
    """The entries of ``kind``, each said once (repeated queries in one file repeat them)."""
    seen: set[tuple[str | None, tuple[str, ...]]] = set()
    for report in reading.reports:
        for entry in report.entries:
            key = (entry.comm, tuple(entry.lines))
            if kind in entry.kinds and key not in seen:
                seen.add(key)
                yield report, entry


def _evidence(report: RasReport, entry: Entry) -> list[str]:
    head = f"{entry.comm} ({entry.comm_hash})" if entry.comm else "job"
    return [f"{report.source}: {head}: {', '.join(entry.kinds)}", *entry.lines][:MAX_EVIDENCE]


def _where(entry: Entry) -> tuple[str | None, int | None]:
    first = entry.peers[0] if entry.peers else None
    return (first.node, first.rank) if first else (None, None)


@check("ras.dead", area="ras", category="collective_timeout_hang", scope="ras")
def dead(reading: RasReading) -> Iterator[Problem]:
    """RAS considers job processes dead: unreachable for 60 s over the RAS network."""
    for report, entry in _entries(reading, "DEAD"):
        node, rank = _where(entry)
        yield Problem(
            Severity.FAIL,
            f"NCCL RAS: {len(entry.peers) or 'some'} process(es) dead: "
            + "; ".join(_peer(p) for p in entry.peers[:4]),
            _evidence(report, entry),
            fix=(
                "The process crashed, was killed (OOM killer: dmesg | grep -i kill) or its node\n"
                "went away; its own log's last lines and the node's kernel log say which. The\n"
                "other ranks wait for it until the process-group timeout."
            ),
            node=node,
            rank=rank,
        )


@check("ras.incomplete", area="ras", category="collective_timeout_hang", scope="ras")
def incomplete(reading: RasReading) -> Iterator[Problem]:
    """RAS got no data from some ranks of a communicator (stopped, hung or unreachable)."""
    for report, entry in _entries(reading, "INCOMPLETE"):
        missing = entry.missing_ranks or [p.rank for p in entry.peers if p.rank is not None]
        who = (
            f"rank {', '.join(map(str, missing))}"
            if missing
            else "; ".join(_peer(p) for p in entry.peers[:4]) or "some ranks"
        )
        node, rank = _where(entry)
        logs = [
            f"rank {r}'s NCCL log stops at: {line}"
            for r in missing
            if (line := reading.last_line(entry.comm_hash, r))
        ]
        yield Problem(
            Severity.FAIL,
            f"NCCL RAS: {entry.comm or 'the job'} is missing {who}",
            (logs + _evidence(report, entry))[:MAX_EVIDENCE],
            fix=(
                "Query again (ncclras): a missing rank that stays missing is stopped or hung.\n"
                "Get its Python stack (py-spy dump --pid PID) and its NCCL log's last lines."
            ),
            node=node,
            rank=rank if rank is not None else (missing[0] if missing else None),
        )


@check("ras.mismatch", area="ras", category="collective_timeout_hang", scope="ras")
def mismatch(reading: RasReading) -> Iterator[Problem]:
    """Ranks of a communicator disagree: different operation counts or status."""
    for report, entry in _entries(reading, "MISMATCH"):
        ops = ", ".join(f"{n} ranks up to op {op}" for n, op in entry.operations)
        node, rank = _where(entry)
        yield Problem(
            Severity.WARN,
            f"NCCL RAS: the ranks of {entry.comm or 'a communicator'} disagree"
            + (f" ({ops})" if ops else "")
            + (f"; named: {'; '.join(_peer(p) for p in entry.peers[:4])}" if entry.peers else ""),
            _evidence(report, entry),
            fix=(
                "Query again: counts that move are ranks racing ahead; counts that stay put mean\n"
                "the communicator is stuck, and the ranks behind (the smaller count) are the ones\n"
                "to inspect (their Python stacks, a skipped or reordered collective)."
            ),
            node=node,
            rank=rank,
        )


@check("ras.error", area="ras", category="other", scope="ras")
def error(reading: RasReading) -> Iterator[Problem]:
    """Ranks of a communicator report an initialization or asynchronous NCCL error."""
    for report, entry in _entries(reading, "ERROR"):
        node, rank = _where(entry)
        yield Problem(
            Severity.FAIL,
            f"NCCL RAS: ranks of {entry.comm or 'a communicator'} report an NCCL error",
            _evidence(report, entry),
            fix="The ranks' NCCL logs (NCCL_DEBUG=WARN at least) name the error; start there.",
            node=node,
            rank=rank,
        )


@check("ras.timeout", area="ras", category="connect_refused_or_timeout", scope="ras")
def timeout(reading: RasReading) -> Iterator[Problem]:
    """RAS timed out reaching some processes while gathering its data."""
    for report, entry in _entries(reading, "TIMEOUT"):
        yield Problem(
            Severity.WARN,
            f"NCCL RAS timed out gathering data ({report.source})",
            _evidence(report, entry),
            fix="A process is unresponsive: query again; RAS declares it dead after 60 s.",
        )


@check("ras.unreadable", area="ras", category="other", scope="ras")
def unreadable(reading: RasReading) -> Iterator[Problem]:
    """An ncclras output could not be read."""
    for report in reading.reports:
        if report.error:
            yield Problem(
                Severity.WARN,
                f"{report.source}: {report.error}",
                [],
                fix="Attach the whole output of ncclras -f json.",
            )
