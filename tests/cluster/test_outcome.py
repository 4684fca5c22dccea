"""A rank's outcome crosses processes as the report's ``ranks`` entry: it reads back as it was
written, a state from a newer node is a clear state, and a row that is no outcome is refused."""

from __future__ import annotations

import json

import pytest

from nccldoctor.cluster.diagnosis import merge
from nccldoctor.cluster.diagnosis.verdict import hang_section, rank_findings
from nccldoctor.facts.ranks import MessageSizes, OutcomeState, RankOutcome, outcomes
from nccldoctor.model import Severity
from nccldoctor.report import Report
from tests.cluster.synthetic import TEMPLATE, synthetic_run

STUCK = RankOutcome(
    rank=3,
    node="node1",
    state=OutcomeState.STUCK,
    phase_reached="allreduce_correctness",
    local_rank=1,
    exit_code=-9,
    error=None,
    ended_at=1764800000.25,
    stuck="still in allreduce_correctness after 34.1 s (budget 30 s)",
    last_nccl_lines=("node1:77:77 [0] NCCL INFO Channel 00/0 : 3[0] -> 0[0] via NET/Socket/0",),
    message_sizes=MessageSizes("allreduce_correctness", 4096, 4096, 262148),
    stacks='Thread 0x1 (most recent call first):\n  File "rank.py", line 180 in _phases\n',
    flight_recorder="/tmp/check/node1/rank3/fr_trace_rank_3",
    log_path="/tmp/check/node1/rank3/worker.log",
)


def test_an_outcome_reads_back_from_its_json_as_it_was():
    assert RankOutcome.from_dict(json.loads(json.dumps(STUCK.to_dict()))) == STUCK


def test_a_real_node_reports_rank_keeps_its_keys_and_values():
    """check-gloo-1node.json is a real gloo check's node report (written before message sizes
    were recorded): every key it has comes back in its order, the missing one as null."""
    (row, *_) = json.loads(TEMPLATE.read_text())["ranks"]
    back = RankOutcome.from_dict(row).to_dict()
    assert [k for k in back if k in row] == list(row)
    assert {k: back[k] for k in row} == row
    assert back["message_sizes"] is None and back["state"] == "ok"


def test_a_state_from_a_newer_node_is_unknown_and_judged_as_a_stop():
    row = {**STUCK.to_dict(), "state": "preempted", "stuck": None, "error": "evicted"}
    unknown = RankOutcome.from_dict(row)
    assert unknown.state is OutcomeState.UNKNOWN and not unknown.ok
    (finding,) = rank_findings([unknown])
    assert finding.severity is Severity.FAIL and finding.rank == 3
    assert finding.title == "rank 3 on node node1 ended in allreduce_correctness: evicted"
    assert any("does not know" in line for line in finding.evidence)
    assert hang_section([unknown])["verdict"] == finding.title + "."


@pytest.mark.parametrize(
    "row",
    [
        None,
        [],
        "ok",
        {"rank": 0},
        {"state": "ok"},
        {"state": "ok", "rank": "0"},
        {"state": "ok", "rank": True},
    ],
)
def test_a_row_that_is_no_outcome_is_refused(row):
    with pytest.raises(ValueError):
        RankOutcome.from_dict(row)
    assert outcomes([STUCK.to_dict(), row]) is None


def test_fields_of_the_wrong_type_are_unknown_not_a_crash():
    garbled = {"rank": 2, "state": "failed", "node": 7, "exit_code": "1", "ended_at": "noon",
               "last_nccl_lines": "one line", "message_sizes": {"in_flight_bytes": -5},
               "error": ["x"], "phase_reached": None, "log_path": 3}  # fmt: skip
    r = RankOutcome.from_dict(garbled)
    assert (r.node, r.exit_code, r.ended_at, r.last_nccl_lines) == ("7", None, None, ())
    assert r.message_sizes == MessageSizes() and r.in_flight_bytes == 0
    assert (r.error, r.phase_reached, r.log_path) == (None, "startup", "")
    for endless in (float("inf"), float("nan")):
        assert RankOutcome.from_dict({**garbled, "ended_at": endless}).ended_at is None
    (finding,) = rank_findings([r])
    assert finding.title == "rank 2 on node 7 failed in its start (Python, torch import)"


def test_a_merge_judges_a_newer_state_and_keeps_the_row_as_the_node_wrote_it():
    run = synthetic_run(2, hang_rank=3)
    docs = run.documents()
    docs[1]["ranks"][1]["state"] = "preempted"
    merged = merge.merge_reports([(None, Report.from_dict(d)) for d in docs])
    assert [r["state"] for r in merged.extra["ranks"]] == [
        "failed",
        "failed",
        "failed",
        "preempted",
    ]
    cause = [
        f for f in merged.findings if f.id == "run.rank-failed" and f.severity is Severity.FAIL
    ]
    assert [f.rank for f in cause] == [0]  # no longer stuck: the earliest failure leads
    assert merged.extra["hang"]["stuck"] == []


def test_rows_another_producer_wrote_keep_the_nodes_verdicts():
    """``watch`` writes ranks without a state: a merge keeps the nodes' own hang sections."""
    run = synthetic_run(2, hang_rank=3)
    docs = run.documents()
    for doc in docs:
        for row in doc["ranks"]:
            del row["state"]
        doc["hang"] = {"phase": "barrier", "stuck": [], "verdict": "the node's own."}
    merged = merge.merge_reports([(None, Report.from_dict(d)) for d in docs])
    assert merged.extra["hang"]["verdict"] == "the node's own."
