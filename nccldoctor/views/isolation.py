"""The isolation rounds' pairwise busbw (the document's ``isolation.matrix``) as the views show it:
a table in the terminal, a heatmap on the page. Read from a stranger's document as much as from
ours: anything that is not a list of names and a square of cells shows nothing."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from nccldoctor.report.shape import section, values
from nccldoctor.units import format_GBps

MAX_TERMINAL_NODES = 16  # wider than a terminal beyond this: the page and the JSON hold it all
MAX_PAGE_NODES = 256


@dataclass(frozen=True)
class Cell:
    text: str  # "2.20 GB/s", "error", "" (never tested alone), "—" (itself)
    kind: str  # "rate", "failed", "untested", "self"
    share: float  # a rate against the matrix's best, 0..1 (the heatmap's shade)

    @property
    def css(self) -> str:
        """The page's class: heat0 (far below the best pair) to heat4 (the best), or the kind."""
        if self.kind != "rate":
            return f"pair-{self.kind}"
        return f"heat{min(4, int(self.share * 5))}"


@dataclass(frozen=True)
class Matrix:
    nodes: list[str]
    rows: list[list[Cell]]
    states: dict[str, str]  # node -> its state in the rounds' answer


def pair_matrix(document: dict[str, Any], limit: int = MAX_PAGE_NODES) -> Matrix | None:
    """None when the document has no isolation matrix, or more than ``limit`` nodes."""
    isolation = section(document, "isolation")
    matrix = section(isolation, "matrix")
    nodes = [str(n) for n in values(matrix.get("nodes"))]
    cells = values(matrix.get("cells"))
    if not nodes or len(nodes) > limit or len(cells) != len(nodes):
        return None
    if not all(isinstance(row, list) and len(row) == len(nodes) for row in cells):
        return None
    rates = [c for row in cells for c in row if _rate(c)]
    best = max(rates, default=0.0)
    rows = [
        [_cell(cells[i][j], i == j, best) for j in range(len(nodes))] for i in range(len(nodes))
    ]
    states = {
        str(v.get("node")): str(v.get("state"))
        for v in values(isolation.get("nodes"))
        if isinstance(v, dict)
    }
    return Matrix(nodes, rows, states)


def _rate(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _cell(value: Any, itself: bool, best: float) -> Cell:
    if itself:
        return Cell("—", "self", 0.0)
    if _rate(value):
        share = max(0.0, min(1.0, value / best)) if best > 0 else 0.0
        return Cell(format_GBps(value), "rate", share)
    if value is None:
        return Cell("", "untested", 0.0)
    return Cell(str(value)[:12], "failed", 0.0)


def terminal_table(matrix: Matrix) -> Any:
    """A rich Table: a row and a column per node, a pair's busbw (or how it failed) in each cell;
    a node the rounds found at fault carries its state beside its name."""
    from rich.table import Table
    from rich.text import Text

    table = Table(
        title="Pairs tested in the isolation rounds (allreduce busbw)", title_justify="left"
    )
    table.add_column("")
    for node in matrix.nodes:
        table.add_column(node, justify="right")
    for node, row in zip(matrix.nodes, matrix.rows, strict=True):
        state = matrix.states.get(node, "")
        name = f"{node} ({state})" if state and state != "ok" else node
        table.add_row(name, *(Text(c.text, style=_style(c)) for c in row))
    return table


def _style(cell: Cell) -> str:
    if cell.kind == "failed":
        return "red"
    if cell.kind != "rate":
        return "dim" if cell.kind == "self" else ""
    return "red" if cell.share < 1 / 3 else "yellow" if cell.share < 2 / 3 else "green"
