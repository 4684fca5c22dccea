"""The terminal view in the manner of `flutter doctor`: the headline, one line per area, the fix
under each problem. Rendered from the redacted document, like the HTML page and JUnit."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.text import Text

from nccldoctor import guide
from nccldoctor.forensics.stacks import readable
from nccldoctor.limits import MAX_SHOWN_FINDINGS
from nccldoctor.model import AREA_TITLES, AREAS, AreaState, Severity
from nccldoctor.report.grouping import FindingGroup, group_findings
from nccldoctor.report.shape import items, section, values
from nccldoctor.views import isolation

_MARKS_UNICODE = {Severity.OK: "✓", Severity.INFO: "•", Severity.WARN: "!", Severity.FAIL: "✗"}
_MARKS_ASCII = {Severity.OK: "+", Severity.INFO: "-", Severity.WARN: "!", Severity.FAIL: "x"}
# an area with nothing to judge (no driver, no HCA, a phase the run never reached): not a pass
_NOTHING_JUDGED = {True: "–", False: "-"}
_STYLES = {
    Severity.OK: "green",
    Severity.INFO: "cyan",
    Severity.WARN: "yellow",
    Severity.FAIL: "red",
}
_PROBLEMS = (Severity.WARN, Severity.FAIL)
_BANNER_SEVERITY = {"healthy": Severity.OK, "warnings": Severity.WARN}  # the rest: a failure


def render_terminal(
    document: dict[str, Any], *, verbose: bool = False, unicode: bool = True
) -> Group:
    """The report document as rich renderables; info findings only with ``verbose``."""
    marks = _MARKS_UNICODE if unicode else _MARKS_ASCII
    findings = [(_severity(g.finding), g) for g in group_findings(document)]
    area_status = section(document, "area_status")
    area_state = section(document, "area_state")
    several_nodes = len(items(document.get("nodes"))) > 1
    lines: list[Text] = []
    top = section(document, "headline")
    if top.get("line"):  # the verdict, the root cause and its fix; the paragraph under it
        severity = _BANNER_SEVERITY.get(str(top.get("banner")), Severity.FAIL)
        lines.append(Text(f"{marks[severity]} {top['line']}", style=_STYLES[severity] + " bold"))
        lines += [Text(readable(str(top.get("answer") or "")), style="dim"), Text()]
    elif top.get("answer"):  # a document written before the line existed
        lines += [Text(f"{top.get('title', '')}: {top['answer']}"), Text()]
    consequences: dict[str, list[FindingGroup]] = {}
    for _, group in findings:
        if cause := group.finding.get("explained_by"):
            consequences.setdefault(str(cause), []).append(group)
    notes = [str(n) for n in values(document.get("load_notes"))]
    lines += [Text(f"Note: {note}", style="yellow") for note in notes] + ([Text()] if notes else [])
    area_levels: list[Severity] = []
    left = MAX_SHOWN_FINDINGS  # findings shown, worst of each area first; the rest counted
    for area in AREAS:
        found = [(s, g) for s, g in findings if g.finding.get("area") == area]
        if not found and area not in area_status:
            continue
        level = _worst([s for s, _ in found if s is not Severity.INFO])
        state = area_state.get(area)
        if level is Severity.OK and state == AreaState.STOPPED:
            level = Severity.FAIL  # the run stopped here: whatever said why is elsewhere
        area_levels.append(level)
        head = Text()
        if level is Severity.OK and state is not None:
            head.append(f"[{_NOTHING_JUDGED[unicode]}] ", style="dim")
        else:
            head.append(f"[{marks[level]}] ", style=_STYLES[level])
        head.append(AREA_TITLES[area], style="bold")
        if status := area_status.get(area):
            head.append(f" ({status})")
        lines.append(head)
        shown = [(s, f) for s, f in found if verbose or s in _PROBLEMS]
        for severity, finding in sorted(shown, key=lambda sf: -sf[0].rank)[: max(0, left)]:
            explains = consequences.get(str(finding.finding.get("id")), [])
            lines.extend(_finding_lines(severity, finding, marks, verbose, several_nodes, explains))
        left -= len(shown)
    if left < 0:
        lines.append(Text(f"{-left} more findings not shown: the JSON report holds them all."))
    lines.append(Text())
    pairs = isolation.pair_matrix(document, isolation.MAX_TERMINAL_NODES)
    shown_pairs = [isolation.terminal_table(pairs), Text()] if pairs else []
    return Group(*lines, *shown_pairs, _summary(document, area_levels, marks))


def _severity(finding: dict[str, Any]) -> Severity:
    try:
        return Severity(finding.get("severity"))
    except ValueError:
        return Severity.FAIL  # a severity this nccldoctor does not know is shown, never hidden


def _worst(severities: list[Severity]) -> Severity:
    return max(severities, key=lambda s: s.rank, default=Severity.OK)


def _finding_lines(
    severity: Severity,
    group: FindingGroup,
    marks: dict[Severity, str],
    verbose: bool,
    several_nodes: bool,
    explains: list[FindingGroup],
) -> list[Text]:
    finding = group.finding
    out = [
        Text(
            f"    {marks[severity]} {readable(str(finding.get('title', '')))}"
            f"{_where(group, verbose or several_nodes)}",
            style=_STYLES[severity],
        )
    ]
    if cause := finding.get("explained_by"):  # its cause says why and what to do
        out.append(Text(f"        follows from {cause}: its fix covers this", style="dim"))
        return out
    shown = None if verbose else 3
    out.extend(Text(f"        {line}", style="dim") for line in _readable(group.evidence)[:shown])
    for node, own in group.per_node:
        out.append(Text(f"        on {node}:", style="dim"))
        out.extend(Text(f"          {line}", style="dim") for line in _readable(own)[:shown])
    if explains:
        out.append(Text("      Explains:", style="bold"))
        out.extend(
            Text(
                f"        {readable(str(g.finding.get('title', '')))}{_where(g, True)}", style="dim"
            )
            for g in explains
        )
    if fix := group.fix:
        out.append(Text("      Fix:", style="bold"))
        out.extend(Text(f"        {line}") for line in str(fix).splitlines())
    if guide.page_path(str(finding.get("id", ""))):
        out.append(Text(f"      More: nccldoctor docs {finding['id']}", style="dim"))
    if verbose:
        out.append(Text(f"      ({finding.get('id')}, {finding.get('category')})", style="dim"))
    return out


def _where(group: FindingGroup, name_one: bool) -> str:
    return f" [{', '.join(group.nodes)}]" if group.several or (group.nodes and name_one) else ""


def _readable(evidence: list[str]) -> list[str]:
    """torch's C++ frames stay in the document (and the HTML); a terminal gets its messages."""
    return [line for text in evidence if (line := readable(text))]


def _summary(document: dict[str, Any], area_levels: list[Severity], marks: dict) -> Text:
    """The closing line: what the exit code says (3 incomplete, 1 problems, 0 otherwise)."""
    if not document.get("completed", True):
        return Text(f"{marks[Severity.FAIL]} The run could not complete.", style="red bold")
    failed, warned = area_levels.count(Severity.FAIL), area_levels.count(Severity.WARN)
    if failed:
        also = f", warnings in {warned} more" if warned else ""
        return Text(
            f"{marks[Severity.FAIL]} nccldoctor found problems in {_areas(failed)}{also}.",
            style="red bold",
        )
    if warned:
        return Text(
            f"{marks[Severity.WARN]} Warnings in {_areas(warned)}; nothing that stops a run.",
            style="yellow bold",
        )
    return Text(f"{marks[Severity.OK]} No issues found!", style="green bold")


def _areas(n: int) -> str:
    return f"{n} area{'s' if n != 1 else ''}"
