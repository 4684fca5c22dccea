"""`nccldoctor explain` as a library: parse logs, summarise them, judge them with the log rules.

The parser (``ncclog``) reads and records which lines the signature catalogue recognises; the
rules of scope ``logs`` (``checks/logs.py``) turn the reading into findings. ``check`` and
``watch`` read their ranks' logs through the same function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from checks import run_checks
from checks.signatures import identify
from nccldoctor.model import Finding
from nccldoctor.ncclog import LogSet, Source, explain_logs, parse_sources
from nccldoctor.ncclog.summary import read_logs


def judge_logs(logs: LogSet) -> list[Finding]:
    """Every logs-scope rule over parsed ``logs``."""
    return run_checks("logs", read_logs(logs))


def explain(
    sources: list[Source], jobs: int | None = None, progress: Callable[[str], None] | None = None
) -> tuple[dict[str, Any], list[Finding]]:
    """The report's extra section (the summary and headline) and the findings of ``sources``."""
    logs = parse_sources(sources, jobs=jobs, progress=progress, identify=identify)
    return explain_logs(logs), judge_logs(logs)
