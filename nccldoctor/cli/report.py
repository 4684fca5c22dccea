"""`nccldoctor report`: re-render a report (``show``, the default), or ``merge`` per-node reports
into a cluster report when the master's was lost."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from nccldoctor.cli import EXIT_CODES
from nccldoctor.cli.console import abort, print_json, print_report, write_text
from nccldoctor.report.document import Report


class _ShowByDefault(TyperGroup):
    """`nccldoctor report RUN.json` means `nccldoctor report show RUN.json`: anything that is not
    a subcommand (a path, an option) goes to ``show``."""

    default_command = "show"

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


app = typer.Typer(
    cls=_ShowByDefault,
    help="Render reports as text, HTML, JUnit or JSON (show, the default), or merge per-node "
    "reports into a cluster report (merge).",
    epilog=EXIT_CODES,
    no_args_is_help=True,
)

Output = Annotated[
    Path | None,
    # -o and --output: the names this option had before --html meant the page in every command
    typer.Option(
        "--html", "-o", "--output", envvar="NCCLDOCTOR_HTML", help="Write the HTML page here."
    ),
]
Junit = Annotated[
    Path | None,
    typer.Option(envvar="NCCLDOCTOR_JUNIT", help="Write JUnit XML here (CI pre-flight)."),
]
JsonOut = Annotated[bool, typer.Option("--json", help="Print the (merged) report as JSON.")]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Show info findings.")]


@app.command("show", epilog=EXIT_CODES)
def show(
    reports: Annotated[
        list[Path],
        typer.Argument(
            metavar="RUN.json...",
            help="A report to re-render, or every node's report to merge into a cluster report.",
        ),
    ],
    output: Output = None,
    junit: Junit = None,
    json_out: JsonOut = False,
    verbose: Verbose = False,
) -> None:
    """Render a report (several: merged first)."""
    from nccldoctor.cluster.diagnosis.merge import merge_reports
    from nccldoctor.report.load import ReportError, read_document

    if len(reports) > 1:
        document = merge_reports(_load(reports)).to_dict()
    else:  # one report: its document as read, without rebuilding a Report from it
        try:
            document = read_document(reports[0])
        except ReportError as exc:
            raise abort(str(exc)) from None
    _render(document, output, junit, json_out, verbose)


@app.command("merge", epilog=EXIT_CODES)
def merge(
    reports: Annotated[
        list[Path],
        typer.Argument(
            metavar="NODE.json...",
            help="The reports the nodes wrote (check-<node>.json); a missing node is named.",
        ),
    ],
    output: Output = None,
    junit: Junit = None,
    json_out: JsonOut = False,
    verbose: Verbose = False,
) -> None:
    """Merge per-node reports into one cluster report, naming the nodes whose report is missing."""
    from nccldoctor.cluster.diagnosis.merge import merge_reports

    _render(merge_reports(_load(reports)).to_dict(), output, junit, json_out, verbose)


def _load(paths: list[Path]) -> list[tuple[str, Report]]:
    from nccldoctor.report.load import ReportError, load_document_report

    try:
        return [(str(path), load_document_report(path)) for path in paths]
    except ReportError as exc:
        raise abort(str(exc)) from None


def _render(
    document: dict[str, Any], output: Path | None, junit: Path | None, json_out: bool, verbose: bool
) -> None:
    """Every view of one redacted document, exiting with the code it states."""
    from nccldoctor.report.document import document_exit_code
    from nccldoctor.views.html import render_document_html
    from nccldoctor.views.junit import render_document_junit

    if output:
        write_text(output, render_document_html(document))
    if junit:
        write_text(junit, render_document_junit(document))
    if json_out:
        print_json(document)
    else:
        print_report(document, verbose)
    raise typer.Exit(document_exit_code(document))
