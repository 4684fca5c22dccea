"""Synthetic `nccldoctor check` runs on N nodes, for the master's merge at scale.

Every node's report is a copy of one real node report (tests/fixtures/reports/check-gloo-1node.json,
a gloo check of 2 ranks) renamed to its node and its global ranks; ``hang_rank`` makes one rank
stuck in allreduce_correctness and every other rank time out there, the heaviest verdict to merge.
Used by tests/cluster/test_merge.py, tests/cluster/test_scale_units.py and bench/scale.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nccldoctor.cluster.diagnosis import merge
from nccldoctor.cluster.records import Hello, NodeEntry, World, WorldNode
from nccldoctor.facts import NodeFacts, from_dict
from nccldoctor.report import Report

TEMPLATE = Path(__file__).resolve().parents[1] / "fixtures" / "reports" / "check-gloo-1node.json"
PORT = 29400


@dataclass
class SyntheticRun:
    """What the master holds at the exit barrier: the world, the joins, every node's report."""

    world: World
    entries: list[NodeEntry]
    own: dict[str, Any]
    others: dict[int, dict[str, Any]]
    hellos: list[Hello]

    def documents(self) -> list[dict[str, Any]]:
        """Every node's report, node rank order."""
        return [self.own, *(self.others[r] for r in sorted(self.others))]

    def merge(self) -> Report:
        """The master's merge of every node's report."""
        gathered = merge.Gathered(
            master=self.world.nodes[0].address,
            world=self.world,
            hellos=self.hellos,
            tcp_gbps={n.name: 9.5 for n in self.world.nodes[1:]},
            port=PORT,
            entries=self.entries,
            command=["nccldoctor", "check"],
        )
        return merge.merge_reports(
            [(None, Report.from_dict(d)) for d in self.documents()], gathered
        )


def synthetic_run(nodes: int, procs: int = 2, hang_rank: int | None = None) -> SyntheticRun:
    template = TEMPLATE.read_text()
    world_nodes = [
        WorldNode(i, i, f"node{i}", _address(i), _address(i), procs, i * procs)
        for i in range(nodes)
    ]
    world = World("5ca1ab1e0000", "gloo", world_nodes, nodes)
    # every node's report lists the same world: built once, each report a copy of its own
    cluster = json.dumps(merge.cluster_section(world_nodes[0].address, world, {}))
    docs = [_node_doc(template, node, cluster, hang_rank) for node in world_nodes]
    entries = [
        NodeEntry(
            n.slot, n.name, n.address, n.seen, procs, facts=from_dict(NodeFacts, doc["nodes"][0])
        )
        for n, doc in zip(world_nodes, docs, strict=True)
    ]
    hellos = [Hello(n.name, n.address, n.seen, True) for n in world_nodes[1:]]
    return SyntheticRun(world, entries, docs[0], dict(enumerate(docs[1:], 1)), hellos)


def _address(i: int) -> str:
    return f"198.18.{i // 250}.{i % 250 + 1}"


def _node_doc(template: str, node: WorldNode, cluster: str, hang_rank: int | None) -> dict:
    doc = json.loads(template)
    name = node.name
    doc["nodes"][0]["node"] = name
    for item in (*doc["findings"], *doc["phases"]):
        item["node"] = name
    ranks = []
    for local in range(node.procs):
        rank = dict(doc["ranks"][local % len(doc["ranks"])])
        rank.update(node=name, local_rank=local, rank=node.rank_offset + local)
        rank["log_path"] = f"/tmp/check/{name}/rank{rank['rank']}/worker.log"
        if hang_rank is not None:
            stuck = rank["rank"] == hang_rank
            rank.update(
                phase_reached="allreduce_correctness",
                state="stuck" if stuck else "failed",
                exit_code=-9 if stuck else 1,
                stuck="stopped by the watchdog" if stuck else None,
                error=None
                if stuck
                else "allreduce_correctness: RuntimeError: [gloo] Timed out "
                "waiting 20000ms for recv operation to complete",
            )
        ranks.append(rank)
    doc["ranks"] = ranks
    doc["cluster"] = json.loads(cluster)
    doc["run"].update(node=name, node_rank=node.node_rank, master=node.node_rank == 0)
    doc["report_path"] = f"/tmp/check/check-{name}.json"
    return doc
