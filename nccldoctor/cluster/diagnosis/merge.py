"""One merge of node reports into the cluster report: the master's at the exit barrier (gather)
and `nccldoctor report merge`'s of node report files, when the master's report was lost.

One pass over the node reports, with dicts keyed by identity: facts united, findings deduplicated
by (id, node, rank, title), phases and ranks united (the first report wins on a duplicate), and
each run's world list (which every node's report repeats) read once, so linear in nodes. Then the
cluster is judged over all of it: the rank verdict is recomputed over all ranks, so that one rank
is named the cause cluster-wide (the nodes' own rank verdicts are dropped); the cross-node checks
run over every node's Facts; nodes without a report are named, as lost with the last phase they
announced when the master saw it. What the merge saw of the nodes is judged by the ``world``
rules (``checks/world.py``): with what only the master knows (``Gathered``: the joins, the
hellos, the clocks, the lost nodes), their findings; every node's MTU beside where the ranks
stopped; a merge of files gets ``report.merged``, saying which nodes' reports were merged from
where and whose are missing (docs/report.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from checks import all_checks, run_checks, run_cluster_checks
from checks.linkrates import link_budget
from checks.world import lost_sentence
from nccldoctor.cluster.diagnosis import causes, verdict
from nccldoctor.cluster.diagnosis.findings import clocks, rendezvous_seen
from nccldoctor.cluster.diagnosis.sections import (
    Listed,
    ListedNode,
    RankRow,
    StuckRow,
    read_sections,
)
from nccldoctor.cluster.records import Hello, NodeEntry, PhaseRow, World
from nccldoctor.facts import NodeFacts, to_dict
from nccldoctor.facts.run import PortProbe
from nccldoctor.facts.world import HelloFlood, LostNode, MergedFrom, Rejected, WorldSeen, stalls
from nccldoctor.model import AreaState, Finding
from nccldoctor.report import Report

# Sections where rank 0's node (else the first report) speaks for the cluster.
_FROM_RANK_ZERO = ("nccl", "mnist", "timeouts")


@dataclass(frozen=True)
class Gathered:
    """What the master holds at the exit barrier besides the node reports."""

    master: str
    world: World | None
    lost: Mapping[int, str] = field(default_factory=dict)  # node rank -> last phase announced
    hellos: Sequence[Hello] = ()
    tcp_gbps: Mapping[str, float] = field(default_factory=dict)
    port: int = 0
    entries: Sequence[NodeEntry] = ()
    command: Sequence[str] = ()
    flood: HelloFlood | None = None  # the knocks at the gate past those it kept
    rejected: Sequence[Rejected] = ()  # what was written to the store in a node's place


def listed_world(master: str, world: World | None, report_paths: Mapping[int, str]) -> Listed:
    """The world ``world`` lists, as a report's ``cluster`` section holds it."""
    if world is None:
        return Listed(master=master, world_size=0)
    nodes = [
        ListedNode(
            name=n.name,
            node_rank=n.node_rank,
            address=n.address,
            advertised_address=n.address,
            seen_address=n.seen,
            ranks=list(range(n.rank_offset, n.rank_offset + n.procs)),
            report_path=report_paths.get(n.node_rank),
        )
        for n in world.nodes
    ]
    return Listed(master, world.world_size, world.backend, nodes, list(world.missing))


def cluster_section(
    master: str, world: World | None, report_paths: Mapping[int, str]
) -> dict[str, Any]:
    """The report's ``cluster`` section (docs/report.md); no backend where no world was."""
    section = to_dict(listed_world(master, world, report_paths))
    return section if world else {k: v for k, v in section.items() if k != "backend"}


