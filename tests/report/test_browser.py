"""The HTML report in headless Chromium, from file://, network off: nothing leaves the page.

Screenshots land in test-artifacts/ (gitignored) for a person to look at.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nccldoctor.views.html import render_document_html, render_html
from tests.report.browser import Chromium, chromium_executable
from tests.report.conftest import fixture_document
from tests.report.hostile import IMG, SCRIPT, hostile

ARTIFACTS = Path(__file__).parents[2] / "test-artifacts"

pytestmark = pytest.mark.skipif(
    chromium_executable() is None,
    reason="needs Debian's chromium (scripts/setup-tests.sh installs it)",
)

# Evaluated in the page: what a reader sees.
PAGE_FACTS = """(() => {
  const visible = (el) => !!el && el.getBoundingClientRect().height > 0 && getComputedStyle(el).visibility !== 'hidden';
  const verdict = document.querySelector('#verdict-title');
  const answer = document.querySelector('#answer');
  return {
    verdict: verdict ? verdict.textContent : null,
    verdictVisible: visible(verdict),
    answer: answer ? answer.textContent : null,
    answerVisible: visible(answer),
    busbwPoints: document.querySelectorAll('#bandwidth-chart circle.busbw.point').length,
    algbwPoints: document.querySelectorAll('#bandwidth-chart circle.algbw.point').length,
    wireLine: document.querySelectorAll('#bandwidth-chart line.wire').length,
    linkBudget: (document.querySelector('#link-budget') || {}).textContent || null,
    linkRows: document.querySelectorAll('#links tr').length,
    timelineBars: document.querySelectorAll('#timeline-chart rect').length,
    hangLine: document.querySelectorAll('#timeline-chart line.hangline').length,
    copyButtons: document.querySelectorAll('button.copy').length,
    fixBlocks: document.querySelectorAll('pre.fix').length,
    images: document.querySelectorAll('img').length,
    scripts: document.querySelectorAll('script').length,
    handlers: [...document.querySelectorAll('*')].filter(e => [...e.attributes].some(a => a.name.startsWith('on'))).length,
    text: document.body.innerText,
  };
})()"""


@pytest.fixture(scope="module")
def browser():
    with Chromium(chromium_executable()) as chromium:
        yield chromium


def open_page(browser: Chromium, name: str, html: str) -> tuple:
    ARTIFACTS.mkdir(exist_ok=True)
    page = ARTIFACTS / f"{name}.html"
    page.write_text(html, encoding="utf-8")
    run, facts = browser.open(page, ARTIFACTS / f"{name}.png", PAGE_FACTS)
    assert run.requests == [page.resolve().as_uri()], "the page requested something"
    assert run.console_errors == [] and run.dialogs == []
    assert (ARTIFACTS / f"{name}.png").stat().st_size > 10_000
    return run, facts


@pytest.mark.parametrize(
    ("name", "verdict", "points"),
    [
        ("healthy-check", "Healthy", 7),
        ("failed-check", "Problems found", 0),
        ("hang-check", "Hang", 3),
    ],
)
def test_report_in_chromium(browser: Chromium, name: str, verdict: str, points: int) -> None:
    document = fixture_document(name)
    _, facts = open_page(browser, name, render_document_html(document))
    assert facts["verdict"] == verdict and facts["verdictVisible"]
    assert facts["answerVisible"] and facts["answer"].startswith("AllReduce over")
    assert facts["busbwPoints"] == facts["algbwPoints"] == points
    assert facts["wireLine"] == (1 if points else 0)
    if points:  # judged against the link, on one scale: links in GB/s as busbw is
        assert " GB/s" in facts["linkBudget"] and " Gbit/s" not in facts["linkBudget"]
        assert facts["linkRows"] == 5
        assert "busbw" in facts["text"] and " GB/s" in facts["text"] and " MiB" in facts["text"]
    assert facts["timelineBars"] == len(document["phases"])
    assert facts["hangLine"] == (1 if name == "hang-check" else 0)
    assert facts["copyButtons"] == facts["fixBlocks"] > 0  # the script ran
    assert facts["scripts"] == 1 and facts["images"] == 0 and facts["handlers"] == 0


def test_xss_payloads_are_text_in_the_dom(browser: Chromium) -> None:
    _, facts = open_page(browser, "hostile", render_html(hostile()))
    assert facts["images"] == 0 and facts["scripts"] == 1 and facts["handlers"] == 0
    assert SCRIPT in facts["text"] and IMG in facts["text"]
    assert "hf_s3cr3tTokenValue" not in facts["text"]


def test_preflight_report_opens(browser: Chromium) -> None:
    _, facts = open_page(browser, "preflight", render_document_html(fixture_document("preflight")))
    assert facts["verdict"] == "Problems found" and facts["answer"].startswith(
        "Preflight of gpu-box-7."
    )


def test_the_harness_sees_a_request_and_a_console_error(browser: Chromium, tmp_path: Path) -> None:
    """Proof that the checks above can fail: a page that fetches is caught (nothing leaves:
    the name resolves to nothing and the browser has no network)."""
    page = tmp_path / "leaky.html"
    page.write_text(
        '<img src="http://nccldoctor.invalid/x.png"><script>console.error("boom")</script>'
    )
    run, _ = browser.open(page)
    assert "http://nccldoctor.invalid/x.png" in run.requests
    assert "boom" in run.console_errors


@pytest.mark.parametrize(
    ("name", "verdict", "answer"),
    [
        ("explain-ncclog", "Healthy", "AllReduce over 4 ranks on 1 node: P2P/CUMEM, 8 channels"),
        ("check-gloo-1node", "Problems found", "Check of 2 ranks on vm, backend gloo."),
        (
            "watch-hang",
            "Hang",
            "NCCL; no communicator was initialised in these logs. The run hung in training",
        ),
    ],
)
def test_documents_the_producers_wrote_open_cleanly(
    browser: Chromium, name: str, verdict: str, answer: str
) -> None:
    """explain and check output captured from their own code (tests/fixtures/reports/)."""
    _, facts = open_page(browser, name, render_document_html(fixture_document(name)))
    assert facts["verdict"] == verdict and facts["answer"].startswith(answer)
