"""`nccldoctor explain` as a library: parse logs, summarise them, judge them with the log rules.

The parser (``ncclog``) reads and records which lines the signature catalogue recognises; the
rules of scope ``logs`` (``checks/logs.py``) turn the reading into findings. ``check`` and
``watch`` read their ranks' logs through the same function. PyTorch Flight Recorder dumps among
the inputs (known by their first bytes) are matched across ranks instead
(``forensics/flightrec.py``) and judged by the ``flightrec`` rules; ``watch`` and ``check`` feed
the dumps they collect through ``explain_dumps`` too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from checks import run_checks
from checks.signatures import identify
from nccldoctor.forensics.flightrec import Analysis, looks_like_dump
from nccldoctor.model import Finding
from nccldoctor.ncclog import LogSet, Source, explain_logs, parse_sources
from nccldoctor.ncclog.summary import read_logs


def judge_logs(logs: LogSet) -> list[Finding]:
    """Every logs-scope rule over parsed ``logs``."""
    return run_checks("logs", read_logs(logs))


def explain_dumps(
    dumps: Sequence[tuple[Path, int | None]],
) -> tuple[dict[str, Any] | None, list[Finding]]:
    """The ``flight_recorder`` section and the flightrec findings of dump files, each with its
    rank (None: the number its file name ends with); (None, []) without any."""
    if not dumps:
        return None, []
    analysis = Analysis()
    for path, rank in dumps:
        analysis.add_file(path, rank)
    reading = analysis.reading()
    return reading.to_dict(), run_checks("flightrec", reading)


# A JSON dump names its first entry's keys within a few hundred bytes.
_HEAD_BYTES = 4096


def split_dumps(sources: list[Source]) -> tuple[list[Path], list[Source]]:
    """(Flight Recorder dumps, the other sources), told apart by their first bytes."""
    dumps, others = [], []
    for source in sources:
        try:
            with open(source.name, "rb") as f:
                head = f.read(_HEAD_BYTES)
        except OSError:  # stdin, or gone: the log parser reports it
            head = b""
        if looks_like_dump(head) and b'"schema_version"' not in head:  # not a report of ours
            dumps.append(Path(source.name))
        else:
            others.append(source)
    return dumps, others


def explain(
    sources: list[Source], jobs: int | None = None, progress: Callable[[str], None] | None = None
) -> tuple[dict[str, Any], list[Finding]]:
    """The report's extra sections (the log summary and headline, ``flight_recorder``) and the
    findings of ``sources``."""
    dumps, logs_sources = split_dumps(sources)
    extra: dict[str, Any] = {}
    findings: list[Finding] = []
    if logs_sources or not dumps:
        logs = parse_sources(logs_sources, jobs=jobs, progress=progress, identify=identify)
        extra, findings = explain_logs(logs), judge_logs(logs)
    if dumps:
        extra["flight_recorder"], dump_findings = explain_dumps([(p, None) for p in dumps])
        findings += dump_findings
    return extra, findings