def merge_reports(
    reports: Sequence[tuple[str | None, Report]], gathered: Gathered | None = None
) -> Report:
    """The cluster report from ``(report path, node report)`` pairs, in the given order."""
    if not reports:
        raise ValueError("no reports to merge")
    worlds: dict[tuple, Listed | str] = {}  # the cluster sections read, each world once
    read = [read_sections(source, report, worlds) for source, report in reports]
    nodes: dict[str, NodeFacts] = {}
    sources: dict[str, str | None] = {}  # node -> the report it came from
    findings: dict[tuple, Finding] = {}
    area_status: dict[str, str] = {}
    area_state: dict[str, str] = {}
    phases: dict[tuple, PhaseRow] = {}
    by_rank: dict[int | None, RankRow] = {}
    wire: dict[str, float | None] = {}
    probes: dict[str | None, PortProbe | None] = {}
    cluster: dict[str, Any] = {}  # the master, world size and backend the first report says
    listed: dict[str, ListedNode] = {}
    merged_worlds: set[int] = set()
    listed_missing: list[str] = []
    hang: dict[str, Any] | None = None
    stuck: dict[tuple, StuckRow] = {}
    if gathered is not None:
        _read_world(
            listed_world(gathered.master, gathered.world, {}), cluster, listed, merged_worlds
        )
        listed_missing += gathered.world.missing if gathered.world else []
    for node in read:
        report = node.report
        for facts in report.nodes:
            nodes.setdefault(facts.node, facts)
            sources.setdefault(facts.node, node.source)
        for finding in report.findings:
            if finding.id != MERGED:  # re-merging: the new note replaces the old ones
                findings.setdefault(
                    (finding.id, finding.node, finding.rank, finding.title), finding
                )
        for area, line in report.area_status.items():
            if area not in area_status:  # a line and what it stands for come from one report
                area_status[area] = line
                if area in report.area_state:
                    area_state[area] = report.area_state[area]
        for phase in node.phases:
            phases.setdefault((phase.node, phase.rank, phase.phase), phase)
        for row in node.ranks:
            by_rank.setdefault(row.rank, row)
        for host, gbps in node.wire.items():
            wire.setdefault(host, gbps)
        probes.setdefault(node.run_node, node.port_probe)
        if node.hang is not None:
            hang = hang or node.hang
            for entry in node.stuck:
                stuck.setdefault((entry.node, entry.rank), entry)
        if node.listed is not None:
            _read_world(node.listed, cluster, listed, merged_worlds)
            listed_missing += node.listed.missing_nodes
    if gathered is not None:
        named = {n.slot: n.name for n in gathered.world.nodes} if gathered.world else {}
        for entry in sorted(gathered.entries, key=lambda e: e.slot):
            name = named.get(entry.slot, entry.name)  # the world's name: unique
            if name not in nodes:  # a node lost after it joined
                nodes[name] = dataclasses.replace(entry.facts, node=name)
        wire.update({host: round(gbps, 3) for host, gbps in gathered.tcp_gbps.items()})

    ranks = sorted(by_rank.values(), key=lambda r: (r.rank is None, r.rank or 0))
    facts = list(nodes.values())
    first = next((node for node in read if any(r.rank == 0 for r in node.ranks)), read[0])
    names = (
        {n.node_rank: n.name for n in gathered.world.nodes} if gathered and gathered.world else {}
    )
    lost = (
        [LostNode(names.get(r, str(r)), r, phase) for r, phase in sorted(gathered.lost.items())]
        if gathered
        else []
    )
    lost_sentences = [lost_sentence(node) for node in lost]
    missing = sorted({*listed, *listed_missing} - set(sources))
    # The check's ranks are outcomes: the verdict is then judged anew over all of them; a
    # report whose ranks are not (docs/report.md#ranks) keeps its nodes' verdicts and stuck ranks.
    ended = [r.outcome for r in ranks if r.outcome]
    ended = ended if len(ended) == len(ranks) else None
    world = gathered.world if gathered else None
    joins = (
        rendezvous_seen(world, gathered.hellos, gathered.port, gathered.flood, gathered.rejected)
        if gathered and world
        else None
    )
    seen = WorldSeen(
        facts=facts,
        stalls=stalls(ended) if ended is not None else (),
        tcp_gbps=wire,
        rendezvous=joins,
        clocks=clocks(gathered.entries) if gathered else (),
        lost=lost,
        merged=None if gathered else MergedFrom(dict(sources), missing),
        unread=[bad for node in read for bad in node.unread],
    )
    found = run_checks("world", seen)
    judged: list[Finding] = []
    if ended is not None:
        findings = {k: f for k, f in findings.items() if f.id not in verdict.STOPPED}
        cause = causes.judge(facts, ended, probes, found, master=first.run_node)
        hang = verdict.hang_section(ended, lost_sentences, *causes.verdict_args(cause),
                                    lost_of=NODE_LOST, at_fault=causes.at_fault(cause))  # fmt: skip
        if ended:
            area_status["run"] = f"{sum(r.ok for r in ended)}/{len(ended)} ranks ok"
            area_state.pop("run", None)  # the ranks' ends are judged: the findings mark it
        judged += [
            *(cause.findings if cause else []),
            *verdict.rank_findings(ended, lost_sentences, causes.at_fault(cause)),
        ]
    elif hang is not None:
        hang = {**hang, "stuck": [dict(entry.row) for entry in stuck.values()]}
    judged += [f for f in found if f.id != MERGED]
    bandwidth = first.report.extra.get("bandwidth")  # rank 0's rows, handed on as written
    if isinstance(bandwidth, dict):  # against every node's links now
        bandwidth_rules = {c.id for c in all_checks("bandwidth")}
        findings = {k: f for k, f in findings.items() if f.id not in bandwidth_rules}
        sweep = {**bandwidth, "tcp_wire_Gbitps": wire}
        judged += run_checks("bandwidth", link_budget(facts, sweep, first.network))
    if len(facts) > 1:  # the cross-node checks are judged anew over every node's Facts
        cross_node = {c.id for c in all_checks("cluster")}
        findings = {k: f for k, f in findings.items() if f.id not in cross_node}
        judged += run_cluster_checks(facts)
    for finding in judged:
        findings.setdefault((finding.id, finding.node, finding.rank, finding.title), finding)

    for name, source in sources.items():  # a node's report lists its own path as None
        entry = listed.get(name) or ListedNode(name)
        listed[name] = dataclasses.replace(entry, report_path=entry.report_path or source)
    cluster_nodes = [to_dict(entry) for entry in listed.values()]
    cluster = {"master": None, "world_size": None, **cluster, "nodes": cluster_nodes,
               "missing_nodes": missing}  # fmt: skip
    area_status["cluster"] = (
        f"{len(cluster_nodes)} node(s), world size {cluster['world_size']}, {len(reports)} reported"
        if cluster_nodes
        else "no rendezvous"
    )
    if not cluster_nodes:
        area_state["cluster"] = AreaState.NOT_MEASURED
    lost_names = {node.name for node in lost}
    handed = first.report.extra  # sections handed on as rank 0's node wrote them
    extra: dict[str, Any] = {k: handed[k] for k in _FROM_RANK_ZERO if handed.get(k)}
    run = handed.get("run") if isinstance(handed.get("run"), dict) else {}
    extra.update(
        phases=[phase.to_dict() for phase in phases.values()],
        ranks=[dict(row.row) for row in ranks],
        hang=hang,
        cluster=cluster,
        run={**run, "nodes_reported": len(reports)},
    )
    # the master's isolation rounds, wherever its report comes in the list
    isolation = [
        r.extra["isolation"] for _, r in reports if isinstance(r.extra.get("isolation"), dict)
    ]
    if isolation:
        extra["isolation"] = isolation[0]
    if bandwidth and isinstance(bandwidth, dict):  # rank 0's rows, every node's wire speed
        extra["bandwidth"] = {**bandwidth, "tcp_wire_Gbitps": wire}
    marker = [f for f in found if f.id == MERGED]  # the note closes the document
    return Report(
        kind=first.report.kind,
        nodes=facts,
        findings=[*findings.values(), *marker],
        command=list(gathered.command) if gathered else first.report.command,
        completed=all(r.completed for _, r in reports)
        and not set(missing) - lost_names  # a lost node is judged; a missing one is not
        and (gathered is None or (world is not None and not world.abort)),
        area_status=area_status,
        area_state=area_state,
        extra=extra,
    )


def _read_world(
    section: Listed, cluster: dict[str, Any], listed: dict[str, ListedNode], merged: set[int]
) -> None:
    """Adds one ``cluster`` section's world to ``listed``, unless the same one was added
    (sections.read_sections reads a world the nodes' reports repeat into one record)."""
    for key in ("master", "world_size", "backend"):
        if getattr(section, key) is not None:
            cluster.setdefault(key, getattr(section, key))
    if id(section) not in merged:
        merged.add(id(section))
        for entry in section.nodes:
            listed.setdefault(entry.name, entry)


NODE_LOST = {"check": "run.node-lost", "category": "remote_peer_closed"}
MERGED = "report.merged"
