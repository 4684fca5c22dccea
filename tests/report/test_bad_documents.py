"""Documents this nccldoctor did not write are rendered with what can be read and a note of what
could not: an older schema, unknown keys, a bandwidth row missing a field, a newer nccldoctor."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from nccldoctor.cli.app import app
from nccldoctor.report.load import read_document, upgrade
from nccldoctor.views.html import render_document_html
from tests.report.conftest import REPORTS

runner = CliRunner()


def _render(tmp_path: Path, document: dict[str, Any]) -> tuple[Any, str, ET.Element]:
    """`nccldoctor report` on ``document``: its result, the page and the JUnit XML."""
    path = tmp_path / "in.doc"  # not .json: tests/conftest.py validates those
    path.write_text(json.dumps(document))
    page, junit = tmp_path / "out.html", tmp_path / "junit.xml"
    result = runner.invoke(app, ["report", str(path), "-o", str(page), "--junit", str(junit)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result, page.read_text(), ET.fromstring(junit.read_text())


def _healthy() -> dict[str, Any]:
    return json.loads((REPORTS / "healthy-check.json").read_text())


def test_a_version_1_document_the_check_wrote_reads_with_units_in_the_names() -> None:
    """check-gloo-1node.json is what `check` wrote before version 3 (busbw_gbps, tcp_wire_gbps)."""
    document = read_document(REPORTS / "check-gloo-1node.json")
    rows = document["bandwidth"]["rows"]
    assert rows and all("busbw_GBps" in r and "busbw_gbps" not in r for r in rows)
    assert "load_notes" not in document  # nothing lost in the conversion
    # a one-node gloo run over lo: no NIC speed, no probe, so the link's rate is unknown
    assert document["headline"]["answer"].endswith(
        "Allreduce busbw 181 MB/s at 16 MiB; what the links carry is unknown "
        "(no NIC speed, port rate or TCP probe)."
    )


def test_unknown_keys_are_named_and_the_rest_is_shown(tmp_path: Path) -> None:
    document = {**_healthy(), "quantum_links": [1, 2], "zz_extra": {"a": 1}}
    result, page, _ = _render(tmp_path, document)
    assert result.exit_code == 0
    note = "keys this nccldoctor does not know, not shown: quantum_links, zz_extra"
    assert f"Note: {note}" in result.output and note in page
    assert "Healthy" in page and 'id="bandwidth-chart"' in page


def test_a_bandwidth_row_missing_a_field_is_unknown_not_a_traceback(tmp_path: Path) -> None:
    document = _healthy()
    del document["bandwidth"]["rows"][2]["busbw_GBps"]
    document["bandwidth"]["rows"][3] = {"count": 7}  # not even a size
    result, page, _ = _render(tmp_path, document)
    assert result.exit_code == 0, result.output
    assert "bandwidth row 3 (1 KiB) has no busbw_GBps: shown as unknown" in result.output
    assert "bandwidth row 4 has no size_bytes, algbw_GBps, busbw_GBps" in page
    assert '<td class="num">unknown</td>' in page
    # the chart draws what it can: 7 rows, one without busbw, one without anything
    assert page.count('class="busbw point"') == 5 and page.count('class="algbw point"') == 6


def test_a_newer_document_is_shown_with_a_note(tmp_path: Path) -> None:
    document = {**_healthy(), "schema_version": 7, "tool_version": "9.0", "hologram": True}
    result, page, junit = _render(tmp_path, document)
    assert result.exit_code == 0, result.output
    assert "written by nccldoctor 9.0 with report schema 7; this one reads up to 3" in page
    assert "upgrade nccldoctor" in result.output and "hologram" in result.output
    assert junit.find("testsuite") is not None


@pytest.mark.parametrize(
    "mangle",
    [
        lambda d: d["bandwidth"].update(rows="not a list"),
        lambda d: d["bandwidth"].update(tcp_wire_Gbitps=["x"]),
        lambda d: d.update(bandwidth=None, phases={"a": 1}, load_notes="x"),
        lambda d: d["bandwidth"]["rows"].append({"size_bytes": "1 MiB", "busbw_GBps": "fast"}),
    ],
)
def test_sections_of_the_wrong_shape_render(mangle: Any) -> None:
    document = _healthy()
    mangle(document)
    assert "Healthy" in render_document_html(upgrade(document))
