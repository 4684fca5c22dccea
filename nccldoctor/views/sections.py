"""The report document arranged for the HTML page: tables and groups, nothing measured and
nothing judged (the headline and the consistency table come written in the document); NCCL's
communicators, their transport matrix, rings and trees are ``topology.py``'s.

Every function takes the JSON document (already redacted by ``Report.to_dict``) and tolerates
sections that are missing, null or shaped differently: a view never crashes on a report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nccldoctor import guide
from nccldoctor.forensics.stacks import without_source_paths
from nccldoctor.limits import MAX_SHOWN_FINDINGS
from nccldoctor.model import AREA_TITLES
from nccldoctor.report.grouping import FindingGroup, group_findings
from nccldoctor.report.logs import line_kinds
from nccldoctor.report.shape import items, section, values
from nccldoctor.units import (
    UNKNOWN,
    format_bytes,
    format_GBps,
    format_link_rate,
    format_seconds,
    known,
)

SEVERITY_ORDER = ("fail", "warn", "info", "ok")
_PROBLEMS = ("fail", "warn")
SEVERITY_TITLES = {"fail": "Problems", "warn": "Warnings", "info": "Information", "ok": "Passed"}


@dataclass
class ConsistencyRow:
    node: str
    node_rank: Any
    address: str
    ranks: str
    missing: bool
    cells: dict[str, str]
    flags: dict[str, str]  # column (or "address") -> the title of the finding that judged it


def consistency(document: dict[str, Any]) -> tuple[list[tuple[str, str]], list[ConsistencyRow]]:
    """The document's consistency table as (columns as (key, heading), rows)."""
    table = section(document, "consistency")
    columns = [
        (str(c[0]), str(c[1]))
        for c in values(table.get("columns"))
        if isinstance(c, list) and len(c) == 2
    ]
    rows = [
        ConsistencyRow(
            node=str(row.get("node", "")),
            node_rank=row.get("node_rank"),
            address=str(row.get("address") or ""),
            ranks=str(row.get("ranks") or ""),
            missing=row.get("missing") is True,
            cells={str(k): str(v) for k, v in section(row, "cells").items()},
            flags={str(k): str(v) for k, v in section(row, "flags").items()},
        )
        for row in items(table.get("rows"))
    ]
    return columns, rows


