"""The one place that owns rich: report output to stdout, chatter to stderr, JSON straight out."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from nccldoctor.report import Report


class _LazyConsole:
    """A rich Console made on first use: a ``--json`` run never imports rich's console, which
    costs tens of milliseconds of every `nccldoctor preflight`."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Any = None

    def write_to(self, file: Any) -> None:
        """Print to ``file`` from now on."""
        self._options["file"] = file
        self._console = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return getattr(self._console, name)


# markup/highlight/emoji off: NCCL lines are full of brackets and must print verbatim.
stdout = _LazyConsole(markup=False, highlight=False, emoji=False, soft_wrap=True)
stderr = _LazyConsole(stderr=True, markup=False, highlight=False, emoji=False, soft_wrap=True)


def divert_stderr(log: Path) -> None:
    """Everything written to file descriptor 2 from now on goes to ``log``: torch's C++
    warnings and backtraces (TCPStore's retries print them straight to the descriptor), Python's
    and NumPy's import warnings, the workers forked later. nccldoctor's own lines (``stderr``)
    still reach the terminal (docs/design.md#terminal)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    terminal = os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8", errors="replace")
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 2)
    os.close(fd)
    stderr.write_to(terminal)


def supports_unicode() -> bool:
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "")
    return encoding in ("utf8", "utf_8")


def print_json(document: dict[str, Any]) -> None:
    """The document as JSON on stdout, verbatim (no wrapping, no styling)."""
    sys.stdout.write(json.dumps(document, indent=1) + "\n")
    sys.stdout.flush()


def print_report(report: Report, verbose: bool = False) -> None:
    """The report's redacted document as the terminal view: the headline, a line per area, the
    fix under each problem."""
    from nccldoctor.views.terminal import render_terminal

    document = report.to_dict()
    stdout.print(render_terminal(document, verbose=verbose, unicode=supports_unicode()))


def abort(message: str, code: int = 2) -> typer.Exit:
    """Print ``message`` to stderr and return the Exit to raise."""
    stderr.print(f"nccldoctor: {message}", style="red")
    return typer.Exit(code)
