"""The HTML page as a string: self-contained, every section where the document has data."""

from __future__ import annotations

import base64
import hashlib
import re
from html.parser import HTMLParser

import pytest

from nccldoctor.report.load import upgrade
from nccldoctor.views.html import render_document_html, render_html, templates_dir
from tests.report.conftest import fixture_document
from tests.report.scenarios import SCENARIOS

# Attributes through which a page would fetch something (anchors only navigate when clicked).
FETCHING = {
    "src",
    "srcset",
    "poster",
    "data",
    "background",
    "action",
    "formaction",
    "xlink:href",
    "ping",
}


class Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.raw: dict[str, list[str]] = {"script": [], "style": []}
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in = tag if tag in self.raw else None

    def handle_endtag(self, tag: str) -> None:
        self._in = None

    def handle_data(self, data: str) -> None:
        if self._in:
            self.raw[self._in].append(data)
        self.text.append(data)


def parse(html: str) -> Collect:
    parser = Collect()
    parser.feed(html)
    return parser


def test_every_scenario_is_self_contained(scenario: str) -> None:
    html = render_html(SCENARIOS[scenario]())
    page = parse(html)
    for tag, attrs in page.tags:
        assert not (FETCHING & set(attrs)), (tag, attrs)
        if tag == "link" or (tag != "a" and "href" in attrs):
            raise AssertionError(f"resource reference {tag} {attrs}")
    assert "url(" not in "".join(page.raw["style"]) and "@import" not in "".join(page.raw["style"])
    assert not re.search(
        r"\b(fetch|XMLHttpRequest|WebSocket|EventSource|import\()", "".join(page.raw["script"])
    )


