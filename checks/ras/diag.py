"""The rules over NCCL's diagnostics reports (``NCCL DIAG``, NCCL 2.31+): a table.

Each row of ``DIAG_RULES`` (``diag_rules.py``) is one rule: the diagnostics checks whose lines it reads, the kinds
of line (``nccldoctor/ras/diag.py`` names them) that are problems and at what severity, a title
per kind, the fix. It is registered like a catalogue entry of ``checks/signatures.toml``, and
``_problems`` reads every row alike: one problem per line said once, at the node and rank the
line names. A row's ``when`` leaves out lines of its kinds that need no action; its ``fatal``
marks the warnings that break the GPU or the job.

NCCL tags every diagnostics finding ``[INFO]``; the severity here is nccldoctor's: what breaks
or corrupts a job fails, a difference that may be intended warns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from checks import Check, Problem, register, summary
from checks.ras.status import MAX_EVIDENCE
from nccldoctor.model import Severity
from nccldoctor.ras import DiagReport, DiagResult, RasReading, RasReport


@dataclass(frozen=True)
class DiagRule:
    """One rule of the table: which lines are problems, how they read, what fixes them."""

    id: str
    category: str
    doc: str  # its first sentence is the rule's summary; the rest, its page's "What it checks"
    checks: tuple[str, ...]  # the diagnostics checks it reads ("ECC", "NVLink" ...); (): any
    kinds: Mapping[str, Severity]  # the kinds of line that are problems, and their severity
    titles: Mapping[str, str]  # per kind, the title: a template over the line (:class:`_Line`)
    fix: str
    when: Callable[[RasReading, DiagResult], bool] | None = None  # None: every line of kinds
    fatal: Callable[[DiagResult], bool] | None = None  # a line that fails whatever its kind

    def severities(self) -> tuple[Severity, ...]:
        """What it can report, worst first."""
        found = {*self.kinds.values(), *((Severity.FAIL,) if self.fatal else ())}
        return tuple(s for s in (Severity.FAIL, Severity.WARN, Severity.INFO) if s in found)


def rank_set(ranks: list[int], total: int | None = None) -> str:
    more = f", ... ({total} ranks)" if total and total > len(ranks) else ""
    return "{" + ",".join(map(str, ranks)) + more + "}"


def port_gbits(reading: RasReading, comm_hash: str | None) -> float | None:
    """The fastest port rate (Gbit/s) the same ticket's Net device lines state for a comm."""
    speeds = [
        int(r.values["speed"]) / 1000
        for report in reading.reports
        for diag in report.diagnostics
        for r in diag.results
        if r.check == "Net device" and r.comm_hash == comm_hash and "speed" in r.values
    ]
    return max(speeds, default=None)


DRIVERS = {"CUDA driver version": "CUDA driver", "NVIDIA graphics driver version": "NVIDIA driver"}


class _Line(dict[str, Any]):
    """What a title template reads of a line: the values NCCL printed, and ``ranks`` (the rank
    set), ``comm``, ``driver``, ``groups`` (an env variable's values and their ranks),
    ``times`` (an Xid's count) and ``port`` (the fastest port rate of the comm). A value the
    line lacks reads ``?``."""

    def __init__(self, reading: RasReading, r: DiagResult) -> None:
        super().__init__(r.values)
        self.reading, self.r = reading, r

    def __missing__(self, key: str) -> str:
        r, v = self.r, self.r.values
        derived: dict[str, Callable[[], object]] = {
            "kind": lambda: r.kind,
            "check": lambda: r.check,
            "ranks": lambda: rank_set(r.ranks, r.ranks_total),
            "comm": lambda: f"comm 0x{r.comm_hash}" if r.comm_hash else "a communicator",
            "driver": lambda: DRIVERS.get(r.check),
            "groups": lambda: "; ".join(f"{val} on {rank_set(rs)}" for val, rs in r.groups[:4]),
            "times": lambda: f"{v.get('at_least', '')}{v.get('count', '?')} time(s)",
            "port": lambda: f"{port_gbits(self.reading, r.comm_hash) or 0:g}",
        }
        value = derived[key]() if key in derived else None
        return "?" if value is None else str(value)


def _results(
    reading: RasReading, rule: DiagRule
) -> Iterator[tuple[RasReport, DiagReport, DiagResult]]:
    """The lines of the rule's checks and kinds, each said once (a report repeated by a second
    query, or printed at each communicator's init, says it again)."""
    seen: set[tuple[str, str, str]] = set()
    for report in reading.reports:
        for diag in report.diagnostics:
            for r in diag.results:
                key = (r.check, r.message, repr(r.groups))
                if (
                    r.kind in rule.kinds
                    and (not rule.checks or r.check in rule.checks)
                    and key not in seen
                ):
                    seen.add(key)
                    yield report, diag, r


def _evidence(report: RasReport, diag: DiagReport, r: DiagResult) -> list[str]:
    who = f" by {diag.host}:{diag.pid}" if diag.host else ""
    head = f"{report.source}: {'RAS' if diag.kind == 'ras' else 'NCCL'} diagnostics{who}"
    values = [f"{r.check}: {r.values.get('key', '')}={v} on rank(s) {rank_set(ranks)}"
              for v, ranks in r.groups]  # fmt: skip
    return [head, f"[{r.tag}] {r.text()}", *values][:MAX_EVIDENCE]


def _problems(reading: RasReading, rule: DiagRule) -> Iterator[Problem]:
    """One problem per line of the rule's kinds that ``when`` keeps, at the node and rank it
    names."""
    for report, diag, r in _results(reading, rule):
        if rule.when and not rule.when(reading, r):
            continue
        fatal = rule.fatal is not None and rule.fatal(r)
        severity = Severity.FAIL if fatal else rule.kinds[r.kind or ""]
        named = r.ranks or [
            int(v) for k in ("src", "dst", "rank", "first") if (v := r.values.get(k))
        ]
        # where the named ranks ran, from the same ticket's NCCL logs: the RAS checks are printed
        # by the requesting process, not on the ranks' nodes; P2P edges by the node they are on
        hosts = [(n, h) for n in named[:8] if (h := reading.host(r.comm_hash, n))]
        evidence = _evidence(report, diag, r)
        evidence += [f"rank {n} ran on {h} (its NCCL log)" for n, h in hosts]
        # a host the line itself names (Xid scans, net bw) is where the problem is
        here = (
            r.values.get("host")
            or r.values.get("client_host")
            or (diag.host if r.check == "p2p" else None)
        )
        title = rule.titles[r.kind or ""].format_map(_Line(reading, r))
        yield Problem(
            severity,
            " ".join(title.split()),
            evidence[:MAX_EVIDENCE],
            fix=rule.fix,
            node=hosts[0][1] if hosts else here,
            rank=named[0] if named else None,
        )


def register_table(rows: tuple[DiagRule, ...], where: str) -> None:
    """Register each row as a rule; ``where``: the table's module and name, for its page."""
    for row in rows:
        register(Check(row.id, "ras", row.category, "ras", _rule(row, where), summary(row.doc)))


def _rule(row: DiagRule, where: str) -> Callable[[RasReading], Iterator[Problem]]:
    def rule(reading: RasReading) -> Iterator[Problem]:
        return _problems(reading, row)

    # what the field guide's page reads of a rule (nccldoctor/docs/pages.py)
    rule.__doc__ = row.doc
    rule.severities = row.severities()  # type: ignore[attr-defined]
    rule.table_row = f"row `{row.id}` of {where}"  # type: ignore[attr-defined]
    return rule
