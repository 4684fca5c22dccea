"""`nccldoctor watch -- CMD...`: run the user's own launch command and explain a hang or crash."""

from __future__ import annotations

import contextlib
import socket
import sys
from pathlib import Path
from typing import Annotated

import typer

from nccldoctor.cli.console import HtmlPath, NoHtml, abort, page_path, stderr, write_page
from nccldoctor.cli.progress import JobProgress
from nccldoctor.cluster.rundir import RunFolderError, make_run_folder, new_run_name
from nccldoctor.report import Report, write_report


def watch(
    command: Annotated[list[str], typer.Argument(help="The job's command, after `--`.")],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            envvar="NCCLDOCTOR_OUT",
            help="Where logs and the report go: each run in a new folder OUT/<node>/<run>/, "
            "OUT/<node>/latest the newest.",
        ),
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
    grace: Annotated[
        float,
        typer.Option(
            "--grace",
            envvar="NCCLDOCTOR_WATCH_GRACE",
            help="Seconds the job gets after SIGTERM, when watch ends it (a hang, or watch told "
            "to stop), before SIGKILL: a job that saves a checkpoint on SIGTERM may need more.",
        ),
    ] = 10.0,
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
    if grace < 0:
        raise abort("--grace must be zero or more")
    argv = ["nccldoctor", *sys.argv[1:]]
    node = node_name or socket.gethostname()
    # A folder of this run's own (docs/report.md#run-folder): the job's NCCL logs, its ranks'
    # records and dumps, read back for the report, are this run's and no earlier one's.
    run_dir = out / node / new_run_name()
    log = run_dir / "watch.log"
    try:
        make_run_folder(run_dir, log.name, " ".join(argv), latest=True)
    except RunFolderError as exc:
        raise abort(str(exc)) from None
    report_path = run_dir / "report.json"
    page = page_path(html, no_html, report_path.with_suffix(".html"))

    shown = JobProgress(stderr.real())  # the job's stdout stays the job's: the line is on stderr

    def say(message: str) -> None:
        """A line of the watcher's: on the terminal, and whole in the run's watch.log."""
        with contextlib.suppress(OSError), open(log, "a", encoding="utf-8") as f:
            f.write(message + "\n")
        shown.print(f"nccldoctor: {message}")

    def write(outcome: WatchOutcome, final: bool) -> Report:
        report = watch_report(outcome, argv, run_dir, final=final)
        try:
            write_report(report, report_path)
        except OSError as exc:  # the disk filled up or went read-only during the job
            say(f"{report.extra['watch']['verdict']} Cannot write {report_path}: "
                f"{exc.strerror or exc}")  # fmt: skip
        else:
            say(f"{report.extra['watch']['verdict']} Report: {report_path}")
        return report

    peers = None
    if master:
        try:
            peers = WatchPeers.join(master, port, node, timeout_s=60.0)
        except RendezvousError as exc:
            raise abort(f"cannot meet the other watchers: {exc}", code=3) from exc
    try:
        with shown:
            outcome = run_watched(
                WatchConfig(command, run_dir, hang_after, keep_running, peers, node, grace),
                on_event=say,
                on_hang=lambda o: write(o, final=False),
                on_status=shown.status,
                writers=(shown.through(sys.stdout.buffer), shown.through(sys.stderr.buffer)),
            )
    except FileNotFoundError as exc:
        raise abort(f"cannot run {command[0]!r}: {exc.strerror}", code=2) from exc
    final = write(outcome, final=True)  # the verdict closes every run, a healthy one too
    if not report_path.is_file():  # this run's folder is new: a file there is this run's report
        raise abort(f"the report could not be written to {report_path} (the line above says why)",
                    code=3)  # fmt: skip
    # stdout is the job's: the page's path goes to stderr
    write_page(final.to_dict(), page, json_out=True)
    raise typer.Exit(outcome.exit_code)
