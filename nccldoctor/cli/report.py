"""`nccldoctor report`: re-render a report, or merge per-node reports when the master's was lost."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from nccldoctor.cli.console import abort, print_json, print_report, stdout
from nccldoctor.report.answer import BANNERS, answer, banner


def report(
    reports: Annotated[
        list[Path],
        typer.Argument(
            metavar="RUN.json...",
            help="A report to re-render, or every node's report to merge into a cluster report.",
        ),
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", envvar="NCCLDOCTOR_OUTPUT", help="Write the HTML page here."
        ),
    ] = None,
    junit: Annotated[
        Path | None,
        typer.Option(envvar="NCCLDOCTOR_JUNIT", help="Write JUnit XML here (CI pre-flight)."),
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the (merged) report as JSON.")
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show info findings.")] = False,
) -> None:
    """Render reports as HTML, JUnit, JSON or text. Exit 0 healthy, 1 problems, 2 usage, 3 incomplete."""
    from nccldoctor.report.load import ReportError, load_document_report
    from nccldoctor.report.merge import merge_reports
    from nccldoctor.views.html import render_html
    from nccldoctor.views.junit import render_junit

    try:
        loaded = [(str(path), load_document_report(path)) for path in reports]
    except ReportError as exc:
        raise abort(str(exc)) from None
    result = loaded[0][1] if len(loaded) == 1 else merge_reports(loaded)
    if output:
        _write(output, render_html(result))
    if junit:
        _write(junit, render_junit(result))
    if json_out:
        print_json(result.to_dict())
    else:
        document = result.to_dict()
        stdout.print(f"{BANNERS[banner(document)]}: {answer(document)}\n")
        print_report(result, verbose)
    raise typer.Exit(result.exit_code)


def _write(path: Path, text: str) -> None:
    """Write atomically (a reader never sees half a page); a failure is a usage error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise abort(f"cannot write {path}: {exc.strerror or exc}") from None
