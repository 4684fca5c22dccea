"""The `nccldoctor` typer application: global options and command registration."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from nccldoctor import __version__
from nccldoctor.cli import check, demo, explain, preflight, watch
from nccldoctor.cli import report as report_command

app = typer.Typer(
    name="nccldoctor",
    help="Diagnose multi-node NCCL and PyTorch DDP: preflight, check, explain, watch, report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("preflight")(preflight.preflight)
app.command("explain")(explain.explain)
app.command("check")(check.check)
app.command("demo")(demo.demo)
app.command("watch", context_settings={"ignore_unknown_options": True})(watch.watch)
app.command("report")(report_command.report)


def _version(value: bool) -> None:
    if value:
        print(f"nccldoctor {__version__}")
        raise typer.Exit(0)


@app.callback()
def root(
    version: Annotated[
        bool | None,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = None,
) -> None:
    """nccldoctor: diagnose multi-node NCCL and PyTorch DDP."""


def main() -> None:
    try:
        app()
    except SystemExit as exc:
        # `check` loads torch, whose interpreter shutdown took 0.5 s and more on a loaded machine
        # after every report was written; a command that is done has nothing left to tear down.
        if "torch" in sys.modules and (exc.code is None or isinstance(exc.code, int)):
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(exc.code or 0)
        raise
