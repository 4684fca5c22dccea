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


def test_a_slow_node_s_finding_says_what_its_link_is_rated_where_known() -> None:
    from checks import run_checks

    nodes = [f"node{i}" for i in range(6)]
    budgets = {n: 12.5 for n in nodes}  # 100 Gbit/s NICs: 0.4 GB/s is far below them too
    isolation = run(Cluster(nodes, slow=["node4"]), budgets)
    (slow,) = [f for f in run_checks("isolation", isolation) if f.id == "isolation.node-slow"]
    assert slow.node == "node4" and "its link on node4 is rated 12.50 GB/s" in slow.evidence
    assert slow.title == (
        "node node4 is slow: its link carries 400 MB/s in its pairs, the other pairs 2.20 GB/s: "
        "check its link speed and cable"
    )
