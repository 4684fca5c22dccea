"""The isolation rounds' answer in the cluster report: attached to the master's own node report,
carried by the one merge (the master's gather and `nccldoctor report merge` of the node files
alike), wherever the master's report comes in the list."""

from __future__ import annotations

from nccldoctor.cluster.diagnosis import merge
from nccldoctor.cluster.isolate import answer
from nccldoctor.cluster.isolate.simulate import Cluster, run
from nccldoctor.report import Report
from tests.cluster.synthetic import synthetic_run


def test_the_merge_of_the_node_files_keeps_the_rounds_answer_and_its_findings() -> None:
    nodes = synthetic_run(4)
    isolation = run(Cluster([f"node{i}" for i in range(4)], faulty=["node2"]))
    master = Report.from_dict(nodes.own)
    answer.attach(master, isolation)
    others = [Report.from_dict(d) for d in nodes.documents()[1:]]
    for reports in ([master, *others], [*others, master]):
        merged = merge.merge_reports([(None, r) for r in reports])
        assert merged.extra["isolation"]["nodes"][2] == {
            "node": "node2",
            "state": "faulty",
            "rounds": list(next(v.rounds for v in isolation.nodes if v.node == "node2")),
            "why": next(v.why for v in isolation.nodes if v.node == "node2"),
        }
        faulty = [f for f in merged.findings if f.id == "isolation.node-faulty"]
        assert [f.node for f in faulty] == ["node2"] and merged.exit_code == 1
