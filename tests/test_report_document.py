from __future__ import annotations

import json

from nccldoctor.report import Report, load_report, write_report
from nccldoctor.report.document import document_exit_code


def test_explain_document_with_a_node_count_loads(tmp_path):
    """explain's top-level ``nodes`` is a host count; it survives a round trip as data."""
    report = Report(kind="explain", extra={"nodes": 2, "nccl_version": "2.21.5"})
    path = write_report(report, tmp_path / "r.json")
    again = load_report(path)
    assert again.nodes == []
    assert again.to_dict()["nodes"] == 2
    assert json.loads(path.read_text())["nccl_version"] == "2.21.5"


def test_a_documents_findings_and_completed_give_its_exit_code_never_its_field() -> None:
    failing = [{"id": "x", "severity": "fail"}]
    assert document_exit_code({"exit_code": 0, "findings": failing}) == 1
    assert document_exit_code({"exit_code": 0, "completed": False}) == 3
    assert document_exit_code({"findings": failing}) == 1
    assert document_exit_code({"exit_code": "1", "findings": [{"severity": "warn"}]}) == 0
    assert document_exit_code({"exit_code": True, "completed": False}) == 3
    assert document_exit_code({"findings": "not a list"}) == 0


def test_a_node_that_exits_with_the_clusters_verdict_says_that_code_and_what_decided_it(
    tmp_path,
) -> None:
    """A node whose own report found nothing exits 1 with the cluster's verdict: its JSON says
    exit_code 1, decided by the cluster, while its verdict stays its own findings'."""
    report = Report(kind="check")
    assert report.to_dict()["exit_decided_by"] == "findings"
    report.cluster_exit_code = 1
    document = report.to_dict()
    assert (document["verdict"], document["exit_code"]) == ("healthy", 1)
    assert document["exit_decided_by"] == "cluster"
    assert report.own_exit_code == 0
    again = load_report(write_report(report, tmp_path / "check-node3.json"))
    assert (again.exit_code, again.exit_decided_by, again.own_exit_code) == (1, "cluster", 0)
    assert document_exit_code(document) == 1  # `report show` exits as the node did
    # a stranger's file: the cluster's verdict may add a failure, never hide one
    failing = [{"id": "x", "severity": "fail"}]
    hides = {"exit_code": 0, "exit_decided_by": "cluster", "findings": failing}
    assert document_exit_code(hides) == 1
    assert document_exit_code({"exit_code": 3, "exit_decided_by": "cluster"}) == 3
    assert document_exit_code({"exit_code": 1, "exit_decided_by": "findings"}) == 0
    assert document_exit_code({"exit_code": 9, "exit_decided_by": "cluster"}) == 0
