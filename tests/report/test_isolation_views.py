"""The isolation rounds in the views: the pairwise busbw as a terminal table and a page heatmap,
from the section the master writes (nccldoctor/report/isolation.py), and nothing at all from a
section of the wrong shape."""

from __future__ import annotations

import math

import pytest
from rich.console import Console

from nccldoctor.cluster.isolate.simulate import Cluster, run
from nccldoctor.report.isolation import isolation_section
from nccldoctor.views.html import render_document_html
from nccldoctor.views.isolation import pair_matrix
from nccldoctor.views.terminal import render_terminal


def document(isolation: object) -> dict:
    return {"kind": "check", "verdict": "problems", "findings": [], "isolation": isolation}


def answer() -> dict:
    nodes = [f"gpu-{i}" for i in range(6)]
    return isolation_section(
        run(Cluster(nodes, slow=["gpu-5"], bad_links=[frozenset(("gpu-0", "gpu-3"))]))
    )


def terminal(doc: dict) -> str:
    console = Console(width=220, record=True, color_system=None)
    console.print(render_terminal(doc))
    return console.export_text()


def test_the_matrix_is_symmetric_and_says_how_each_tested_pair_ended() -> None:
    section = answer()
    nodes, cells = section["matrix"]["nodes"], section["matrix"]["cells"]
    at = {n: i for i, n in enumerate(nodes)}
    assert all(cells[i][j] == cells[j][i] for i in range(len(nodes)) for j in range(len(nodes)))
    assert cells[at["gpu-4"]][at["gpu-5"]] == pytest.approx(0.4)  # the slow node's pair
    tested = {frozenset(t["members"]) for t in section["tests"] if len(t["members"]) == 2}
    for i, a in enumerate(nodes):
        for j, b in enumerate(nodes):
            assert (cells[i][j] is None) == (i == j or frozenset((a, b)) not in tested)


def test_the_terminal_shows_the_table_with_each_culprit_s_state() -> None:
    text = terminal(document(answer()))
    assert "Pairs tested in the isolation rounds (allreduce busbw)" in text
    assert "gpu-5 (slow)" in text and "400 MB/s" in text and "2.20 GB/s" in text


def test_the_page_shades_each_pair_against_the_best() -> None:
    page = render_document_html(document(answer()))
    table = page[page.index('<table id="pairs">') :]
    table = table[: table.index("</table>")]
    assert "<th>gpu-5 (slow)</th>" in table
    assert 'class="num heat4">2.20 GB/s<' in table and 'class="num heat0">400 MB/s<' in table


@pytest.mark.parametrize(
    "isolation",
    [None, [], "x", {"matrix": None}, {"matrix": {"nodes": ["a", "b"], "cells": [[1]]}},
     {"matrix": {"nodes": ["a"], "cells": "x"}}, {"matrix": {"nodes": "ab", "cells": [[1], [2]]}},
     {"matrix": {"nodes": ["a", "b"], "cells": [[None, math.inf], [True, "\x1b[31m" * 50]]},
      "nodes": [1, {"node": None}]}],
)  # fmt: skip
def test_a_section_of_the_wrong_shape_shows_nothing_or_shows_it_bounded(isolation: object) -> None:
    doc = document(isolation)
    matrix = pair_matrix(doc)
    if matrix is not None:  # the one square: shown, its oddities as words of at most 12
        assert [c.text for c in matrix.rows[0]] == ["—", "inf"]
        assert len(matrix.rows[1][1].text) == 1 and len(matrix.rows[1][0].text) <= 12
    terminal(doc)
    render_document_html(doc)
