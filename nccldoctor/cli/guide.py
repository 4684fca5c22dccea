"""`nccldoctor docs [ID]`: a finding's page of the field guide, in the terminal."""

from __future__ import annotations

import difflib
from typing import Annotated

import typer

from nccldoctor.cli.console import abort, stdout


def docs(
    finding_id: Annotated[
        str | None,
        typer.Argument(
            metavar="ID", help="A finding's id, as a report shows it (container.memlock-limited)."
        ),
    ] = None,
    raw: Annotated[bool, typer.Option("--raw", help="Print the Markdown as it is.")] = False,
) -> None:
    """Print a finding's page of the field guide: what goes wrong, how to check, how to fix."""
    from nccldoctor import guide

    directory = guide.guide_dir()
    if directory is None:
        raise abort("this installation carries no field guide", code=3)
    if finding_id is None:  # where the guide is, then every id that has a page
        stdout.line(f"The field guide: {directory}")
        for known in guide.finding_ids():
            stdout.line(known)
        raise typer.Exit(0)
    page = guide.finding_page(finding_id)
    if page is None:
        close = difflib.get_close_matches(finding_id, guide.finding_ids(), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else " (nccldoctor docs lists them)"
        raise abort(f"no page for {finding_id!r}{hint}")
    if raw or not stdout.is_terminal:  # a pipe or a file gets the Markdown itself
        stdout.line(page.rstrip("\n"))
    else:
        from rich.markdown import Markdown

        stdout.print(Markdown(page))
    raise typer.Exit(0)
