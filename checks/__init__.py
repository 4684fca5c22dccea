"""The rules: small pure functions over Facts, registered by id, in the manner of `brew doctor`.

Every finding nccldoctor reports is born in exactly one check registered here. A check is a pure
function over one *subject*, named by its scope:

- ``node``: the Facts of one node (probes' output);
- ``cluster``: the Facts of every node of a run (cross-node consistency);
- ``run``: what a node's cluster run observed before and around its workers (reach, the
  master's listener, rendezvous, port probes);
- ``ranks``: how the ranks of a run ended (the workers' outcomes, the hang analysis);
- ``world``: what the master saw of the nodes (who joined, was refused or never joined the
  store, their clocks, the nodes lost, the MTU beside where the ranks stopped, the files a
  merge of node reports read: :class:`~nccldoctor.facts.world.WorldSeen`);
- ``logs``: the summary of NCCL/PyTorch logs (one job's ranks, or pasted logs);
- ``job``: what `nccldoctor watch` saw of the user's own job;
- ``flightrec``: PyTorch Flight Recorder dumps matched across ranks (a ticket's, or the ones
  `watch` and `check` collect);
- ``nccl_tests``: the nccl-tests runs of a ticket, with what its logs and node facts say of
  the network;
- ``ras``: the NCCL RAS outputs of a ticket;
- ``bandwidth``: the sweep's largest busbw against what the nodes' links carry
  (:class:`checks.linkrates.LinkBudget`);
- ``ticket``: the attachments `explain` was given, and those it could not read
  (:class:`~nccldoctor.ticket.Ticket`);
- ``isolation``: the isolation rounds of `check`, which node or link is at fault
  (:class:`~nccldoctor.facts.isolation.Isolation`);
- ``preflight``: one node's findings judged alone and as one node of several, when `preflight`
  knows no master (:class:`checks.preflight.NodeRoles`).

A check returns ``None`` when all is well, or one or more :class:`Problem`. The runner turns
each Problem into a :class:`~nccldoctor.model.Finding` carrying the check's id, area and
category, and turns a crashing check into a ``<id>.crashed`` finding instead of a traceback.

Adding a check is one decorated function in the module of its area; nothing else changes.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from nccldoctor.limits import MAX_EVIDENCE_CHARS, MAX_EVIDENCE_LINES
from nccldoctor.model import AREAS, CATEGORIES, Finding, Severity

Scope = Literal["node", "cluster", "run", "ranks", "world", "logs", "job", "flightrec",
                "nccl_tests", "ras", "bandwidth", "ticket", "preflight", "isolation"]  # fmt: skip
SCOPES: tuple[Scope, ...] = get_args(Scope)


@dataclass
class Problem:
    """What a check returns: the id, area and category come from its registration."""

    severity: Severity
    title: str
    evidence: list[str] = field(default_factory=list)
    fix: str = ""
    links: list[str] = field(default_factory=list)
    node: str | None = None
    rank: int | None = None
    # Only where one rule's failures fall into different categories (NCCL's error codes);
    # otherwise the registration's category holds.
    category: str | None = None


CheckResult = Problem | Iterable[Problem] | None

# The findings of ranks that stopped: what a network cause explains (``explains=``); in the
# ranks' logs, an init that never completed and the connects refused or timed out on the way.
RANKS_STOPPED = (
    "run.rank-stuck",
    "run.rank-failed",
    "run.incomplete",
    "logs.init-incomplete",
    "logs.nccl-error",
    "logs.connect-retries",
    "nccl.socket-connect-retry",
    "nccl.socket-connect-retries-exhausted",
    "nccl.socket-connect-failed",
    "nccl.socket-poll-connect-failed",
)


@dataclass(frozen=True)
class Check:
    id: str
    area: str
    category: str
    scope: Scope
    func: Callable[[Any], CheckResult]
    doc: str
    # the checks whose findings follow from this one's (docs/report.md, *Causes and
    # consequences*): shown under it, their own fixes not offered
    explains: tuple[str, ...] = ()
    remedy: str = ""  # its fix in a few words, for a report's first line

    def run(self, subject: Any, node: str | None = None) -> list[Finding]:
        try:
            result = self.func(subject)
            problems = [result] if isinstance(result, Problem) else list(result or ())
        except Exception as exc:  # a crash is a result, never a traceback for the user
            return [
                Finding(
                    id=f"{self.id}.crashed",
                    category="other",
                    severity=Severity.WARN,
                    title=f"check {self.id} crashed: {type(exc).__name__}: {exc}",
                    evidence=traceback.format_exception(exc)[-3:],
                    fix="This is a bug in nccldoctor; please report it with this report attached.",
                    area=self.area,
                    node=node,
                )
            ]
        return [
            Finding(
                id=self.id,
                category=p.category or self.category,
                severity=p.severity,
                title=_cut(p.title),
                evidence=_bounded(p.evidence),
                fix=p.fix,
                area=self.area,
                links=p.links,
                node=p.node or node,
                rank=p.rank,
                remedy=self.remedy,
            )
            for p in problems
        ]


def _cut(text: str) -> str:
    """A title or evidence line within MAX_EVIDENCE_CHARS: a line a rule quotes from a
    stranger's file may be 64 KiB, and every view prints it."""
    if len(text) <= MAX_EVIDENCE_CHARS:
        return text
    return f"{text[:MAX_EVIDENCE_CHARS]}… ({len(text) - MAX_EVIDENCE_CHARS:,} more characters)"


