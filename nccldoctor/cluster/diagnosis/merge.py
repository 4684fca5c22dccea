"""The master merges every node's report into the cluster report, in one pass over the nodes.

Node findings are kept (deduplicated); the rank verdict is recomputed over all ranks, so that one
rank is named the cause cluster-wide; the cross-node checks run over every node's Facts; nodes
that vanished before the exit barrier are named with the last phase they announced.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from checks import run_cluster_checks
from nccldoctor.cluster.agent.listener import Hello
from nccldoctor.cluster.agent.rendezvous import NodeEntry, World
from nccldoctor.cluster.diagnosis import causes, verdict
from nccldoctor.cluster.diagnosis.findings import rendezvous_findings, skew_findings
from nccldoctor.facts import NodeFacts, from_dict
from nccldoctor.model import Finding, Severity
from nccldoctor.report import Report

_RANK_VERDICT_IDS = ("run.rank-stuck", "run.rank-failed")


def cluster_section(
    master: str, world: World | None, report_paths: Mapping[int, str]
) -> dict[str, Any]:
    """The report's ``cluster`` section (docs/report.md)."""
    if world is None:
        return {"master": master, "world_size": 0, "nodes": [], "missing_nodes": []}
    nodes = [
        {
            "name": n.name,
            "node_rank": n.node_rank,
            "address": n.address,
            "advertised_address": n.address,
            "seen_address": n.seen,
            "ranks": list(range(n.rank_offset, n.rank_offset + n.procs)),
            "report_path": report_paths.get(n.node_rank),
        }
        for n in world.nodes
    ]
    return {
        "master": master,
        "world_size": world.world_size,
        "backend": world.backend,
        "nodes": nodes,
        "missing_nodes": list(world.missing),
    }


def merge(
    *,
    master: str,
    world: World | None,
    own: dict[str, Any],
    others: Mapping[int, dict[str, Any]],
    lost: Mapping[int, str],
    hellos: Sequence[Hello],
    tcp_gbps: Mapping[str, float],
    port: int,
    entries: Sequence[NodeEntry],
    command: Sequence[str],
) -> Report:
    """The cluster Report from the master's own report and the other nodes' (node rank → doc)."""
    docs = [own, *(others[r] for r in sorted(others))]
    names = {n.node_rank: n.name for n in world.nodes} if world else {}
    facts = [from_dict(NodeFacts, e.facts) for e in sorted(entries, key=lambda e: e.slot)]
    if not facts:
        facts = [from_dict(NodeFacts, n) for doc in docs for n in doc.get("nodes", [])]
    ranks = sorted((r for doc in docs for r in doc.get("ranks") or []), key=lambda r: r["rank"])
    lost_sentences = [
        f"node {names.get(r, r)} (node rank {r}) stopped reporting during its {phase} phase"
        for r, phase in sorted(lost.items())
    ]

    wire = {
        k: v
        for doc in docs
        for k, v in (doc.get("bandwidth") or {}).get("tcp_wire_gbps", {}).items()
    }
    wire.update({k: round(v, 3) for k, v in tcp_gbps.items()})
    probes = {d.get("run", {}).get("node"): d.get("run", {}).get("port_probe") for d in docs}
    cause = causes.judge(facts, ranks, probes, wire, master=own.get("run", {}).get("node"))
    findings = _dedupe(
        [
            Finding.from_dict(f)
            for doc in docs
            for f in doc.get("findings", [])
            if f.get("id") not in _RANK_VERDICT_IDS
        ]
        + (cause.findings if cause else [])
        + verdict.rank_findings(ranks, lost_sentences)
        + [_lost_finding(names.get(r, str(r)), r, phase) for r, phase in sorted(lost.items())]
        + (rendezvous_findings(world, hellos, port) if world else [])
        + skew_findings(entries)
        + (run_cluster_checks(facts) if len(facts) > 1 else [])
    )
    first = next((d for d in docs if any(r["rank"] == 0 for r in d.get("ranks") or [])), own)
    bandwidth = dict(first.get("bandwidth") or {})
    bandwidth["tcp_wire_gbps"] = wire
    paths = {d.get("run", {}).get("node_rank"): d.get("report_path") for d in docs}
    status = dict(own.get("area_status", {}))
    status["cluster"] = (
        f"{len(world.nodes)} node(s), world size {world.world_size}, {len(docs)} reported"
        if world
        else "no rendezvous"
    )
    ok = sum(r["state"] == "ok" for r in ranks)
    status["run"] = (
        f"{ok}/{len(ranks)} ranks ok" if ranks else own.get("area_status", {}).get("run", "")
    )
    return Report(
        kind="check",
        nodes=facts,
        findings=findings,
        command=list(command),
        completed=bool(own.get("completed")) and bool(world) and not world.abort,
        area_status=status,
        extra={
            "phases": [p for doc in docs for p in doc.get("phases") or []],
            "bandwidth": bandwidth,
            "ranks": ranks,
            "hang": verdict.hang_section(ranks, lost_sentences, cause.sentence if cause else None),
            "mnist": first.get("mnist"),
            "cluster": cluster_section(master, world, paths),
            "timeouts": own.get("timeouts"),
            "run": {**(own.get("run") or {}), "nodes_reported": 1 + len(others)},
        },
    )


def _lost_finding(name: str, node_rank: int, phase: str) -> Finding:
    return Finding(
        "run.node-lost",
        "remote_peer_closed",
        Severity.FAIL,
        f"node {name} (node rank {node_rank}) stopped reporting during its {phase} phase",
        [f"no result before the exit barrier's deadline; last phase announced: {phase}"],
        "The node died or lost its network: check its kernel log (dmesg: OOM killer), its "
        "nccldoctor report on its own disk, and the link between the nodes.",
        area="cluster",
        node=name,
    )


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen, kept = set(), []
    for f in findings:
        key = (f.id, f.node, f.rank, f.title)
        if key not in seen:
            seen.add(key)
            kept.append(f)
    return kept
