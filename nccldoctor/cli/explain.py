"""`nccldoctor explain LOG...`: what NCCL did (transport, algorithm) and why it failed or hung."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from nccldoctor.cli.console import (
    HtmlPath,
    NoHtml,
    abort,
    page_path,
    print_json,
    print_report,
    write_page,
)
from nccldoctor.report import Report


def explain(
    logs: Annotated[
        list[str],
        typer.Argument(help="Log files, folders (recursive), globs, .gz files, or - for stdin."),
    ],
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    html: HtmlPath = None,
    no_html: NoHtml = False,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs", "-j", envvar="NCCLDOCTOR_JOBS", help="Parser processes (default: CPUs)."
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show info findings.")] = False,
) -> None:
    """Explain NCCL_DEBUG=INFO logs. Exit 0 healthy, 1 a finding failed, 2 usage."""
    from nccldoctor.explain import explain as explain_logs
    from nccldoctor.ncclog import InputError, expand_inputs

    try:
        sources = expand_inputs(logs)
    except InputError as exc:
        raise abort(str(exc)) from None
    page = page_path(html, no_html, Path("report.html"))  # explain writes no JSON file
    extra, findings = explain_logs(sources, jobs=jobs)
    report = Report(
        kind="explain",
        findings=findings,
        command=["nccldoctor", *sys.argv[1:]],
        area_status={"logs": f"{len(sources)} file{'s' if len(sources) != 1 else ''}"},
        extra=extra,
    )
    if json_out:
        # the console's own file: a 64-rank document is large and needs no rich processing
        print_json(report.to_dict())
    else:
        print_report(report, verbose)
    write_page(report, page, json_out=json_out)
    raise typer.Exit(report.exit_code)
