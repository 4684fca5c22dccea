"""Merging per-node reports: union, dedup, verdict recomputed, who is missing."""

from __future__ import annotations

import copy
import gc
import time

from checks import all_checks, run_cluster_checks
from nccldoctor.cluster.diagnosis.merge import merge_reports
from nccldoctor.cluster.records import PhaseRow, PhaseStatus
from nccldoctor.facts import NodeFacts
from nccldoctor.model import Finding, Severity
from nccldoctor.report import Report
from nccldoctor.report.load import report_from_document
from tests.report.conftest import fixture_document
from tests.report.helpers import assert_valid_report


def per_node(document: dict, node: str) -> dict:
    """The report one node writes: its facts, its phases and ranks, the run's shared findings."""
    doc = copy.deepcopy(document)
    doc["nodes"] = [n for n in doc["nodes"] if n["node"] == node]
    doc["phases"] = [p for p in doc["phases"] if p["node"] == node]
    doc["ranks"] = [r for r in doc["ranks"] if r["node"] == node]
    return doc


def test_merge_two_nodes_of_the_failed_run() -> None:
    full = fixture_document("failed-check")
    parts = [
        (f"/r/{n}.json", report_from_document(per_node(full, n))) for n in ("node-b", "node-a")
    ]
    merged = merge_reports(parts)
    doc = assert_valid_report(merged)
    assert [n["node"] for n in doc["nodes"]] == ["node-b", "node-a"]
    # The nodes' findings deduplicated; the cross-node ones judged anew over both nodes' Facts (the
    # fixture's were written by an older rule: their titles differ); then the note.
    cross_node = {c.id for c in all_checks("cluster")}
    kept = [f["title"] for f in full["findings"] if f["id"] not in cross_node]
    judged = [f.title for f in run_cluster_checks(merged.nodes)]
    assert judged and [f["title"] for f in doc["findings"]][:-1] == kept + judged
    note = doc["findings"][-1]
    assert note["id"] == "report.merged" and note["severity"] == "info"
    assert note["title"] == "cluster report merged from the reports of 2 nodes (node-b, node-a)"
    assert sorted(map(str, doc["phases"])) == sorted(map(str, full["phases"]))
    assert [r["rank"] for r in doc["ranks"]] == [0, 1, 2, 3]
    assert doc["verdict"] == "problems" and doc["exit_code"] == 1
    paths = {n["name"]: n["report_path"] for n in doc["cluster"]["nodes"]}
    assert paths == {
        "node-a": "/tmp/nccldoctor/node-a/report.json",
        "node-b": "/tmp/nccldoctor/node-b/report.json",
    }


def test_missing_node_is_named_and_the_merge_is_incomplete() -> None:
    full = fixture_document("healthy-check")
    merged = merge_reports([("/r/a.json", report_from_document(per_node(full, "node-a")))])
    doc = assert_valid_report(merged)
    assert doc["cluster"]["missing_nodes"] == ["node-b"]
    note = doc["findings"][-1]
    assert note["severity"] == "warn" and note["title"].endswith("; no report from node-b")
    assert note["evidence"] == ["node-a: /r/a.json", "node-b: missing"]
    assert doc["verdict"] == "incomplete" and doc["exit_code"] == 3  # node-b: nobody vouches


def test_hang_stuck_ranks_are_united_and_incomplete_stays_incomplete() -> None:
    full = fixture_document("hang-check")
    a, b = per_node(full, "node-a"), per_node(full, "node-b")
    a["hang"]["stuck"] = a["hang"]["stuck"][1:]
    b["hang"]["stuck"] = b["hang"]["stuck"][:1]
    b["completed"] = False
    merged = merge_reports([("a", report_from_document(a)), ("b", report_from_document(b))])
    assert [s["rank"] for s in merged.extra["hang"]["stuck"]] == [0, 1]
    assert merged.exit_code == 3 and not merged.completed


def test_remerging_replaces_the_old_note() -> None:
    full = fixture_document("healthy-check")
    once = merge_reports([("a", report_from_document(per_node(full, "node-a")))])
    twice = merge_reports([("m", once), ("b", report_from_document(per_node(full, "node-b")))])
    notes = [f for f in twice.findings if f.id == "report.merged"]
    assert len(notes) == 1 and notes[0].severity is Severity.INFO


def _node_report(i: int) -> Report:
    node = f"n{i}"
    return Report(
        kind="check",
        nodes=[NodeFacts(node=node)],
        findings=[
            Finding(id="x.y", category="other", severity=Severity.WARN, title="t", node=node)
        ],
        extra={
            "phases": [
                PhaseRow(node, i, p, PhaseStatus.OK, 1.0).to_dict() for p in ("init", "ddp")
            ],
            "ranks": [{"rank": i, "node": node}],
            "cluster": {"nodes": [{"name": node}, {"name": f"n{i + 1}"}], "missing_nodes": []},
        },
    )


def test_merge_is_linear_in_nodes() -> None:
    def seconds(count: int) -> float:
        parts = [(f"/r/n{i}.json", _node_report(i)) for i in range(count)]
        gc.disable()
        try:
            start = time.perf_counter()
            merged = merge_reports(parts)
            elapsed = time.perf_counter() - start
        finally:
            gc.enable()
        assert merged.extra["cluster"]["missing_nodes"] == [f"n{count}"]
        return elapsed

    small, large = min(seconds(500) for _ in range(5)), min(seconds(4000) for _ in range(5))
    assert large < small * 8 * 3  # 8x the nodes: about 8x the time (quadratic would be 64x)