def finding_groups(document: dict[str, Any]) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(severity, heading, findings) for each severity present, worst first, up to
    MAX_SHOWN_FINDINGS in all (``findings_hidden`` counts the rest); a finding that fired
    alike on several nodes is one entry naming them (report/grouping.py)."""
    groups, left = [], MAX_SHOWN_FINDINGS
    found_by = {s: [g for g in group_findings(document) if g.finding.get("severity") == s]
                for s in SEVERITY_ORDER}  # fmt: skip
    for severity in SEVERITY_ORDER:
        found = [_finding(g) for g in found_by[severity][:left]]
        left -= len(found)
        if found:
            groups.append((severity, SEVERITY_TITLES[severity], found))
    return groups


def findings_hidden(document: dict[str, Any]) -> int:
    """The findings past MAX_SHOWN_FINDINGS that a view leaves out."""
    shown = [g for g in group_findings(document) if g.finding.get("severity") in SEVERITY_ORDER]
    return max(0, len(shown) - MAX_SHOWN_FINDINGS)


def _finding(group: FindingGroup) -> dict[str, Any]:
    """A finding with every key the page shows; links as (url, clickable: http(s) only)."""
    finding = group.finding
    links = finding.get("links") if isinstance(finding.get("links"), list) else []
    problem = finding.get("severity") in _PROBLEMS
    return {
        "id": str(finding.get("id", "")),
        # a problem carries its page of the field guide, so the page stays self-contained
        "guide": (guide.finding_page(str(finding.get("id", ""))) or "") if problem else "",
        "category": str(finding.get("category", "")),
        "area": str(finding.get("area", "")),
        "severity": finding.get("severity"),
        "title": without_source_paths(str(finding.get("title", ""))),  # evidence keeps them
        "evidence": group.evidence,
        "per_node": group.per_node,
        "fix": group.fix,
        "links": [(str(u), str(u).startswith(("https://", "http://"))) for u in links],
        "node": ", ".join(group.nodes) if group.nodes else finding.get("node"),
        "several": group.several,
        "rank": finding.get("rank"),
        "explained_by": str(finding.get("explained_by") or ""),
    }


@dataclass(frozen=True)
class BandwidthRow:
    size: str
    count: str
    dtype: str
    time: str
    algbw: str
    busbw: str
    wrong: str
    flagged: bool  # the row counted wrong results


def bandwidth_rows(bandwidth: dict[str, Any]) -> list[BandwidthRow]:
    """The sweep's rows as the table prints them, each number with its unit ("unknown" where a
    row lacks the field)."""
    rows = []
    for row in items(bandwidth.get("rows")):
        time_us = row.get("time_us")
        wrong = row.get("wrong")
        rows.append(
            BandwidthRow(
                size=format_bytes(row.get("size_bytes")),
                count=str(row["count"]) if known(row.get("count")) else "",
                dtype=str(row.get("dtype") or ""),
                time=format_seconds(time_us / 1e6) if known(time_us) else UNKNOWN,
                algbw=format_GBps(row.get("algbw_GBps")),
                busbw=format_GBps(row.get("busbw_GBps")),
                wrong=str(wrong) if known(wrong) else "",
                flagged=known(wrong) and wrong > 0,
            )
        )
    return rows


@dataclass(frozen=True)
class LinkTable:
    sentence: str
    expected: str
    rows: list[tuple[str, str, str, str]]  # node, link, rate with its unit or "unknown", source


def link_table(document: dict[str, Any]) -> LinkTable | None:
    """The document's ``links`` as the bandwidth section prints them."""
    links = section(document, "links")
    if not links:
        return None
    rows = [
        (str(n.get("node", "")), str(k.get("name", "")), format_link_rate(k.get("Gbitps")),
         str(k.get("source", "")))
        for n in items(links.get("nodes"))
        for k in items(n.get("links"))
    ]  # fmt: skip
    sentence = str(links.get("sentence") or "")
    return LinkTable(sentence[:1].upper() + sentence[1:], str(links.get("expected") or ""), rows)


def area_lines(document: dict[str, Any]) -> list[tuple[str, str]]:
    status = section(document, "area_status")
    return [(AREA_TITLES.get(area, area), str(line)) for area, line in status.items()]


@dataclass
class RankLog:
    rank: Any
    node: str
    summary: str
    warnings: list[str]
    lines: list[tuple[str, str]]  # (kind, line); kind "warn" | "key" | ""
    stacks: str
    flight_recorder: list[str]
    log_path: str
    open: bool  # shown expanded: it warned or is stuck


def rank_logs(document: dict[str, Any]) -> list[RankLog]:
    stuck = [s.get("rank") for s in items(section(document, "hang").get("stuck"))]
    logs = []
    for entry in sorted(items(document.get("ranks")), key=lambda e: str(e.get("rank")).zfill(6)):
        raw = [str(line) for line in values(entry.get("last_nccl_lines"))]
        lines = list(zip(line_kinds(raw), raw, strict=True))
        warnings = [line for kind, line in lines if kind == "warn"]
        summary = ", ".join(
            part
            for part in (
                str(entry["state"]) if entry.get("state") else "",
                f"reached {entry['phase_reached']}" if entry.get("phase_reached") else "",
                f"at {entry['where']}" if entry.get("where") else "",
                str(entry["error"]).splitlines()[0][:200] if entry.get("error") else "",
                f"exit code {entry['exit_code']}" if entry.get("exit_code") is not None else "",
                f"{len(raw)} lines kept",
                f"{len(warnings)} warning{'s' if len(warnings) != 1 else ''}" if warnings else "",
                "stuck" if entry.get("rank") in stuck else "",
            )
            if part
        )
        logs.append(
            RankLog(
                rank=entry.get("rank"),
                node=str(entry.get("node", "")),
                summary=summary,
                warnings=warnings,
                lines=lines,
                stacks=str(entry.get("stacks") or ""),
                flight_recorder=flight_recorder_lines(entry.get("flight_recorder")),
                log_path=str(entry.get("log_path") or ""),
                open=bool(warnings) or entry.get("rank") in stuck,
            )
        )
    return logs


