"""The document's ``isolation`` section: the isolation rounds' answer as the views show it
(docs/report.md#isolation): the state per node and per link, every group's test, and the pairwise
busbw as a matrix (the terminal's table, the page's heatmap), computed here once."""

from __future__ import annotations

from typing import Any

from nccldoctor.facts.isolation import Isolation


def isolation_section(isolation: Isolation) -> dict[str, Any]:
    return {
        "why": isolation.why_run,
        "rounds": isolation.rounds,
        "median_GBps": isolation.median_GBps,
        "network_wide": isolation.network_wide,
        "undecided": list(isolation.undecided),
        "interfaces": dict(isolation.interfaces),
        "budget_GBps": dict(isolation.budget_GBps),
        "nodes": [
            {"node": v.node, "state": v.state, "rounds": list(v.rounds), "why": v.why}
            for v in isolation.nodes
        ],
        "links": [
            {"nodes": list(v.nodes), "state": v.state, "rounds": list(v.rounds), "why": v.why}
            for v in isolation.links
        ],
        "tests": [
            {
                "round": t.round,
                "members": list(t.members),
                "status": t.status,
                "busbw_GBps": t.busbw_GBps,
                "rates": [[r.size_bytes, r.busbw_GBps] for r in t.rates],
                "init_s": t.init_s,
                "absent": list(t.absent),
                "detail": t.detail,
            }
            for t in isolation.tests
        ],
        "matrix": pair_matrix(isolation),
    }


def pair_matrix(isolation: Isolation) -> dict[str, Any]:
    """``{"nodes": [...], "cells": [[cell, ...], ...]}``, symmetric: a pair's largest busbw
    (GB/s) where a test of the pair passed, else how its last test ended ("error", "timeout",
    "absent"), None where the pair was never tested alone."""
    nodes = [v.node for v in isolation.nodes]
    at = {n: i for i, n in enumerate(nodes)}
    cells: list[list[Any]] = [[None] * len(nodes) for _ in nodes]
    for test in isolation.tests:
        if len(test.members) != 2 or not all(m in at for m in test.members):
            continue
        i, j = (at[m] for m in test.members)
        cell: Any = test.busbw_GBps if test.status == "ok" else test.status
        old = cells[i][j]
        if isinstance(old, (int, float)) and isinstance(cell, (int, float)):
            cell = max(old, cell)
        elif isinstance(old, (int, float)):
            cell = old  # a pass is kept over a later failure's word
        cells[i][j] = cells[j][i] = cell
    return {"nodes": nodes, "cells": cells}
