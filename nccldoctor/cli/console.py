"""The one place that owns rich: report output to stdout, chatter to stderr, JSON straight out.
Its consoles are cleanterm's, which drop the control sequences of text from outside."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer


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
        return getattr(self.real(), name)

    def line(self, text: str) -> None:
        """Print ``text`` and a newline as they are. Printable ASCII, which rich would write
        unchanged here (no markup, highlighting, emoji or wrapping), goes straight to the stream:
        a `--json` run that only says where its page went never imports rich's console (~25 ms
        of `nccldoctor explain`). Anything else goes through rich, which expands tabs, drops
        control sequences (cleanterm) and explains an encoding error."""
        if self._console is not None or not (text.isascii() and text.isprintable()):
            self.real().print(text)
            return
        stream = self._options.get("file") or (
            sys.stderr if self._options.get("stderr") else sys.stdout
        )
        try:
            stream.write(text + "\n")
            stream.flush()  # as rich does after every print
        except BrokenPipeError:
            reader_gone(stream)  # as the console's own on_broken_pipe does

    def real(self) -> Any:
        """The Console itself, made now (a live display needs the object, not this proxy)."""
        if self._console is None:
            from nccldoctor.cli.cleanterm import CleanConsole

            self._console = console = CleanConsole(**self._options)
            # rich's own answer to a closed pipe is to exit 1 at once; ours is to carry on
            console.on_broken_pipe = lambda: reader_gone(console.file)
        return self._console


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


def reader_gone(stream: Any) -> None:
    """The reader of ``stream`` left early (`nccldoctor explain big.log | head -1`): all that is
    still written to it goes to /dev/null, so the command carries on to its report, its page and
    its verdict as the exit code, and Python's flush at exit has nothing left to fail on
    (docs/design.md#closed-pipe)."""
    with contextlib.suppress(OSError, ValueError):  # a stream without a descriptor: nothing to do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)


def flush_streams() -> None:
    """Flush stdout and stderr before the exit, dropping what a reader that left cannot take:
    else Python reports the failed flush at shutdown and exits 120 whatever the verdict."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            reader_gone(stream)
            with contextlib.suppress(OSError):
                stream.flush()  # the bytes it kept go to /dev/null


def supports_unicode() -> bool:
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "")
    return encoding in ("utf8", "utf_8")


def print_json(document: dict[str, Any]) -> None:
    """The document as JSON on stdout, verbatim (no wrapping, no styling)."""
    try:
        sys.stdout.write(json.dumps(document, indent=1) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        reader_gone(sys.stdout)


def print_report(document: dict[str, Any], verbose: bool = False) -> None:
    """A report's redacted document (``Report.to_dict``, or read back by ``read_document``) as
    the terminal view: the headline, a line per area, the fix under each problem."""
    from nccldoctor.views.terminal import render_terminal

    stdout.print(render_terminal(document, verbose=verbose, unicode=supports_unicode()))


def abort(message: str, code: int = 2) -> typer.Exit:
    """Print ``message`` to stderr and return the Exit to raise."""
    stderr.print(f"nccldoctor: {message}", style="red")
    return typer.Exit(code)


# Every command that makes a report writes its page too (docs/report.md, *The page by default*).
HtmlPath = Annotated[
    Path | None,
    typer.Option(
        "--html",
        envvar="NCCLDOCTOR_HTML",
        help="Write the HTML page here (default: beside the JSON report).",
    ),
]
NoHtml = Annotated[bool, typer.Option("--no-html", help="Do not write the HTML page.")]


def write_page(
    document: dict[str, Any], path: Path | None, *, json_out: bool = False
) -> Path | None:
    """Write the HTML page of a report's redacted ``document`` to ``path`` (None: --no-html)
    and print where, as the last line: on stdout, or on stderr when stdout carries the JSON."""
    if path is None:
        return None
    from nccldoctor.views.html import render_document_html

    write_text(path, render_document_html(document))
    (stderr if json_out else stdout).line(f"Page: {path}")
    return path


def page_path(html: Path | None, no_html: bool, default: Path) -> Path | None:
    """Where the page goes: ``--html``, else ``default``; None with ``--no-html``."""
    return None if no_html else html or default


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it
    os.umask(mask)
    return mask


def write_text(path: Path, text: str) -> None:
    """Write atomically (a reader never sees half a page); a failure is a usage error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 is for secrets; a page is not one
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise abort(f"cannot write {path}: {exc.strerror or exc}") from None