def _bounded(evidence: list[str]) -> list[str]:
    """A finding's evidence within the report's bounds: MAX_EVIDENCE_LINES lines of
    MAX_EVIDENCE_CHARS (a rule may list every rank of a million), the rest counted."""
    lines = [_cut(line) for line in evidence[:MAX_EVIDENCE_LINES]]
    if len(evidence) > MAX_EVIDENCE_LINES:
        lines.append(f"… and {len(evidence) - MAX_EVIDENCE_LINES:,} more lines")
    return lines


_REGISTRY: dict[str, Check] = {}


def check(
    id: str,
    *,
    area: str,
    category: str,
    scope: Scope = "node",
    explains: Sequence[str] = (),
    remedy: str = "",
) -> Callable:
    """Register ``func`` as the check ``id``. The docstring's first line describes it.

    ``explains``: the checks whose findings are consequences of this one's when both fire;
    ``remedy``: the fix in a few words ("run the containers with --network host")."""
    if area not in AREAS:
        raise ValueError(f"check {id}: unknown area {area!r}")
    if category not in CATEGORIES:
        raise ValueError(f"check {id}: unknown category {category!r}")

    if scope not in SCOPES:
        raise ValueError(f"check {id}: unknown scope {scope!r}")

    def decorate(func: Callable[[Any], CheckResult]) -> Callable[[Any], CheckResult]:
        home = f"{__name__}.{scope}"  # a module, or a package of modules (checks/ras/)
        if scope in _SCOPE_MODULES and not f"{func.__module__}.".startswith(f"{home}."):
            raise ValueError(f"check {id}: a {scope}-scope rule lives in {__name__}/{scope}")
        register(
            Check(id, area, category, scope, func, summary(func.__doc__), tuple(explains), remedy)
        )
        return func

    return decorate


def summary(doc: str | None) -> str:
    """A docstring's first sentence (its first paragraph when no sentence ends in it): a
    docstring's first line is often cut mid-sentence by the line length."""
    paragraph = " ".join(inspect.cleandoc(doc or "").split("\n\n")[0].split())
    end = _SENTENCE_END.search(paragraph)
    return paragraph[: end.start() + 1] if end else paragraph


_SENTENCE_END = re.compile(r"[.!?](?=\s+[A-Z`(\"'])")


def register(entry: Check) -> None:
    """Register a check built at run time (a catalogue entry, see ``checks/logs/catalogue.py``)."""
    if entry.id in _REGISTRY:
        raise ValueError(f"check id {entry.id} registered twice")
    _REGISTRY[entry.id] = entry


# Modules of this package that hold no checks: the log-signature catalogue is data for the parser.
_NOT_CHECKS = frozenset({"signatures"})
# The rules of these scopes live in the module or package of the scope's name (checks/run.py,
# checks/logs/ ...), so that `preflight` imports neither the parser nor the catalogue; node and
# cluster rules live in the module of their area.
_SCOPE_MODULES: frozenset[str] = frozenset(
    {
        "run",
        "ranks",
        "world",
        "logs",
        "job",
        "flightrec",
        "nccl_tests",
        "ras",
        "bandwidth",
        "ticket",
        "preflight",
        "isolation",
    }
)


def _load(scope: Scope | None = None) -> None:
    for module in pkgutil.iter_modules(__path__):
        name = module.name
        if name in _NOT_CHECKS:
            continue
        if (
            scope is None
            or name == scope
            or (scope not in _SCOPE_MODULES and name not in _SCOPE_MODULES)
        ):
            importlib.import_module(f"{__name__}.{name}")


def all_checks(scope: Scope | None = None) -> list[Check]:
    """Every registered check, in id order (optionally only one scope)."""
    _load(scope)
    return sorted(
        (c for c in _REGISTRY.values() if scope is None or c.scope == scope), key=lambda c: c.id
    )


def get_check(id: str) -> Check | None:
    _load()
    return _REGISTRY.get(id)


def run_checks(
    scope: Scope, subject: Any, node: str | None = None, only: Sequence[str] | None = None
) -> list[Finding]:
    """Run every check of ``scope`` (or those in ``only``) over ``subject``, in id order."""
    return [
        finding
        for c in all_checks(scope)
        if only is None or c.id in only
        for finding in c.run(subject, node=node)
    ]


def link_causes(findings: Sequence[Finding]) -> None:
    """Mark, in place, each problem another problem's rule explains as its consequence:
    ``explained_by`` is the root cause, the explaining chain followed to its end.

    Only rules registered in this process are consulted (a document read from a file keeps the
    links it was written with), so that no scope's rules are imported to draw them.
    """
    problems = [f for f in findings if f.severity in (Severity.WARN, Severity.FAIL)]
    present = {f.id for f in problems}
    explainer: dict[str, str] = {}
    for cause in sorted(present):  # sorted: one answer whatever order the findings came in
        rule = _REGISTRY.get(cause)
        for effect in rule.explains if rule else ():
            if effect in present and effect != cause:
                explainer.setdefault(effect, cause)
    for finding in problems:
        if finding.id not in explainer:
            continue
        root, seen = explainer[finding.id], {finding.id}
        while root in explainer and root not in seen:  # a cycle ends where it closes
            seen.add(root)
            root = explainer[root]
        if root != finding.id:
            finding.explained_by = root


def run_node_checks(facts: Any, only: Sequence[str] | None = None) -> list[Finding]:
    """Run every node-scope check (or those in ``only``) over one node's facts."""
    return run_checks("node", facts, getattr(facts, "node", None), only)


def run_cluster_checks(nodes: Sequence[Any], only: Sequence[str] | None = None) -> list[Finding]:
    """Run every cluster-scope check over the facts of all nodes."""
    return run_checks("cluster", list(nodes), None, only)
