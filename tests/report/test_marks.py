"""The terminal's marks and closing line say what the exit code says: ✓ only for an area that
passed, – for one with nothing to judge, ✗ for a run that stopped; the closing line names
problems exactly when the exit code is 1, and an incomplete run exactly when it is 3."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from nccldoctor.model import AreaState, Finding, Severity
from nccldoctor.report import Report
from nccldoctor.views.terminal import render_terminal
from tests.report.helpers import assert_valid_report


def _shown(report: Report) -> list[str]:
    console = Console(file=io.StringIO(), width=200, no_color=True)
    console.print(render_terminal(report.to_dict()))
    return console.file.getvalue().splitlines()


def _finding(severity: Severity, area: str = "network") -> Finding:
    return Finding(
        id="network.example",
        category="interface_selection",
        severity=severity,
        area=area,
        title="an example problem",
        evidence=["seen"],
        fix="do this",
    )


def _line(lines: list[str], title: str) -> str:
    return next(line for line in lines if title in line)


def test_an_area_with_nothing_to_judge_is_not_a_pass():
    report = Report(
        kind="preflight",
        area_status={"gpu": "no NVIDIA driver", "rdma": "no HCA", "network": "eth0 → master"},
        area_state={"gpu": AreaState.NOT_APPLICABLE, "rdma": AreaState.NOT_APPLICABLE},
    )
    lines = _shown(report)
    assert _line(lines, "GPU and driver").startswith("[–] ")
    assert _line(lines, "InfiniBand").startswith("[–] ")
    assert _line(lines, "Network").startswith("[✓] ")
    assert lines[-1] == "✓ No issues found!" and report.exit_code == 0


def test_a_problem_outranks_nothing_to_judge():
    report = Report(
        kind="preflight",
        findings=[_finding(Severity.FAIL, area="gpu")],
        area_status={"gpu": "no NVIDIA driver"},
        area_state={"gpu": AreaState.NOT_APPLICABLE},
    )
    assert _line(_shown(report), "GPU and driver").startswith("[✗] ")


def test_a_run_that_stopped_is_marked_failed_and_says_it_could_not_complete():
    report = Report(
        kind="check",
        completed=False,
        area_status={"run": "stopped: rendezvous: only 1 of 2 nodes joined"},
        area_state={"run": AreaState.STOPPED},
    )
    lines = _shown(report)
    assert _line(lines, "Cluster run").startswith("[✗] ")
    assert lines[-1] == "✗ The run could not complete." and report.exit_code == 3


@pytest.mark.parametrize(
    ("severities", "closing", "code"),
    [
        ([Severity.WARN], "! Warnings in 1 area; nothing that stops a run.", 0),
        ([Severity.FAIL], "✗ nccldoctor found problems in 1 area.", 1),
        (
            [Severity.FAIL, Severity.WARN],
            "✗ nccldoctor found problems in 1 area, warnings in 1 more.",
            1,
        ),
        ([Severity.INFO], "✓ No issues found!", 0),
    ],
)
def test_the_closing_line_says_what_the_exit_code_says(severities, closing, code):
    areas = ["network", "container"]
    findings = [_finding(s, area) for s, area in zip(severities, areas, strict=False)]
    report = Report(kind="preflight", findings=findings)
    assert _shown(report)[-1] == closing
    assert report.exit_code == code


def test_the_state_travels_through_the_document_and_back():
    report = Report(kind="preflight", area_state={"rdma": AreaState.NOT_APPLICABLE})
    assert_valid_report(report)
    assert Report.from_dict(report.to_dict()).area_state == {"rdma": "not-applicable"}
    assert "area_state" not in Report(kind="preflight").to_dict()  # older readers see nothing new
