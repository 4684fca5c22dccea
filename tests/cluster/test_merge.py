"""The one merge (cluster/diagnosis/merge.py): the master's gather and `nccldoctor report merge`
judge a cluster alike, from the same node reports."""

from __future__ import annotations

from dataclasses import asdict

from nccldoctor.cluster.diagnosis import merge, verdict
from nccldoctor.facts.ranks import RankOutcome
from nccldoctor.facts.run import PortProbe
from nccldoctor.model import Finding, Severity
from nccldoctor.report import Report
from tests.cluster.synthetic import synthetic_run


def _rank_verdicts(report: Report) -> list[tuple[str, int | None, str]]:
    return [
        (f.id, f.rank, f.severity.value) for f in report.findings if f.id.startswith("run.rank-")
    ]


def test_each_nodes_own_cause_gives_way_to_one_cause_over_all_ranks() -> None:
    """Each node judged only its own ranks: node0's ranks failed waiting, so node0 named its rank 0
    the cause. Over all ranks the stuck rank 3 (node1) is the cause, in either merge."""
    run = synthetic_run(4, hang_rank=3)
    for doc in run.documents():
        alone = verdict.rank_findings([RankOutcome.from_dict(r) for r in doc["ranks"]])
        doc["findings"] += [f.to_dict() for f in alone]
    own = Report.from_dict(run.own)
    node0_cause = [rank for _, rank, severity in _rank_verdicts(own) if severity == "fail"]
    files = merge.merge_reports([(None, Report.from_dict(d)) for d in run.documents()])
    master = run.merge()
    assert node0_cause == [0]
    failing = [v for v in _rank_verdicts(files) if v[2] == "fail"]
    assert failing == [("run.rank-stuck", 3, "fail")]
    assert _rank_verdicts(files) == _rank_verdicts(master)
    assert files.extra["hang"] == master.extra["hang"]


def test_a_lost_node_is_judged_by_the_master_and_unknown_to_a_merge_of_files() -> None:
    """The master saw node3 stop during its workers phase: a failure it can name. A merge of the
    surviving files only knows that node3's report is missing: incomplete, never healthy."""
    run = synthetic_run(4)
    del run.others[3]
    docs = run.documents()
    gathered = merge.Gathered(
        master=run.world.nodes[0].address, world=run.world, lost={3: "workers"}, entries=run.entries
    )
    master = merge.merge_reports([(None, Report.from_dict(d)) for d in docs], gathered)
    files = merge.merge_reports([(None, Report.from_dict(d)) for d in docs])
    for report in (master, files):
        assert report.extra["cluster"]["missing_nodes"] == ["node3"]
    lost = [f for f in master.findings if f.id == "run.node-lost"]
    assert [f.node for f in lost] == ["node3"] and master.completed
    assert "node node3 (node rank 3) stopped reporting" in master.extra["hang"]["verdict"]
    assert not any(f.id == "report.merged" for f in master.findings)
    assert [n.node for n in master.nodes][-1] == "node3"  # its facts, from its join
    note = files.findings[-1]
    assert note.id == "report.merged" and note.title.endswith("; no report from node3")
    assert not files.completed and files.exit_code == 3


def test_cross_node_checks_replace_the_inputs_and_run_over_every_node() -> None:
    """A cluster.* finding in an input (a re-merged report) is judged anew over all the Facts."""
    docs = synthetic_run(3).documents()
    docs[2]["nodes"][0]["software"]["torch_version"] = "0.0"
    stale = Finding("cluster.torch-version-differs", "version_mismatch", Severity.FAIL, "stale")
    docs[0]["findings"].append(stale.to_dict())
    merged = merge.merge_reports([(None, Report.from_dict(d)) for d in docs])
    judged = [f for f in merged.findings if f.id == "cluster.torch-version-differs"]
    assert [f.title for f in judged] == ["torch version differs between nodes (2 values)"]


def test_a_rank_stuck_waiting_on_the_node_whose_ports_drop_waited_and_is_not_the_cause() -> None:
    """`srun -N8` with node3 dropping new connections to its ephemeral ports (the lab's
    rendezvous_only_firewall): ranks 3-7 never finished gloo's init, each stopped by its own
    deadline, rank 4 first; ranks 0-2 finished it and lost a peer in the barrier. node3's port
    probe says the master's dial-back to it was dropped. Rank 4 (innocent node4) got the
    run.rank-stuck FAIL for ending first; node3's rank is the cause, the others waited on it."""
    run = synthetic_run(8, procs=1)
    ended = {4: 112.9, 7: 114.1, 6: 116.1, 5: 117.9, 3: 120.2}  # as the lab run's ranks ended
    for i, doc in enumerate(run.documents()):
        (rank,) = doc["ranks"]
        if i in ended:
            deadline = "init: timed out after 8 s (worker deadline)"
            rank.update(phase_reached="init", state="stuck", exit_code=3, error=deadline,
                        stuck=deadline, ended_at=1796437000 + ended[i])  # fmt: skip
        else:
            rank.update(phase_reached="barrier", state="failed", exit_code=3,
                        ended_at=1796437114.1, error="barrier: RuntimeError: [pair.cc:553] "
                        "Connection closed by peer [198.18.0.8]:6341.")  # fmt: skip
        dropped = "" if i != 3 else "TimeoutError: timed out"
        probe = PortProbe("198.18.0.1:41000", True, "", f"{doc['cluster']['nodes'][i]['address']}"
                          ":52000", i != 3, dropped, 3.0)  # fmt: skip
        doc["run"]["port_probe"] = asdict(probe)
    merged = run.merge()
    stopped = {f.rank: f for f in merged.findings if f.id in verdict.STOPPED}
    assert [r for r, f in stopped.items() if f.severity is Severity.FAIL] == [3]
    assert stopped[3].title == "rank 3 on node node3 never finished init_process_group"
    for rank in (4, 5, 6, 7):
        assert stopped[rank].severity is Severity.WARN
        assert stopped[rank].title == f"rank {rank} waited in init_process_group on node node3"
        assert stopped[rank].node == f"node{rank}" and "waited on the node" in stopped[rank].fix
    sentences = merged.extra["hang"]["verdict"].split(": ", 1)[1].split("; ")
    assert sentences[:2] == [
        "rank 3 on node node3 never finished init_process_group",
        "ranks 4-7 waited in init_process_group on node node3",
    ], sentences
    assert merged.extra["hang"]["verdict"].startswith(
        "connections to ephemeral ports on node node3"
    )
