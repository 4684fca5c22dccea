"""The JUnit XML view for CI pre-flight: one test case per finding and per phase of each rank.

A ``fail`` finding and a phase that failed, timed out or never finished are failures; a ``warn``
finding is skipped with its message (CI shows it without failing the build); info and ok pass,
their text in system-out. An incomplete run adds a failing ``run.completed`` case. Built from the
redacted document with ElementTree, so text is escaped and characters XML cannot hold dropped.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from nccldoctor.report import Report
from nccldoctor.report.grouping import FindingGroup, group_findings
from nccldoctor.report.shape import items

# Characters XML 1.0 cannot carry (C0 controls but tab/newline/return, lone surrogates, FFFE/FFFF).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_PHASE_FAILURES = {"fail": "failed", "timeout": "timed out", "running": "never finished"}


def render_junit(report: Report) -> str:
    """The report as a JUnit XML document (one ``testsuite`` per kind of case)."""
    return render_document_junit(report.to_dict())


def render_document_junit(document: dict[str, Any]) -> str:
    kind = _text(document.get("kind") or "report")
    suites = ET.Element("testsuites", name=f"nccldoctor {kind}")
    findings = ET.SubElement(suites, "testsuite", name=f"nccldoctor.{kind}.findings")
    for group in group_findings(document):
        findings.append(_finding_case(group))
    if not document.get("completed", True):
        case = _case("run", "run.completed")
        _child(case, "failure", "the run could not complete", message="the run could not complete")
        findings.append(case)
    phases = items(document.get("phases"))
    if phases:
        suite = ET.SubElement(suites, "testsuite", name=f"nccldoctor.{kind}.phases")
        for phase in phases:
            suite.append(_phase_case(phase))
    for suite in suites:
        _count(suite)
    _count(suites)
    ET.indent(suites)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
    )


def _finding_case(group: FindingGroup) -> ET.Element:
    """One test case per finding; one that fired alike on several nodes names them all."""
    finding = group.finding
    nodes = f"node{'s' if group.several else ''} {', '.join(group.nodes)}" if group.nodes else ""
    where = [nodes, _rank(finding.get("rank"))]
    suffix = f" [{', '.join(w for w in where if w)}]" if any(where) else ""
    case = _case(_text(finding.get("area") or "nccl"), f"{_text(finding.get('id', ''))}{suffix}")
    title = _text(finding.get("title", ""))
    per_node = [line for node, own in group.per_node for line in (f"on {node}:", *map(_text, own))]
    body = "\n".join(
        [title, *map(_text, group.evidence), *per_node]
        + ([f"Fix:\n{_text(group.fix)}"] if group.fix else [])
    )
    severity = finding.get("severity")
    if severity == "fail":
        _child(case, "failure", body, message=title, type=_text(finding.get("category", "")))
    elif severity == "warn":
        _child(case, "skipped", None, message=f"warning: {title}")
        _child(case, "system-out", body)
    else:
        _child(case, "system-out", body)
    return case


def _phase_case(phase: dict[str, Any]) -> ET.Element:
    who = _rank(phase.get("rank")) or "agent"
    name = f"{_text(phase.get('phase', ''))} [{who}, node {_text(phase.get('node', ''))}]"
    case = _case("phase", name)
    duration = phase.get("duration_s")
    if isinstance(duration, (int, float)) and not isinstance(duration, bool):
        case.set("time", f"{duration:.3f}")
    status = _text(phase.get("status", ""))
    detail = _text(phase.get("detail") or "")
    if status in _PHASE_FAILURES:
        message = f"{phase.get('phase')} {_PHASE_FAILURES[status]}" + (
            f": {detail}" if detail else ""
        )
        _child(case, "failure", detail or message, message=message, type=status)
    elif status == "skipped":
        _child(case, "skipped", None, message=detail or "skipped")
    elif detail:
        _child(case, "system-out", detail)
    return case


def _case(classname: str, name: str) -> ET.Element:
    # the name is built from the document's node and rank values: sanitised whole
    return ET.Element("testcase", classname=_text(f"nccldoctor.{classname}"), name=_text(name))


def _child(parent: ET.Element, tag: str, text: str | None, **attributes: str) -> None:
    child = ET.SubElement(parent, tag, {k: _text(v) for k, v in attributes.items()})
    child.text = _text(text) if text is not None else None


def _count(suite: ET.Element) -> None:
    cases = list(suite.iter("testcase"))
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(c.find("failure") is not None for c in cases)))
    suite.set("errors", "0")
    suite.set("skipped", str(sum(c.find("skipped") is not None for c in cases)))


def _rank(rank: Any) -> str:
    return f"rank {rank}" if rank is not None else ""


def _text(value: Any) -> str:
    return _NOT_XML.sub("\ufffd", str(value))
