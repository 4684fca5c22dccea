"""The report sections of one node's workers' results (contract: ``bandwidth``, ``mnist``); the
``ranks`` and ``phases`` rows are the agent's reading of the rank folders (agent/outcomes.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nccldoctor.facts.ranks import RankResult
from nccldoctor.facts.serde import to_dict


def bandwidth_section(
    results: Mapping[int, RankResult], backend: str, nranks: int
) -> dict[str, Any]:
    """rank 0's combined table (contract: max time over ranks before bandwidth is computed)."""
    first = results.get(0)
    return {
        "backend": backend,
        "nranks": nranks,
        "combine": "max",
        "rows": to_dict(first.bandwidth) if first else [],
        "tcp_wire_Gbitps": {},
    }


def mnist_section(results: Mapping[int, RankResult]) -> dict[str, Any] | None:
    first = results.get(0) or next(iter(results.values()), None)
    if first is None or first.mnist is None:
        return None
    section = {k: v for k, v in to_dict(first.mnist).items() if k != "param_checksum"}
    section["params_identical"] = first.params_identical
    return section
