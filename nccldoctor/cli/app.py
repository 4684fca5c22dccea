"""The `nccldoctor` typer application: global options and command registration.

Each command lives in its own module and is registered on demand: a run of `nccldoctor
preflight` imports the preflight command only, not the cluster check's or the log parser's
modules (preflight is meant to answer within a second on every node, before every job).
`nccldoctor --help`, and the module attribute ``app`` used by tests and the docs, have them all.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Annotated

import typer

from nccldoctor import __version__
from nccldoctor.cli import EXIT_CODES


def _preflight(app: typer.Typer) -> None:
    from nccldoctor.cli import preflight

    app.command("preflight", epilog=EXIT_CODES)(preflight.preflight)


def _explain(app: typer.Typer) -> None:
    from nccldoctor.cli import explain

    app.command("explain", epilog=EXIT_CODES)(explain.explain)


def _check(app: typer.Typer) -> None:
    from nccldoctor.cli import check

    app.command("check", epilog=EXIT_CODES)(check.check)


def _demo(app: typer.Typer) -> None:
    from nccldoctor.cli import demo

    app.command("demo", epilog=EXIT_CODES)(demo.demo)


def _watch(app: typer.Typer) -> None:
    from nccldoctor.cli import watch

    app.command("watch", context_settings={"ignore_unknown_options": True}, epilog=EXIT_CODES)(
        watch.watch
    )


def _docs(app: typer.Typer) -> None:
    from nccldoctor.cli import guide

    app.command("docs", epilog=EXIT_CODES)(guide.docs)


def _report(app: typer.Typer) -> None:
    from nccldoctor.cli import report

    app.add_typer(report.app, name="report")


# In the order `--help` lists them.
COMMANDS: dict[str, Callable[[typer.Typer], None]] = {
    "preflight": _preflight,
    "explain": _explain,
    "check": _check,
    "demo": _demo,
    "watch": _watch,
    "report": _report,
    "docs": _docs,
}


def _version(value: bool) -> None:
    if value:
        print(f"nccldoctor {__version__}")
        raise typer.Exit(0)


def root(
    version: Annotated[
        bool | None,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = None,
) -> None:
    """nccldoctor: diagnose multi-node NCCL and PyTorch DDP."""


def build_app(commands: list[str] | None = None) -> typer.Typer:
    """The application with ``commands`` registered (all of them when None)."""
    app = typer.Typer(
        name="nccldoctor",
        help="Diagnose multi-node NCCL and PyTorch DDP: preflight, check, explain, watch, report.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    app.callback()(root)
    for name in commands or COMMANDS:
        COMMANDS[name](app)
    return app


def _invoked(argv: list[str]) -> list[str] | None:
    """The command named on the command line, when it is the first word after the global
    options; anything else (no command, `--help`, a typo) gets the full application."""
    first = next((arg for arg in argv if not arg.startswith("-")), None)
    return [first] if first in COMMANDS else None


def __getattr__(name: str) -> typer.Typer:
    if name == "app":  # built on first use, with every command
        globals()["app"] = built = build_app()
        return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    try:
        build_app(_invoked(sys.argv[1:]))(prog_name="nccldoctor")
    except SystemExit as exc:
        from nccldoctor.cli.console import flush_streams

        flush_streams()  # a closed pipe costs the output, never the exit code
        # `check` loads torch, whose interpreter shutdown took 0.5 s and more on a loaded machine
        # after every report was written; a command that is done has nothing left to tear down.
        if "torch" in sys.modules and (exc.code is None or isinstance(exc.code, int)):
            os._exit(exc.code or 0)
        raise
