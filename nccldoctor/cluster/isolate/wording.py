"""How the scheduler's answer words the rounds: which rounds, and each partner with how its group
ended ("gpu-2 (round 1, error); gpu-7 (round 2, 40 MB/s)")."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from nccldoctor.facts.isolation import GroupTest
from nccldoctor.units import format_GBps


def rounds_text(numbers: Iterable[int]) -> str:
    return ", ".join(str(n) for n in sorted(set(numbers))) or "none"


def partners_text(
    node: str, tests: Sequence[GroupTest], judged: Callable[[GroupTest], str] | None = None
) -> str:
    """Each test's other members, its round and how it ended (as ``judged`` says, else its
    status), a rate where it completed."""
    parts = []
    for t in tests:
        others = ", ".join(m for m in t.members if m != node) or node
        how = judged(t) if judged else t.status
        rate = t.busbw_GBps
        shown = format_GBps(rate) if how in ("ok", "slow") and rate is not None else how
        parts.append(f"{others} (round {t.round}, {shown})")
    return "; ".join(parts)