def _sha(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_csp_allows_nothing_but_the_pages_own_script_and_style() -> None:
    page = parse(render_document_html(fixture_document("healthy-check")))
    (csp,) = [
        a["content"]
        for t, a in page.tags
        if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"
    ]
    (script,), (style,) = page.raw["script"], page.raw["style"]
    assert csp.startswith("default-src 'none'; ")
    assert f"script-src {_sha(script)};" in csp and f"style-src {_sha(style)};" in csp


@pytest.mark.parametrize(
    ("name", "present", "absent"),
    [
        (
            "healthy-check",
            [
                "verdict",
                "cluster",
                "findings",
                "transports",
                "transport-matrix",
                "bandwidth-chart",
                "bandwidth-table",
                "timeline-chart",
                "ddp",
                "logs",
                "environment",
                "reproduce",
            ],
            [],
        ),
        ("hang-check", ["timeline-chart", "bandwidth-chart", "logs"], ["ddp"]),
        (
            "preflight",
            ["findings", "environment", "reproduce"],
            ["transports", "bandwidth", "timeline", "logs"],
        ),
        ("explain", ["transports", "transport-matrix"], ["cluster", "bandwidth", "timeline"]),
    ],
)
def test_sections_follow_the_data(name: str, present: list[str], absent: list[str]) -> None:
    ids = {a.get("id") for _, a in parse(render_document_html(fixture_document(name))).tags}
    assert set(present) <= ids
    assert not (set(absent) & ids)


def test_banner_and_answer() -> None:
    html = render_document_html(fixture_document("hang-check"))
    assert '<section id="verdict" class="banner hang">' in html
    assert '<h2 id="verdict-title">Hang</h2>' in html
    assert "The run hung in bandwidth (rank 1 on node-b; rank 0 on node-a)." in html


def test_cluster_mismatches_and_nat_are_highlighted_with_the_finding_that_judged_them() -> None:
    html = render_document_html(fixture_document("failed-check"))
    driver = "NVIDIA driver differs between nodes: 550.54.15 (node-a), 535.161.08 (node-b)"
    assert f'<td class="mismatch" title="{driver}">535.161.08</td>' in html
    assert (
        '<td class="mismatch" title="torch differs between nodes: 2.6.0 (node-a), 2.5.1 (node-b)">2.5.1</td>'
        in html
    )
    nat = "node-b sits behind NAT: it advertises 172.17.0.2 but the master sees 198.18.0.2"
    assert f'<td class="mismatch" title="{nat}">172.17.0.2 (seen as 198.18.0.2)</td>' in html
    assert html.count('class="mismatch"') == 2 * 2 + 1  # driver and torch on both nodes, NAT


def test_transport_matrix_cells() -> None:
    html = render_document_html(fixture_document("healthy-check"))
    matrix = html[
        html.index('id="transport-matrix"') : html.index(
            "</table>", html.index('id="transport-matrix"')
        )
    ]
    rows = re.findall(r"<tr><th>(\d)</th>(.*?)</tr>", matrix)
    cells = {int(r): re.findall(r'<td class="([^"]*)">([^<]*)</td>', body) for r, body in rows}
    assert cells[0] == [("self", ""), ("p2p", "P2P"), ("", ""), ("", "")]
    assert cells[1][2] == ("socket", "Sock")
    assert cells[3][0] == ("socket", "Sock")


def test_findings_grouped_worst_first_with_copyable_fix() -> None:
    html = render_document_html(fixture_document("failed-check"))
    assert html.index("<h3>Problems (2)</h3>") < html.index("<h3>Warnings (2)</h3>")
    assert (
        '<div class="fixbox"><pre class="fix">docker run --network host --ipc host --gpus all ...</pre></div>'
        in html
    )
    assert '<a href="https://docs.nvidia.com/' in html and 'rel="noreferrer noopener"' in html


def test_logs_warn_lines_first_and_key_lines_marked() -> None:
    html = render_document_html(fixture_document("failed-check"))
    start = html.index("<summary>rank 2 (node-b)")
    block = html[start : html.index("</details>", start)]
    warn = '<div class="warn">[2026-12-02 12:00:07] node-b'
    assert block.index(warn) < block.index('<div class="key">')
    assert "<details open>\n<summary>rank 2 (node-b): reached init, exit code 3" in html
    assert "<details>\n<summary>rank 0 (node-a)" in html


def test_print_css_opens_logs_and_hides_buttons() -> None:
    css = (templates_dir() / "report.css").read_text()
    media = css[css.index("@media print") :]
    assert "details::details-content" in media and "button.copy { display: none; }" in media


def test_odd_shapes_do_not_crash_the_page() -> None:
    doc = {
        "kind": "check",
        "completed": False,
        "findings": [{"title": 3, "evidence": "one", "links": "x"}],
        "nodes": [{"node": "a", "gpu": None}],
        "nccl": {"connections": [{"rank": "0"}], "rings": [{"ranks": None}]},
        "bandwidth": {"rows": [{"size_bytes": None}]},
        "phases": [{"started": "x"}],
        "ranks": [{"rank": None}],
        "hang": {"stuck": None},
        "cluster": {"nodes": [{"name": None}], "missing_nodes": ["b"]},
    }
    html = render_document_html(upgrade(doc))
    assert '<section id="verdict" class="banner hang">' in html


def test_parser_summary_gives_per_rank_transports_rings_and_trees() -> None:
    """`explain`'s own `nccl` section has no per-peer list: a rank × transport table instead."""
    html = render_document_html(fixture_document("explain-ncclog"))
    assert 'id="rank-transports"' in html and 'id="transport-matrix"' not in html
    assert '<span class="p2p">P2P/CUMEM × 16</span>' in html
    assert "Channel 0: 0 → 1 → 2 → 3 → 0" in html
    assert "rank 0: [0] 1/-1/-1-&gt;0-&gt;-1 [1]" in html


@pytest.mark.parametrize("broken", ["garbage in the file", "the folder is a file"])
def test_a_broken_template_cache_is_a_compile_not_an_error(broken, tmp_path, monkeypatch) -> None:
    """jinja2's bytecode cache lives in the temp directory: whatever is found there, the page
    is the same, compiled afresh."""
    import tempfile

    from nccldoctor.views import html

    document = fixture_document("healthy-check")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    html._environment.cache_clear()
    expected = render_document_html(document)  # compiled, and written to the cache
    (folder,) = tmp_path.glob("_jinja2-cache-*")
    cached = list(folder.glob("*.cache"))
    assert cached
    for path in cached:
        if broken == "garbage in the file":
            path.write_bytes(b"\x00not marshal data" * 64)
        else:
            path.unlink()
    if broken == "the folder is a file":
        folder.rmdir()
        folder.write_text("not a folder")
    html._environment.cache_clear()
    try:
        assert render_document_html(document) == expected
    finally:
        html._environment.cache_clear()
