"""Merging per-node reports into one cluster report, for when the master's report was lost.

Every node writes its own report (docs/design.md#phases, gather), so the cluster picture can be rebuilt from
whichever reports survived: nodes are united, findings deduplicated by (id, node, rank, title),
phases and ranks concatenated (first report wins on a duplicate), the verdict recomputed, and a
``report.merged`` finding says which nodes' reports were merged and which are missing. A report
missing makes the merged one incomplete: nothing vouches for that node. One pass over the inputs
with dicts keyed by identity, and each run's world list (which every node's report repeats) read
once: linear in the number of nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nccldoctor.facts import NodeFacts
from nccldoctor.model import Finding, Severity
from nccldoctor.report.document import Report

# Sections where the first report that has one speaks for the cluster (rank 0's node has them).
_FIRST_WINS = ("nccl", "bandwidth", "mnist")


def merge_reports(reports: Sequence[tuple[str, Report]]) -> Report:
    """One cluster report from ``(source path, per-node report)`` pairs, in the given order."""
    if not reports:
        raise ValueError("no reports to merge")
    nodes: dict[str, NodeFacts] = {}
    findings: dict[tuple, Finding] = {}
    area_status: dict[str, str] = {}
    sources: dict[str, str] = {}  # node -> the report it came from
    extra: dict[str, Any] = {}
    phases: dict[tuple, dict] = {}
    ranks: dict[Any, dict] = {}
    cluster_nodes: dict[str, dict] = {}
    worlds: set[tuple] = set()
    listed_missing: list[str] = []
    stuck: dict[tuple, dict] = {}
    hang: dict[str, Any] | None = None
    for source, report in reports:
        for facts in report.nodes:
            nodes.setdefault(facts.node, facts)
            sources.setdefault(facts.node, source)
        for finding in report.findings:
            if finding.id == "report.merged":  # re-merging: the new note replaces the old ones
                continue
            findings.setdefault((finding.id, finding.node, finding.rank, finding.title), finding)
        for area, line in report.area_status.items():
            area_status.setdefault(area, line)
        for key in _FIRST_WINS:
            if report.extra.get(key) and key not in extra:
                extra[key] = report.extra[key]
        for phase in _dicts(report.extra.get("phases")):
            phases.setdefault((phase.get("node"), phase.get("rank"), phase.get("phase")), phase)
        for entry in _dicts(report.extra.get("ranks")):
            ranks.setdefault(entry.get("rank"), entry)
        cluster = (
            report.extra.get("cluster") if isinstance(report.extra.get("cluster"), dict) else {}
        )
        for key in ("master", "world_size"):
            if cluster.get(key) is not None:
                extra.setdefault("cluster", {}).setdefault(key, cluster[key])
        listed = cluster.get("nodes") if isinstance(cluster.get("nodes"), list) else []
        world = (cluster.get("master"), cluster.get("world_size"), len(listed), str(listed[:1]),
                 str(listed[-1:]))  # fmt: skip
        if world not in worlds:  # every node of a run lists the whole world: read it once
            worlds.add(world)
            for entry in _dicts(listed):
                cluster_nodes.setdefault(str(entry.get("name")), dict(entry))
        listed_missing += [str(n) for n in cluster.get("missing_nodes") or []]
        if isinstance(report.extra.get("hang"), dict):
            hang = hang or {k: v for k, v in report.extra["hang"].items() if k != "stuck"}
            for entry in _dicts(report.extra["hang"].get("stuck")):
                stuck.setdefault((entry.get("node"), entry.get("rank")), entry)
    missing = sorted(({*cluster_nodes, *listed_missing}) - set(nodes))
    for name, source in sources.items():
        entry = cluster_nodes.setdefault(name, {"name": name})
        entry["report_path"] = entry.get("report_path") or source  # a node report lists None
    extra["cluster"] = {
        "master": None,
        "world_size": None,
        **extra.get("cluster", {}),
        "nodes": list(cluster_nodes.values()),
        "missing_nodes": missing,
    }
    extra["phases"] = list(phases.values())
    extra["ranks"] = sorted(
        ranks.values(), key=lambda e: (e.get("rank") is None, e.get("rank") or 0)
    )
    extra["hang"] = {**hang, "stuck": list(stuck.values())} if hang is not None else None
    first = reports[0][1]
    return Report(
        kind=first.kind,
        nodes=list(nodes.values()),
        findings=[*findings.values(), merged_finding(sources, missing)],
        command=first.command,
        completed=all(report.completed for _, report in reports) and not missing,
        area_status=area_status,
        extra=extra,
    )


def merged_finding(sources: dict[str, str], missing: list[str]) -> Finding:
    """Which nodes' reports were merged (and from where) and whose reports are missing."""
    title = f"cluster report merged from the reports of {len(sources)} node"
    title += "s" if len(sources) != 1 else ""
    title += f" ({', '.join(sources)})"
    if missing:
        title += f"; no report from {', '.join(missing)}"
    return Finding(
        id="report.merged",
        category="other",
        severity=Severity.WARN if missing else Severity.INFO,
        title=title,
        evidence=[f"{node}: {source}" for node, source in sources.items()]
        + [f"{node}: missing" for node in missing],
        fix=(
            "Every node writes its own report; copy the missing nodes' report files here and run\n"
            "nccldoctor report merge <every node's report.json> -o report.html"
        )
        if missing
        else "",
        area="run",
    )


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []
