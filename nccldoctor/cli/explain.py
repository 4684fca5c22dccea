"""`nccldoctor explain PATH...`: what NCCL did (transport, algorithm) and why it failed or hung,
from a ticket's attachments as they are: logs, nccl-tests and RAS outputs, Flight Recorder dumps,
nccldoctor reports, folders and archives of them."""

from __future__ import annotations

import contextlib
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from nccldoctor.cli.console import abort, print_json, print_report, write_page
from nccldoctor.report import Report


def explain(
    logs: Annotated[
        list[str],
        typer.Argument(
            help="Logs, nccl-tests/ncclras outputs, Flight Recorder dumps, reports: files, "
            "folders (recursive), globs, .gz, .tar(.gz), .zip, or - for stdin."
        ),
    ],
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    html: Annotated[
        Path | None,
        typer.Option("--html", envvar="NCCLDOCTOR_HTML", help="Also write the HTML page here."),
    ] = None,
    no_html: Annotated[
        bool, typer.Option("--no-html", hidden=True, help="The default: no page.")
    ] = False,  # kept so that scripts written when explain wrote a page by default still run
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs", "-j", envvar="NCCLDOCTOR_JOBS", help="Parser processes (default: CPUs)."
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show info findings.")] = False,
) -> None:
    """Explain a ticket's attachments."""
    from nccldoctor.explain import explain_ticket
    from nccldoctor.ticket import InputError, open_ticket

    # explain only reads: it writes a page when asked to (--html), never beside the user's files
    page = None if no_html else html
    # archives are unpacked here and read before it goes, a stop signal's too
    with _stops_raise(), tempfile.TemporaryDirectory(prefix="nccldoctor-explain-") as workdir:
        try:
            ticket = open_ticket(logs, Path(workdir))
        except InputError as exc:
            raise abort(str(exc)) from None
        extra, findings = explain_ticket(ticket, jobs=jobs)
    report = Report(
        kind="explain",
        findings=findings,
        command=["nccldoctor", *sys.argv[1:]],
        area_status={
            kind: _count(len(ticket.of_kind(kind)))
            for kind in ("logs", "nccl_tests", "ras")
            if ticket.of_kind(kind) or (kind == "logs" and not ticket.files)
        },
        extra=extra,
    )
    document = report.to_dict()
    if json_out:
        # the console's own file: a 64-rank document is large and needs no rich processing
        print_json(document)
    else:
        print_report(document, verbose)
    write_page(document, page, json_out=json_out)
    raise typer.Exit(report.exit_code)


@contextlib.contextmanager
def _stops_raise() -> Iterator[None]:
    """SIGTERM, SIGHUP and SIGINT raise SystemExit (128 + the signal) meanwhile: SIGTERM's and
    SIGHUP's own action ends the process at once, and left the archives unpacked in the working
    folder behind (1.4 GB); raised, the folder's context manager removes it. A signal ignored
    (nohup's SIGHUP, a background job's SIGINT) stays ignored; the handlers before come back."""

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = {}
    if threading.current_thread() is threading.main_thread():  # only it may set handlers
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            if signal.getsignal(sig) is not signal.SIG_IGN:
                previous[sig] = signal.signal(sig, stop)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _count(n: int) -> str:
    return f"{n} file{'s' if n != 1 else ''}"
