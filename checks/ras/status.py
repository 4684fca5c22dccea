"""The rules over what ``ncclras`` itself reports (scope ``ras``): dead processes, communicators
missing ranks, ranks that disagree, errors, and timeouts while RAS gathered its data; and outputs
that could not be read or were cut.

The subject is a :class:`~nccldoctor.ras.RasReading`: one report per ``ncclras`` output (or text
with diagnostics lines) in the ticket, whose entries RAS itself put under Errors and Warnings,
and where each rank's NCCL log in the same ticket stops, so a rank RAS names missing is shown
with its log's last line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from checks import Problem, check
from nccldoctor.limits import MAX_RAS_RANKS
from nccldoctor.model import Severity
from nccldoctor.ras import Entry, Peer, RasReading, RasReport

MAX_EVIDENCE = 12  # evidence lines of a RAS finding
MAX_TITLE_RANKS = 8  # ranks a title names; the rest are counted


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


def _entry_problems(
    reading: RasReading,
    kind: str,
    severity: Severity,
    title: Callable[[Entry], str],
    fix: str,
) -> Iterator[Problem]:
    """One problem per RAS entry of ``kind``, at the node and rank of the first peer it names."""
    for report, entry in _entries(reading, kind):
        node, rank = _where(entry)
        yield Problem(severity, title(entry), _evidence(report, entry), fix=fix, node=node,
                      rank=rank)  # fmt: skip


def _named(entry: Entry) -> str:
    return "; ".join(_peer(p) for p in entry.peers[:4])


@check("ras.dead", area="ras", category="collective_timeout_hang", scope="ras")
def dead(reading: RasReading) -> Iterator[Problem]:
    """RAS considers job processes dead: unreachable for 60 s over the RAS network."""
    return _entry_problems(
        reading,
        "DEAD",
        Severity.FAIL,
        lambda e: f"NCCL RAS: {len(e.peers) or 'some'} process(es) dead: {_named(e)}",
        "The process crashed, was killed (OOM killer: dmesg | grep -i kill) or its node\n"
        "went away; its own log's last lines and the node's kernel log say which. The\n"
        "other ranks wait for it until the process-group timeout.",
    )


@check("ras.incomplete", area="ras", category="collective_timeout_hang", scope="ras")
def incomplete(reading: RasReading) -> Iterator[Problem]:
    """RAS got no data from some ranks of a communicator (stopped, hung or unreachable)."""
    for report, entry in _entries(reading, "INCOMPLETE"):
        missing = entry.missing_ranks or [p.rank for p in entry.peers if p.rank is not None]
        more = len(missing) - MAX_TITLE_RANKS + entry.left_out
        who = (
            f"rank {', '.join(map(str, missing[:MAX_TITLE_RANKS]))}"
            + (f" and {more} more" if more > 0 else "")
            if missing
            else "; ".join(_peer(p) for p in entry.peers[:4]) or "some ranks"
        )
        node, rank = _where(entry)
        logs = [
            f"rank {r}'s NCCL log stops at: {line}"
            for r in missing[:MAX_EVIDENCE]
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


def _ops(entry: Entry) -> str:
    ops = ", ".join(f"{n} ranks up to op {op}" for n, op in entry.operations)
    return (f" ({ops})" if ops else "") + (f"; named: {_named(entry)}" if entry.peers else "")


@check("ras.mismatch", area="ras", category="collective_timeout_hang", scope="ras")
def mismatch(reading: RasReading) -> Iterator[Problem]:
    """Ranks of a communicator disagree: different operation counts or status."""
    return _entry_problems(
        reading,
        "MISMATCH",
        Severity.WARN,
        lambda e: f"NCCL RAS: the ranks of {e.comm or 'a communicator'} disagree{_ops(e)}",
        "Query again: counts that move are ranks racing ahead; counts that stay put mean\n"
        "the communicator is stuck, and the ranks behind (the smaller count) are the ones\n"
        "to inspect (their Python stacks, a skipped or reordered collective).",
    )


@check("ras.error", area="ras", category="other", scope="ras")
def error(reading: RasReading) -> Iterator[Problem]:
    """Ranks of a communicator report an initialization or asynchronous NCCL error."""
    return _entry_problems(
        reading,
        "ERROR",
        Severity.FAIL,
        lambda e: f"NCCL RAS: ranks of {e.comm or 'a communicator'} report an NCCL error",
        "The ranks' NCCL logs (NCCL_DEBUG=WARN at least) name the error; start there.",
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


@check("ras.truncated", area="ras", category="other", scope="ras")
def truncated(reading: RasReading) -> Iterator[Problem]:
    """An ncclras entry names more ranks than nccldoctor keeps (nccldoctor/limits.py): the
    rest are counted, not listed."""
    for report in reading.reports:
        cut = [e for e in report.entries if e.left_out]
        if cut:
            yield Problem(
                Severity.WARN,
                f"{report.source}: {sum(e.left_out for e in cut)} rank(s) and process(es) "
                f"past the first {MAX_RAS_RANKS:,} of an entry counted, not listed",
                [f"{e.comm or e.section} {'/'.join(e.kinds)}: {e.left_out} more" for e in cut][
                    :MAX_EVIDENCE
                ],
                fix="No job has that many ranks in one communicator: the file is not one\n"
                "ncclras output. Attach the output of ncclras -f json.",
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
