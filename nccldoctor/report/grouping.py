"""One finding, many nodes: the findings of a document as every view lists them.

A rule that fires identically on eight nodes is one problem, not eight: findings with the same
id, severity, title and rank are one group naming its nodes. Evidence lines every node shares
are shown once; the lines that differ are kept per node under it. A fix that names each node's
own address differs per node: the group's fix holds each, under the nodes it is for.
Arrangement only: the document keeps every finding as the rules made it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nccldoctor.report.shape import items, values


@dataclass
class FindingGroup:
    finding: dict[str, Any]  # the first of the group, as the document has it
    nodes: list[str] = field(default_factory=list)  # every node it fired on, in document order
    evidence: list[str] = field(default_factory=list)  # the lines all those nodes share
    # (nodes, their own lines): nodes whose differing lines are the same share one entry
    per_node: list[tuple[str, list[str]]] = field(default_factory=list)
    fix: str = ""  # the one fix, or each node's under a "# on NODE:" line where they differ

    @property
    def several(self) -> bool:
        return len(self.nodes) > 1


def _key(finding: dict[str, Any]) -> tuple[str, ...]:
    return tuple(str(finding.get(k)) for k in ("id", "severity", "title", "rank", "category"))


def group_findings(document: dict[str, Any]) -> list[FindingGroup]:
    """The document's findings grouped across nodes, in the order each group first appears."""
    members: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for finding in items(document.get("findings")):
        members.setdefault(_key(finding), []).append(finding)
    return [_group(found) for found in members.values()]


def _group(found: list[dict[str, Any]]) -> FindingGroup:
    lines = [[str(e) for e in _evidence(f)] for f in found]
    nodes = [str(f["node"]) for f in found if f.get("node")]
    fix = _fix(found)
    if len(found) == 1:
        return FindingGroup(found[0], nodes, lines[0], fix=fix)
    shared = [line for line in lines[0] if all(line in other for other in lines[1:])]
    by_lines: dict[tuple[str, ...], list[str]] = {}
    for finding, own in zip(found, lines, strict=True):
        rest = tuple(line for line in own if line not in shared)
        if rest:
            by_lines.setdefault(rest, []).append(str(finding.get("node") or "?"))
    per_node = [(", ".join(names), list(rest)) for rest, names in by_lines.items()]
    return FindingGroup(found[0], nodes, shared, per_node, fix)


def _fix(found: list[dict[str, Any]]) -> str:
    by_fix: dict[str, list[str]] = {}
    for finding in found:
        by_fix.setdefault(str(finding.get("fix") or ""), []).append(str(finding.get("node") or "?"))
    if len(by_fix) == 1:
        return next(iter(by_fix))
    return "\n".join(f"# on {', '.join(names)}:\n{fix}" for fix, names in by_fix.items() if fix)


def _evidence(finding: dict[str, Any]) -> list[Any]:
    evidence = finding.get("evidence")
    return values(evidence) if isinstance(evidence, list) else [evidence] if evidence else []