def flight_recorder_lines(value: Any, last: int = 10) -> list[str]:
    """PyTorch's Flight Recorder as lines: the dump's path, or its last entries (collective
    sequence number, name, state)."""
    if isinstance(value, str) and value:
        return [f"dump: {value}"]
    entries = items(value.get("entries") if isinstance(value, dict) else value)
    lines = [
        f"#{e.get('collective_seq_id', '?')} {e.get('profiling_name', '?')} {e.get('state', '?')}"
        for e in entries[-last:]
    ]
    if len(entries) > last:
        lines.insert(0, f"... {len(entries) - last} earlier entries")
    return lines


def environments(document: dict[str, Any]) -> list[tuple[str, list[tuple[str, str]]]]:
    """(node, sorted (name, value)) of each node's relevant variables, as redacted in the JSON."""
    out = []
    for node in items(document.get("nodes")):
        variables = section(node, "env").get("variables")
        if isinstance(variables, dict) and variables:
            out.append(
                (str(node.get("node", "")), sorted((str(k), str(v)) for k, v in variables.items()))
            )
    return out


def perf_runs(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The nccl-tests runs of an explain document, each with its rows flattened for a table."""
    runs = []
    for run in items(section(document, "nccl_tests").get("runs")):
        rows = []
        for row in items(run.get("rows")):
            cells = [row.get("size"), row.get("type") or "", row.get("redop") or ""]
            for side in ("out_of_place", "in_place"):
                half = row.get(side) if isinstance(row.get(side), dict) else {}
                cells += [half.get(k) for k in ("time_us", "algbw_GBps", "busbw_GBps", "wrong")]
            rows.append(cells)
        runs.append({**run, "table": rows})
    return runs


def ras_outputs(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The NCCL RAS outputs of an explain document, each diagnostics report with its inventory
    and result lines as lists of dicts."""
    outputs = []
    for out in items(section(document, "ras").get("outputs")):
        reports = [
            {**d, "inventory": items(d.get("inventory")), "results": items(d.get("results"))}
            for d in items(out.get("diagnostics"))
        ]
        outputs.append({**out, "diagnostics": reports})
    return outputs


def flight_recorder_groups(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Each process group of the Flight Recorder analysis: its label, what matched, and one line
    per divergence ("seq 12 all_reduce: missing on rank 1")."""
    groups = []
    for g in items(section(document, "flight_recorder").get("groups")):
        lines = []
        for d in items(g.get("divergences")):
            missing = ", ".join(str(r) for r in values(d.get("missing")))
            sides = "; ".join(
                f"ranks {', '.join(str(r) for r in values(s.get('ranks')))}: {s.get('op')} "
                f"{s.get('input_sizes')} {s.get('dtypes')} {s.get('state')}"
                for s in items(d.get("sides"))
            )
            what = f"missing on rank(s) {missing}" if missing else sides
            lines.append(f"seq {d.get('seq')} {d.get('op')} ({d.get('kind')}): {what}")
        no_dump = ", ".join(str(r) for r in values(g.get("no_dump")))
        groups.append(
            {"label": str(g.get("label") or g.get("name") or "?"), "matched": g.get("matched"),
             "no_dump": no_dump, "divergences": lines}
        )  # fmt: skip
    return groups
