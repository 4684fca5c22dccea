"""What the members of a round wrote, read by the master into each group's test: a member's result
checked before it counts (whoever reaches the store may have written it), the group's status from
its members' (absent, an error, late, ok), and its busbw per size from the slowest member's time,
as nccl-tests combines ranks' times."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nccldoctor.cluster.isolate import grouptest
from nccldoctor.facts.isolation import GroupTest, SizeRate


def group_test(
    number: int, group: tuple[str, ...], results: Mapping[str, dict[str, Any]], took: set[str]
) -> GroupTest:
    absent = tuple(m for m in group if m not in took)
    if absent:
        return GroupTest(number, group, "absent", absent=absent)
    mine = [results.get(m) for m in group]
    inits = [r["init_s"] for r in mine if r and isinstance(r.get("init_s"), (int, float))]
    init = max(inits) if inits else None
    late = [m for m, r in zip(group, mine, strict=True) if r is None or r["status"] == "timeout"]
    errors = [f"{m}: {r['error']}" for m, r in zip(group, mine, strict=True)
              if r and r["status"] == "error"]  # fmt: skip
    if errors:
        return GroupTest(number, group, "error", init_s=init, detail="; ".join(errors)[:500])
    if late:
        detail = f"{', '.join(late)} passed the group's deadline"
        return GroupTest(number, group, "timeout", init_s=init, detail=detail)
    return GroupTest(number, group, "ok", rates(group, mine), init_s=init)


def rates(group: tuple[str, ...], results: Sequence[dict[str, Any] | None]) -> tuple[SizeRate, ...]:
    """busbw per size from the slowest member's time, as nccl-tests combines ranks' times."""
    seconds: dict[int, float] = {}
    for result in results:
        for size, s in (result or {}).get("seconds", []):
            seconds[size] = max(seconds.get(size, 0.0), s)
    n = len(group)
    factor = 2 * (n - 1) / n
    return tuple(
        SizeRate(size, round(size / 1e9 / s * factor, 4))
        for size, s in sorted(seconds.items())
        if s > 0
    )


def is_result(value: Any) -> bool:
    if not isinstance(value, dict) or value.get("status") not in ("ok", "error", "timeout"):
        return False
    rows = value.get("seconds")
    if not isinstance(rows, list) or len(rows) > len(grouptest.SIZES):
        return False
    if not all(
        isinstance(r, list) and len(r) == 2 and isinstance(r[0], int) and 0 < r[0] <= 1 << 40
        and isinstance(r[1], (int, float)) and r[1] >= 0
        for r in rows
    ):  # fmt: skip
        return False
    value["error"] = str(value.get("error", ""))[: grouptest.ERROR_CHARS]
    return value.get("init_s") is None or isinstance(value["init_s"], (int, float))
