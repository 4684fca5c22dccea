"""`nccldoctor watch -- CMD...`: run the user's own launch command and explain a hang or crash."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Annotated

import typer

from nccldoctor.cli.console import abort, stderr
from nccldoctor.report import write_report


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
) -> None:
    """Run CMD with NCCL/PyTorch debugging on; on a hang or crash write the report.

    Exit code: the job's own, or 3 when watch ended a hung job.
    """
    from nccldoctor.meet import RendezvousError
    from nccldoctor.watch.peers import WatchPeers
    from nccldoctor.watch.report import watch_report
    from nccldoctor.watch.supervisor import WatchConfig, WatchOutcome, run_watched

    if hang_after <= 0:
        raise abort("--hang-after must be positive")
    report_path = out / "report.json"
    argv = ["nccldoctor", *sys.argv[1:]]

    def write(outcome: WatchOutcome, final: bool) -> None:
        report = watch_report(outcome, argv, out, final=final)
        write_report(report, report_path)
        stderr.print(f"nccldoctor: {report.extra['watch']['verdict']} Report: {report_path}")

    node = node_name or socket.gethostname()
    peers = None
    if master:
        try:
            peers = WatchPeers.join(master, port, node, timeout_s=60.0)
        except RendezvousError as exc:
            raise abort(f"cannot meet the other watchers: {exc}", code=3) from exc
    try:
        outcome = run_watched(
            WatchConfig(command, out, hang_after, keep_running, peers, node),
            on_event=lambda msg: stderr.print(f"nccldoctor: {msg}"),
            on_hang=lambda o: write(o, final=False),
        )
    except FileNotFoundError as exc:
        raise abort(f"cannot run {command[0]!r}: {exc.strerror}", code=2) from exc
    if outcome.hung or outcome.exit_code != 0:
        write(outcome, final=True)
    else:
        write_report(watch_report(outcome, argv, out), report_path)
    raise typer.Exit(outcome.exit_code)
