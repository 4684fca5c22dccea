"""Markdown for the generated finding pages and their index: pure functions of the catalogue."""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from typing import Any

from nccldoctor.docs import CRASHED_SUFFIX
from nccldoctor.docs.refs import CategoryRef
from nccldoctor.model import AREA_TITLES, AREAS, CATEGORIES

INDEX_NAME = "README.md"

_GENERATED = "<!-- Generated from the code by `python -m nccldoctor.docs`; do not edit by hand. -->"
_ISSUE_REF = re.compile(r"(?<![\w/\[])([A-Za-z0-9][\w.-]*/[\w.-]+)#(\d+)\b")
_CODE_SPAN = re.compile(r"(`+[^`]*`+)")
_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")
_SEVERITY = re.compile(r"\bSeverity\.(FAIL|WARN|INFO|OK)\b")
_EMITTERS = {"nccl": "NCCL", "torch": "PyTorch (c10d)", "gloo": "gloo"}


# ---- markdown helpers -------------------------------------------------------------------------


def _as_list(value: Any) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def _value(value: Any) -> str:
    """An enum's value (Severity), or the text itself."""
    return str(getattr(value, "value", value))


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return link_refs(" ".join(str(text).split()).replace("|", "\\|"))


def _plain(part: str) -> str:
    """Text outside code: ``<name>`` would be read as an HTML tag, ``owner/repo#N`` becomes a link
    to the GitHub thread (GitHub redirects ``/issues/N`` to the pull request when N is one)."""
    part = _TAG_START.sub(r"\\<", part)
    return _ISSUE_REF.sub(lambda m: f"[{m[0]}](https://github.com/{m[1]}/issues/{m[2]})", part)


def link_refs(text: str) -> str:
    """Markdown for catalogue or docstring text: code spans as they are, the rest through _plain."""
    return "".join(
        part if part.startswith("`") else _plain(part) for part in _CODE_SPAN.split(text)
    )


def _prose(text: str) -> str:
    """A docstring or catalogue text as markdown: reST double backticks become single ones."""
    return link_refs(inspect.cleandoc(text).replace("``", "`").strip())


def _fence(text: str, lang: str = "text") -> str:
    ticks = "````" if "```" in text else "```"
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}"


