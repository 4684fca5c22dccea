"""The terminal view in the manner of `flutter doctor`: one line per area, the fix under each problem."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from nccldoctor.model import Finding, Severity, worst
from nccldoctor.report import Report

_MARKS_UNICODE = {Severity.OK: "✓", Severity.INFO: "•", Severity.WARN: "!", Severity.FAIL: "✗"}
_MARKS_ASCII = {Severity.OK: "+", Severity.INFO: "-", Severity.WARN: "!", Severity.FAIL: "x"}
_STYLES = {
    Severity.OK: "green",
    Severity.INFO: "cyan",
    Severity.WARN: "yellow",
    Severity.FAIL: "red",
}


def render_terminal(report: Report, *, verbose: bool = False, unicode: bool = True) -> Group:
    """The whole report as rich renderables; info findings only with ``verbose``."""
    marks = _MARKS_UNICODE if unicode else _MARKS_ASCII
    lines: list[Text] = []
    problem_areas = 0
    for area, title, findings in report.areas():
        shown = [f for f in findings if verbose or f.severity in (Severity.WARN, Severity.FAIL)]
        level = worst([f for f in findings if f.severity is not Severity.INFO])
        problem_areas += level in (Severity.WARN, Severity.FAIL)
        head = Text()
        head.append(f"[{marks[level]}] ", style=_STYLES[level])
        head.append(title, style="bold")
        if status := report.area_status.get(area):
            head.append(f" ({status})")
        lines.append(head)
        for finding in sorted(shown, key=lambda f: -f.severity.rank):
            lines.extend(_finding_lines(finding, marks, verbose, len(report.nodes) > 1))
    lines.append(Text())
    lines.append(_summary(report, problem_areas, marks))
    return Group(*lines)


def _finding_lines(
    finding: Finding, marks: dict[Severity, str], verbose: bool, several_nodes: bool
) -> list[Text]:
    where = f" [{finding.node}]" if finding.node and (verbose or several_nodes) else ""
    out = [
        Text(
            f"    {marks[finding.severity]} {finding.title}{where}", style=_STYLES[finding.severity]
        )
    ]
    evidence = finding.evidence if verbose else finding.evidence[:3]
    out.extend(Text(f"        {line}", style="dim") for line in evidence)
    if finding.fix:
        out.append(Text("      Fix:", style="bold"))
        out.extend(Text(f"        {line}") for line in finding.fix.splitlines())
    if verbose:
        out.append(Text(f"      ({finding.id}, {finding.category})", style="dim"))
    return out


def _summary(report: Report, problem_areas: int, marks: dict[Severity, str]) -> Text:
    if not report.completed:
        return Text(f"{marks[Severity.FAIL]} The run could not complete.", style="red bold")
    if problem_areas == 0:
        return Text(f"{marks[Severity.INFO]} No issues found!", style="green bold")
    plural = "s" if problem_areas != 1 else ""
    return Text(
        f"{marks[Severity.WARN]} nccldoctor found issues in {problem_areas} area{plural}.",
        style=_STYLES[worst(report.findings)] + " bold",
    )
