"""The one place that owns rich: report output to stdout, chatter to stderr."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

# markup/highlight/emoji off: NCCL lines are full of brackets and must print verbatim.
stdout = Console(markup=False, highlight=False, emoji=False, soft_wrap=True)
stderr = Console(stderr=True, markup=False, highlight=False, emoji=False, soft_wrap=True)


def supports_unicode() -> bool:
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "")
    return encoding in ("utf8", "utf_8")


def abort(message: str, code: int = 2) -> typer.Exit:
    """Print ``message`` to stderr and return the Exit to raise."""
    stderr.print(f"nccldoctor: {message}", style="red")
    return typer.Exit(code)