def _table(rows: Sequence[tuple[str, str]]) -> str:
    lines = ["| | |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in rows if value]
    return "\n".join(lines)


def _header(finding_id: str, back: str) -> list[str]:
    return [_GENERATED, "", f"# `{finding_id}`", "", f"[All findings](README.md) · {back}", ""]


def _background(ref: CategoryRef, category: str) -> list[str]:
    parts = [f"## Background: {ref.title}", "", link_refs(ref.background), ""]
    if ref.see_also:
        parts += ["See also: " + " · ".join(ref.see_also) + ".", ""]
    if ref.references:
        parts += ["Seen in: " + ", ".join(link_refs(r) for r in ref.references) + ".", ""]
    parts += [f"Other findings of this category: [index](README.md#category-{category}).", ""]
    return parts


def _page(parts: list[str]) -> str:
    return "\n".join(parts).rstrip() + "\n"


# ---- pages ------------------------------------------------------------------------------------


def _related(heading: str, entries: Sequence[Any]) -> list[str]:
    if not entries:
        return []
    lines = [
        f"- [`{e.id}`]({e.id}.md): {_cell(getattr(e, 'title', None) or e.doc)}" for e in entries
    ]
    return [f"## {heading}", "", *lines, ""]


def _severities(func: Any) -> str:
    """The severities a check states (a table's rule) or its own body names (``Severity.FAIL``
    ...), worst first; "" if none.

    A body's are read from the source, so a severity chosen in a helper function is not seen: the row is left
    out then rather than guessed.
    """
    declared = getattr(func, "severities", None)  # checks/ras/diag.py's rows
    if declared is not None:
        return ", ".join(f"`{s.value}`" for s in declared)
    try:
        source = inspect.getsource(func)
    except (OSError, TypeError):
        return ""
    named = set(_SEVERITY.findall(source))
    return ", ".join(f"`{s.lower()}`" for s in ("FAIL", "WARN", "INFO", "OK") if s in named)


def _definition(func: Any, module: str) -> str:
    """The function a rule is, or the row of the table that registers it."""
    return getattr(func, "table_row", None) or f"`{module}.py`, function `{func.__name__}`"


def _note(note: str) -> list[str]:
    return ["## What goes wrong", "", link_refs(note), ""] if note else []


# Where a check of each scope runs, and the command that runs it ({id}: the check's id).
_WHERE_A_SCOPE_RUNS: dict[str, tuple[str, str]] = {
    "node": (
        "on every node (`nccldoctor preflight`, and inside `nccldoctor check`)",
        "nccldoctor preflight --check {id}",
    ),
    "cluster": (
        "on the master, over the facts of every node (`nccldoctor check`)",
        "nccldoctor check --master ADDR --nodes N",
    ),
    "run": (
        "on every node of a cluster run, over what its phases observed (`nccldoctor check`)",
        "nccldoctor check --master ADDR --nodes N",
    ),
    "bandwidth": (
        "over the bandwidth sweep and every node's links, on each node and again on the master "
        "(`nccldoctor check`)",
        "nccldoctor check --master ADDR --nodes N",
    ),
    "ranks": (
        "over how the ranks of a cluster run ended (`nccldoctor check`)",
        "nccldoctor check --master ADDR --nodes N",
    ),
    "world": (
        "where the node reports are merged, over what was seen of every node: on the master "
        "(`nccldoctor check`) and in `nccldoctor report merge`",
        "nccldoctor check --master ADDR --nodes N\nnccldoctor report merge NODE.json... --html report.html",
    ),
    "logs": (
        "over the summary of NCCL logs (`nccldoctor explain`, and inside `nccldoctor check`)",
        "nccldoctor explain LOG...",
    ),
    "job": (
        "over what `nccldoctor watch` saw of your own job",
        "nccldoctor watch -- CMD...",
    ),
    "flightrec": (
        "over PyTorch Flight Recorder dumps matched across ranks (`nccldoctor explain`, and "
        "inside `nccldoctor watch` and `nccldoctor check`)",
        "nccldoctor explain nccl_trace_rank_*",
    ),
    "nccl_tests": (
        "over the nccl-tests output in a ticket (`nccldoctor explain`)",
        "nccldoctor explain all_reduce_perf.txt",
    ),
    "ras": (
        "over the NCCL RAS output (`ncclras`) in a ticket (`nccldoctor explain`)",
        "nccldoctor explain ncclras.txt",
    ),
    "ticket": (
        "over the attachments of a ticket, as they were sorted (`nccldoctor explain`)",
        "nccldoctor explain ticket.tar.gz",
    ),
    "isolation": (
        "on the master, over the isolation rounds that test the nodes in pairs when the "
        "all-node run failed (`nccldoctor check`)",
        "nccldoctor check --master ADDR --nodes N --isolate always",
    ),
    "preflight": (
        "in `nccldoctor preflight` when no master is known, over the node's findings as a "
        "single node and as one node of several",
        "nccldoctor preflight",
    ),
}


def render_check_page(
    check: Any, refs: Mapping[str, CategoryRef], signatures: Sequence[Any] = (), note: str = ""
) -> str:
    """The page of one registered check (a ``checks.Check``); ``signatures`` of its category."""
    area_title = AREA_TITLES.get(check.area, check.area)
    ref = refs[check.category]
    runs, command = _WHERE_A_SCOPE_RUNS[check.scope]
    command = command.format(id=check.id)
    module = check.func.__module__.replace(".", "/")
    parts = _header(check.id, f"[{area_title}](README.md#area-{check.area})")
    parts += [f"**{_cell(check.doc) or 'No description yet.'}**", ""]
    parts += [
        _table(
            [
                ("kind", f"{check.scope}-scope check, runs {runs}"),
                ("area", f"{area_title} (`{check.area}`)"),
                ("category", f"`{check.category}`: {ref.title}"),
                ("can report", _severities(check.func)),
                ("defined in", _definition(check.func, module)),
            ]
        ),
        "",
    ]
    body = inspect.cleandoc(check.func.__doc__ or "").split("\n", 1)[1:]
    if body and body[0].strip():
        parts += ["## What it checks", "", _prose(body[0]), ""]
    parts += _note(note)
    parts += [
        "## Run it",
        "",
        _fence(command, "bash"),
        "",
        "In a report the finding carries the evidence read on your machine and a fix to paste. "
        f"`{check.id}{CRASHED_SUFFIX}` means the check itself raised: a bug in nccldoctor, "
        "please report it with the JSON report attached.",
        "",
    ]
    parts += _related("Log lines of this category (`nccldoctor explain`)", signatures)
    return _page(parts + _background(ref, check.category))


def render_signature_page(
    sig: Any, refs: Mapping[str, CategoryRef], checks: Sequence[Any] = (), note: str = ""
) -> str:
    """The page of one log signature (a ``checks.signatures.Signature``); ``checks`` of its category."""
    ref = refs[sig.category]
    parts = _header(sig.id, f"[{ref.title}](README.md#category-{sig.category})")
    parts += [f"**{_cell(sig.title)}**", ""]
    if "{" in sig.title:
        parts += ["In a report the `{…}` are filled in from the matched line.", ""]
    parts += [
        _table(
            [
                ("kind", f"log signature of {_EMITTERS.get(sig.source, sig.source)}"),
                ("category", f"`{sig.category}`: {ref.title}"),
                ("severity", f"`{_value(sig.severity)}`"),
                ("versions", _cell(", ".join(_as_list(sig.versions)))),
            ]
        ),
        "",
        "## What the log says",
        "",
        "A line matching this regular expression:",
        "",
        _fence(sig.pattern),
        "",
    ]
    prefilter = _as_list(sig.prefilter)
    if prefilter:
        quoted = " or ".join(f"`{p}`" for p in prefilter)
        parts += [f"(tried only on lines containing {quoted})", ""]
    not_from = _as_list(getattr(sig, "not_from", ()))
    if not_from:
        files = " or ".join(f"`{f}`" for f in not_from)
        parts += [f"(not when NCCL printed the line from {files})", ""]
    parts += ["## Cause", "", _prose(sig.cause), "", *_note(note)]
    parts += ["## Fix", "", _fence(sig.fix, "bash"), ""]
    references = _as_list(sig.reference)
    if references:
        parts += ["## References", "", *(f"- {link_refs(r)}" for r in references), ""]
    parts += [
        "## Run it",
        "",
        "`nccldoctor explain` matches it in the logs you give it; `nccldoctor check` in the NCCL "
        "logs of its own workers.",
        "",
        _fence("nccldoctor explain LOG...", "bash"),
        "",
    ]
    parts += _related("Checks that look for this before a job runs", checks)
    return _page(parts + _background(ref, sig.category))


def render_index(
    checks: Sequence[Any],
    signatures: Sequence[Any],
    refs: Mapping[str, CategoryRef],
) -> str:
    """``docs/findings/README.md``: checks by area, signatures by category, the categories."""
    parts = [
        _GENERATED,
        "",
        "# Findings",
        "",
        "One page per finding id that nccldoctor can report. Every finding in a report (terminal, "
        "JSON, HTML) carries an id; its page says what was checked, why it breaks NCCL and how to "
        "fix it. Severities: `ok`, `info`, `warn`, `fail` (exit code 1). Back to the "
        "[field guide](../README.md).",
        "",
        f"{len(checks)} checks and {len(signatures)} log signatures.",
        "",
        "## Checks",
        "",
        "Node-scope checks run on every node (`nccldoctor preflight`, and inside "
        "`nccldoctor check`); cluster-scope checks compare all nodes (`nccldoctor check`).",
        "",
    ]
    for area in AREAS:
        in_area = [c for c in checks if c.area == area]
        if in_area:
            parts += [f'<a id="area-{area}"></a>', "", f"### {AREA_TITLES[area]}", ""]
            parts += ["| id | category | scope | what it checks |", "|---|---|---|---|"]
            parts += [
                f"| [`{c.id}`]({c.id}.md) | [`{c.category}`](#category-{c.category}) "
                f"| {c.scope} | {_cell(c.doc)} |"
                for c in in_area
            ]
            parts.append("")
    parts += [
        "## Log signatures",
        "",
        "Known lines of NCCL and PyTorch output, matched by `nccldoctor explain` and in the "
        "worker logs of `nccldoctor check`.",
        "",
    ]
    for category in CATEGORIES:
        in_category = [s for s in signatures if s.category == category]
        if in_category:
            parts += [f"### {refs[category].title} (`{category}`)", ""]
            parts += ["| id | severity | title |", "|---|---|---|"]
            parts += [
                f"| [`{s.id}`]({s.id}.md) | {_value(s.severity)} | {_cell(s.title)} |"
                for s in in_category
            ]
            parts.append("")
    parts += ["## Categories", ""]
    for category in CATEGORIES:
        ref = refs[category]
        ids = [c.id for c in checks if c.category == category]
        ids += [s.id for s in signatures if s.category == category]
        parts += [f'<a id="category-{category}"></a>', "", f"### {ref.title} (`{category}`)", ""]
        parts += [link_refs(ref.background), ""]
        if ids:
            parts += ["Findings: " + ", ".join(f"[`{i}`]({i}.md)" for i in ids) + ".", ""]
    return _page(parts)
