"""The report sections of one node's workers' results (contract: ``bandwidth``, ``mnist``); the
``ranks`` and ``phases`` rows are the agent's reading of the rank folders (agent/outcomes.py)."""

from __future__ import annotations

from typing import Any


def bandwidth_section(results: dict[int, dict], backend: str, nranks: int) -> dict[str, Any]:
    """rank 0's combined table (contract: max time over ranks before bandwidth is computed)."""
    rows = (results.get(0) or {}).get("bandwidth") or []
    return {
        "backend": backend,
        "nranks": nranks,
        "combine": "max",
        "rows": rows,
        "tcp_wire_Gbitps": {},
    }


def mnist_section(results: dict[int, dict]) -> dict[str, Any] | None:
    first = results.get(0) or next(iter(results.values()), None)
    if not first or not first.get("mnist"):
        return None
    section = {k: v for k, v in first["mnist"].items() if k != "param_checksum"}
    section["params_identical"] = first.get("params_identical")
    return section
