"""`nccldoctor report`: re-render, merge, JUnit, JSON, exit codes, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccldoctor.cli.app import app
from tests.report.conftest import REPORTS
from tests.report.helpers import assert_valid_report
from tests.report.test_merge import per_node

runner = CliRunner()


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("healthy-check", 0),
        ("failed-check", 1),
        ("hang-check", 1),
        ("preflight", 1),
        ("explain", 0),
    ],
)
def test_rerender_writes_html_and_junit_and_exits_with_the_verdict(
    tmp_path: Path, name: str, code: int
) -> None:
    html, junit = tmp_path / "out" / "report.html", tmp_path / "junit.xml"
    result = runner.invoke(
        app, ["report", str(REPORTS / f"{name}.json"), "-o", str(html), "--junit", str(junit)]
    )
    assert result.exit_code == code, result.output
    assert html.read_text().startswith("<!doctype html>")
    ET.fromstring(junit.read_text())
    assert result.stdout.splitlines()[0].split(":")[0] in (
        "Healthy",
        "Problems found",
        "Hang",
        "Warnings",
    )


def test_json_of_one_report_is_the_same_document() -> None:
    result = runner.invoke(app, ["report", str(REPORTS / "explain.json"), "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout) == json.loads((REPORTS / "explain.json").read_text())


def test_merge_per_node_reports_when_the_master_is_lost(tmp_path: Path) -> None:
    full = json.loads((REPORTS / "failed-check.json").read_text())
    paths = []
    for node in ("node-a", "node-b"):
        path = tmp_path / f"{node}.json"
        path.write_text(json.dumps(per_node(full, node)))
        paths.append(str(path))
    result = runner.invoke(app, ["report", *paths, "--json", "-o", str(tmp_path / "cluster.html")])
    assert result.exit_code == 1
    doc = assert_valid_report(json.loads(result.stdout))
    assert (
        doc["findings"][-1]["title"]
        == "cluster report merged from the reports of 2 nodes (node-a, node-b)"
    )
    assert (
        "cluster report merged from the reports of 2 nodes"
        in (tmp_path / "cluster.html").read_text()
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "not a JSON report"),
        ("[]", "not a nccldoctor report"),
        ('{"kind": "x", "schema_version": 0}', "not a positive integer"),
    ],
)
def test_bad_input_is_a_usage_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    result = runner.invoke(app, ["report", str(path)])
    assert result.exit_code == 2
    assert message in result.output


def test_unwritable_output_is_a_usage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = runner.invoke(
        app, ["report", str(REPORTS / "preflight.json"), "-o", str(blocker / "x.html")]
    )
    assert result.exit_code == 2 and "cannot write" in result.output


def test_no_argument_is_a_usage_error() -> None:
    assert runner.invoke(app, ["report"]).exit_code == 2


def test_installed_style_run_through_python_dash_m(tmp_path: Path) -> None:
    html = tmp_path / "r.html"
    env = {"PYTHONPATH": str(Path(__file__).parents[2]), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "nccldoctor",
            "report",
            str(REPORTS / "hang-check.json"),
            "-o",
            str(html),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 1, out.stderr
    assert out.stdout.startswith("Hang: ")
    assert 'id="timeline-chart"' in html.read_text()


def test_wheel_ships_the_templates_and_renders_from_them(tmp_path: Path, built_wheel: Path) -> None:
    import zipfile

    wheel = built_wheel
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {
        "nccldoctor/templates/report.html.j2",
        "nccldoctor/templates/report.css",
        "nccldoctor/templates/report.js",
        "nccldoctor/report/schema.json",
    } <= names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    html = tmp_path / "r.html"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "nccldoctor",
            "report",
            str(REPORTS / "preflight.json"),
            "-o",
            str(html),
        ],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        timeout=60,
    )
    assert out.returncode == 1, out.stderr
    assert "NCCL_SOCKET_IFNAME=ib0 names no interface" in html.read_text()


def test_merge_subcommand_names_the_missing_node_and_claims_no_health(tmp_path: Path) -> None:
    full = json.loads((REPORTS / "healthy-check.json").read_text())
    path = tmp_path / "node-b.json"
    path.write_text(json.dumps(per_node(full, "node-b")))
    html = tmp_path / "cluster.html"
    result = runner.invoke(app, ["report", "merge", str(path), "--json", "-o", str(html)])
    assert result.exit_code == 3, result.output
    doc = assert_valid_report(json.loads(result.stdout))
    assert doc["verdict"] == "incomplete" and doc["cluster"]["missing_nodes"] == ["node-a"]
    assert doc["findings"][-1]["title"] == (
        "cluster report merged from the reports of 1 node (node-b); no report from node-a"
    )
    assert "no report from node-a" in html.read_text()
    shown = runner.invoke(app, ["report", "merge", str(path)])
    assert shown.exit_code == 3 and not shown.stdout.startswith("Healthy")


def test_show_is_the_default_and_merge_needs_a_report() -> None:
    explicit = runner.invoke(app, ["report", "show", str(REPORTS / "explain.json"), "--json"])
    default = runner.invoke(app, ["report", str(REPORTS / "explain.json"), "--json"])
    assert explicit.exit_code == default.exit_code == 0 and explicit.stdout == default.stdout
    assert runner.invoke(app, ["report", "merge"]).exit_code == 2
    assert "merge" in runner.invoke(app, ["report", "--help"]).stdout


def test_show_exits_with_the_code_the_findings_give_not_the_one_the_file_states(
    tmp_path: Path,
) -> None:
    """A stranger's report that says exit_code 0 over failing findings exits 1, and 3 when it
    says it did not complete."""
    document = json.loads((REPORTS / "failed-check.json").read_text())
    document |= {"exit_code": 0, "verdict": "healthy"}
    document["headline"] |= {"banner": "healthy", "title": "Healthy"}
    (tmp_path / "failed.json").write_text(json.dumps(document))
    result = runner.invoke(app, ["report", "show", str(tmp_path / "failed.json"), "--json"])
    assert result.exit_code == 1, result.output
    shown = json.loads(result.stdout)
    assert (shown["exit_code"], shown["verdict"], shown["headline"]["banner"]) == (
        1, "problems", "problems")  # fmt: skip
    result = runner.invoke(app, ["report", "show", str(tmp_path / "failed.json")])
    assert result.stdout.startswith("✗ Problems found"), result.stdout
    document = {**json.loads((REPORTS / "healthy-check.json").read_text()), "completed": False}
    (tmp_path / "cut.json").write_text(json.dumps(document))
    assert runner.invoke(app, ["report", str(tmp_path / "cut.json"), "--json"]).exit_code == 3
