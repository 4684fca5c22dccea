"""`nccldoctor watch -- CMD...`: run the user's own launch command and explain a hang or crash."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Annotated

import typer

from nccldoctor.cli.console import HtmlPath, NoHtml, abort, page_path, stderr, write_page
from nccldoctor.cli.progress import JobProgress
from nccldoctor.report import Report, write_report


def watch(
    command: Annotated[list[str], typer.Argument(help="The job's command, after `--`.")],
    out: Annotated[
        Path, typer.Option("--out", envvar="NCCLDOCTOR_OUT", help="Where logs and the report go.")
    ] = Path("nccldoctor-watch"),
    hang_after: Annotated[
        float,
        typer.Option(
            "--hang-after", envvar="NCCLDOCTOR_HANG_AFTER", help="Seconds without progress = hang."
        ),
    ] = 120.0,
    keep_running: Annotated[
        bool, typer.Option("--keep-running", help="Report a hang but leave the job running.")
    ] = False,
    master: Annotated[
        str | None,
        typer.Option(
            "--master",
            envvar="NCCLDOCTOR_MASTER",
            help="Meet the other nodes' watchers through a store on this address.",
        ),
    ] = None,
    node_name: Annotated[
        str | None,
        typer.Option(
            "--node-name",
            envvar="NCCLDOCTOR_NODE_NAME",
            help="This node's name (default: hostname).",
        ),
    ] = None,
    port: Annotated[
        int,
        typer.Option("--port", envvar="NCCLDOCTOR_WATCH_PORT", help="The watchers' store port."),
    ] = 29402,
    html: HtmlPath = None,
    no_html: NoHtml = False,
) -> None:
    """Run CMD with NCCL/PyTorch debugging on; on a hang or crash write the report."""
    from nccldoctor.meet import RendezvousError
    from nccldoctor.watch.peers import WatchPeers
    from nccldoctor.watch.report import watch_report
    from nccldoctor.watch.supervisor import WatchConfig, WatchOutcome, run_watched

    if hang_after <= 0:
        raise abort("--hang-after must be positive")
    report_path = out / "report.json"
    page = page_path(html, no_html, report_path.with_suffix(".html"))
    argv = ["nccldoctor", *sys.argv[1:]]

    shown = JobProgress(stderr.real())  # the job's stdout stays the job's: the line is on stderr

    def write(outcome: WatchOutcome, final: bool) -> Report:
        report = watch_report(outcome, argv, out, final=final)
        write_report(report, report_path)
        shown.print(f"nccldoctor: {report.extra['watch']['verdict']} Report: {report_path}")
        return report

    node = node_name or socket.gethostname()
    peers = None
    if master:
        try:
            peers = WatchPeers.join(master, port, node, timeout_s=60.0)
        except RendezvousError as exc:
            raise abort(f"cannot meet the other watchers: {exc}", code=3) from exc
    try:
        with shown:
            outcome = run_watched(
                WatchConfig(command, out, hang_after, keep_running, peers, node),
                on_event=lambda msg: shown.print(f"nccldoctor: {msg}"),
                on_hang=lambda o: write(o, final=False),
                on_status=shown.status,
                writers=(shown.through(sys.stdout.buffer), shown.through(sys.stderr.buffer)),
            )
    except FileNotFoundError as exc:
        raise abort(f"cannot run {command[0]!r}: {exc.strerror}", code=2) from exc
    final = write(outcome, final=True)  # the verdict closes every run, a healthy one too
    # stdout is the job's: the page's path goes to stderr
    write_page(final.to_dict(), page, json_out=True)
    raise typer.Exit(outcome.exit_code)
