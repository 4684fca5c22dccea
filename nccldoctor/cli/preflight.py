"""`nccldoctor preflight`: everything on this node that will break NCCL, before any process group."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from checks import all_checks
from nccldoctor.cli.console import abort, print_json, print_report, stdout
from nccldoctor.preflight import run_preflight
from nccldoctor.report import write_report


def preflight(
    root: Annotated[
        Path, typer.Option(envvar="NCCLDOCTOR_ROOT", help="Read the machine under this root.")
    ] = Path("/"),
    master: Annotated[
        str | None,
        typer.Option(
            envvar="NCCLDOCTOR_MASTER", help="The master's address (default: MASTER_ADDR)."
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    json_file: Annotated[
        Path | None, typer.Option("--json-file", help="Also write the JSON report to this file.")
    ] = None,
    check: Annotated[
        list[str] | None, typer.Option("--check", help="Run only this check id (repeatable).")
    ] = None,
    list_checks: Annotated[
        bool, typer.Option("--list-checks", help="List every registered check, with its scope.")
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show info findings.")] = False,
) -> None:
    """Check this node for everything that breaks NCCL."""
    if list_checks:
        for c in all_checks():
            stdout.print(f"{c.id:36} {c.scope:8} {c.category:28} {c.doc}", highlight=False)
        raise typer.Exit(0)
    known = all_checks("node")
    unknown = sorted(set(check or ()) - {c.id for c in known})
    if unknown:
        raise abort(f"no check available by the name {', '.join(unknown)} (see --list-checks)")
    if not root.is_dir():
        raise abort(f"--root {root} is not a directory")
    report = run_preflight(
        root=root,
        master=master or os.environ.get("MASTER_ADDR"),
        only=check,
        command=["nccldoctor", *sys.argv[1:]],
    )
    if json_file:
        write_report(report, json_file)
    if json_out:
        print_json(report.to_dict())
    else:
        print_report(report.to_dict(), verbose)
    raise typer.Exit(report.exit_code)
