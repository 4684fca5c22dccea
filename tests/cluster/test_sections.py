"""A node's report as the merge reads it (cluster/diagnosis/sections.py): a section another node
wrote that does not read is that node's section left out of the merge, said by the
``report.section-unread`` finding, never an exception."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nccldoctor.cluster.diagnosis import merge, peer
from nccldoctor.cluster.diagnosis.sections import read_sections
from nccldoctor.cluster.records import PhaseRow, PhaseStatus
from nccldoctor.model import Severity
from nccldoctor.report import Report
from tests.cluster.synthetic import synthetic_run
from tests.strategies import JSON

UNREAD = "report.section-unread"
# Where the merge reads a node's report, and the rows and values inside
PLACES = [("phases",), ("phases", 0), ("phases", 0, "status"), ("phases", 0, "started"),
          ("ranks",), ("ranks", 0), ("ranks", 0, "rank"), ("ranks", 0, "state"), ("run",),
          ("run", "node"), ("run", "port_probe"), ("bandwidth",), ("bandwidth", "tcp_wire_Gbitps"),
          ("cluster",), ("cluster", "nodes"), ("cluster", "nodes", 0), ("cluster", "master"),
          ("hang",), ("nccl",), ("report_path",)]  # fmt: skip


def put(document: dict[str, Any], where: tuple, value: Any) -> None:
    parent = document
    for key in where[:-1]:
        parent = parent[key]
    parent[where[-1]] = value


def unread(report: Report) -> list[tuple[str | None, str]]:
    return [(f.node, f.title) for f in report.findings if f.id == UNREAD]


@settings(max_examples=300, deadline=None)
@given(where=st.sampled_from(PLACES), value=JSON, gathered=st.booleans())
def test_any_value_in_another_nodes_section_is_merged_or_said_to_be_left_out(
    where, value, gathered
) -> None:
    run = synthetic_run(3, hang_rank=3)
    put(run.others[1], where, value)
    reports = [(None, Report.from_dict(copy.deepcopy(d))) for d in run.documents()]
    merged = run.merge() if gathered else merge.merge_reports(reports)
    json.dumps(merged.to_dict())  # a document, whatever the node wrote
    said = read_sections(None, reports[1][1]).unread
    assert [(f"node {bad.node}'s report: its {bad.section} section", bad.node) for bad in said] == [
        (title.split(" was left out")[0], node) for node, title in unread(merged)
    ]
    assert all(bad.node == "node1" for bad in said)


def test_a_phase_of_a_status_this_version_does_not_know_leaves_that_nodes_phases_out() -> None:
    run = synthetic_run(2, hang_rank=3)
    run.others[1]["phases"][2]["status"] = "paused"
    merged = run.merge()
    ((node, title),) = unread(merged)
    assert node == "node1" and title == (
        "node node1's report: its phases section was left out of the merge: "
        "row 2: status: 'paused' is not a valid PhaseStatus"
    )
    (finding,) = [f for f in merged.findings if f.id == UNREAD]
    assert finding.severity is Severity.WARN
    assert {row["node"] for row in merged.extra["phases"]} == {"node0"}
    assert merged.extra["hang"]["verdict"].startswith("rank 3 on node node1")  # judged still


def test_a_port_probe_that_is_none_is_left_out_and_the_ranks_still_judged() -> None:
    run = synthetic_run(2, hang_rank=3)
    run.others[1]["run"]["port_probe"] = {"to_master_ok": "no"}
    merged = run.merge()
    ((node, title),) = unread(merged)
    assert node == "node1" and title.startswith(
        "node node1's report: its run.port_probe section was left out of the merge: "
    )
    assert "ephemeral ports" not in merged.extra["hang"]["verdict"]
    assert [r["rank"] for r in merged.extra["ranks"]] == [0, 1, 2, 3]


def test_a_node_result_that_holds_to_the_schema_and_not_to_the_records_is_merged_without_it():
    """The schema lets a phase start at null; the agent never writes one: the master's read of
    a node's result (peer.node_result) passes it, the merge leaves that node's phases out."""
    run = synthetic_run(2)
    document = Report.from_dict(run.others[1]).to_dict()  # as the node publishes it
    document["phases"][0]["started"] = None
    report, why = peer.node_result(json.dumps(document))
    assert report is not None and why == ""
    gathered = merge.Gathered(master="198.18.0.1", world=run.world, entries=run.entries)
    merged = merge.merge_reports([(None, Report.from_dict(run.own)), (None, report)], gathered)
    assert unread(merged) == [
        (
            "node1",
            "node node1's report: its phases section was left out of the merge: "
            "row 0: started: expected float, got null",
        )
    ]


def test_a_phase_row_reads_back_as_it_was_written() -> None:
    row = PhaseRow("node0", 1, "barrier", PhaseStatus.TIMEOUT, 10.5, 14.0, 3.5, "stuck")
    assert PhaseRow.from_dict(json.loads(json.dumps(row.to_dict()))) == row


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"status": "paused"}, "status: 'paused' is not a valid PhaseStatus"),
        ({"rank": "1"}, "rank: expected int, got str"),
        ({"started": None}, "started: expected float, got null"),
        ({"detail": None}, "detail: expected str, got null"),
    ],
)
def test_a_phase_row_that_is_not_one_is_refused_with_why(change, why) -> None:
    row = PhaseRow("node0", None, "init", PhaseStatus.OK, 1.0).to_dict()
    with pytest.raises(ValueError) as refused:
        PhaseRow.from_dict({**row, **change})
    assert str(refused.value) == why
    no_started = {k: v for k, v in row.items() if k != "started"}
    with pytest.raises(ValueError, match=r"^no started$"):
        PhaseRow.from_dict(no_started)
    with pytest.raises(ValueError, match=r"^not an object but list$"):
        PhaseRow.from_dict([row])
