from __future__ import annotations

import json

from nccldoctor.report import Report, load_report, write_report


def test_explain_document_with_a_node_count_loads(tmp_path):
    """explain's top-level ``nodes`` is a host count; it survives a round trip as data."""
    report = Report(kind="explain", extra={"nodes": 2, "nccl_version": "2.21.5"})
    path = write_report(report, tmp_path / "r.json")
    again = load_report(path)
    assert again.nodes == []
    assert again.to_dict()["nodes"] == 2
    assert json.loads(path.read_text())["nccl_version"] == "2.21.5"
