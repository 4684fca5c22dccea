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
