"""From a finding to its page: the id and `nccldoctor docs ID` under every problem in the
terminal, the page's text folded in the HTML, the page itself in the terminal."""

from __future__ import annotations

import io

from rich.console import Console
from typer.testing import CliRunner

from checks import all_checks
from nccldoctor import guide
from nccldoctor.cli.app import app
from nccldoctor.model import Finding, Severity
from nccldoctor.report import Report
from nccldoctor.views.html import render_document_html
from nccldoctor.views.terminal import render_terminal

runner = CliRunner()


def _report(severity: Severity = Severity.FAIL, finding_id: str = "container.shm-small") -> Report:
    finding = Finding(
        id=finding_id,
        category="shm_docker",
        severity=severity,
        area="container",
        title="/dev/shm is 64 MiB",
        evidence=["/dev/shm 64 MiB"],
        fix="docker run --shm-size=1g ...",
    )
    return Report(kind="preflight", findings=[finding])


def test_every_registered_rule_has_a_page():
    assert guide.guide_dir() is not None
    assert not [c.id for c in all_checks() if guide.finding_page(c.id) is None]


def test_docs_prints_a_findings_page_and_names_close_ids_for_a_typo():
    shown = runner.invoke(app, ["docs", "container.shm-small"])
    assert shown.exit_code == 0
    assert shown.stdout.startswith("# `container.shm-small`")
    assert "<!--" not in shown.stdout  # the generator's note is not for the reader
    typo = runner.invoke(app, ["docs", "container.shm-smal"])
    assert typo.exit_code == 2 and "did you mean container.shm-small" in typo.stderr


def test_an_id_is_never_a_path():
    assert guide.page_path("../README") is None and guide.page_path("findings/README") is None
    assert runner.invoke(app, ["docs", "../../README"]).exit_code == 2


def test_the_terminal_names_the_page_under_a_problem_not_under_a_pass():
    def shown(report: Report) -> str:
        console = Console(file=io.StringIO(), width=200, no_color=True)
        console.print(render_terminal(report.to_dict()))
        return console.file.getvalue()

    assert "More: nccldoctor docs container.shm-small" in shown(_report())
    assert "nccldoctor docs" not in shown(_report(Severity.OK))
    assert "nccldoctor docs" not in shown(_report(finding_id="container.shm-small.crashed"))


def test_the_page_carries_the_guide_folded_and_escaped():
    html = render_document_html(_report().to_dict())
    assert '<details class="guide"><summary>More on container.shm-small' in html
    page = guide.finding_page("container.shm-small")
    assert page and "`" in page
    # the Markdown is text in the page, never markup: what it holds cannot add elements
    first_line = page.splitlines()[0]
    assert first_line.replace("`", "&#96;") in html or first_line in html
    assert "<h1>" not in html.split('<details class="guide">', 1)[1].split("</details>", 1)[0]
