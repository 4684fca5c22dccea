"""What the members of a round wrote, read by the master into each group's test: the group's
status from its members' results (absent, an error, late, ok), and its busbw per size from the
slowest member's time, as nccl-tests combines ranks' times. A member whose result was refused
(messages.MemberResult.from_json) counts as one that never answered, with why."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from nccldoctor.cluster.isolate.messages import MemberResult
from nccldoctor.facts.isolation import GroupTest, SizeRate

# A group whose members took their places and are not past the first op (connections made, one
# exact allreduce) this many times later than the slowest group that passed was, and at least
# MIN_STALL_S after the round's call, has stalled: a blocked pair never connects, an MTU trap
# never gets a frame through, while a slow link is past its first op in its own time.
STALL_FACTOR = 4.0
MIN_STALL_S = 2.0


def group_test(
    number: int,
    group: tuple[str, ...],
    results: Mapping[str, MemberResult],
    took: set[str],
    refused: Mapping[str, str] | None = None,
) -> GroupTest:
    """``refused``: why the master read no result from a member that wrote one."""
    absent = tuple(m for m in group if m not in took)
    if absent:
        return GroupTest(number, group, "absent", absent=absent)
    mine = [results.get(m) for m in group]
    inits = [r.init_s for r in mine if r and r.init_s is not None]
    init = max(inits) if inits else None
    refused = refused or {}
    unread = [f"{m}'s result was refused: {refused[m]}" for m, r in zip(group, mine, strict=True)
              if r is None and m in refused]  # fmt: skip
    late = [m for m, r in zip(group, mine, strict=True)
            if (r is None and m not in refused) or (r and r.status == "timeout")]  # fmt: skip
    errors = [f"{m}: {r.error}" for m, r in zip(group, mine, strict=True)
              if r and r.status == "error"]  # fmt: skip
    if errors:
        return GroupTest(number, group, "error", init_s=init, detail="; ".join(errors)[:500])
    if late or unread:
        passed = [f"{', '.join(late)} passed the group's deadline"] if late else []
        detail = "; ".join(passed + unread)[:500]
        return GroupTest(number, group, "timeout", init_s=init, detail=detail)
    return GroupTest(number, group, "ok", rates(group, mine), init_s=init)


def rates(group: tuple[str, ...], results: Sequence[MemberResult | None]) -> tuple[SizeRate, ...]:
    """busbw per size from the slowest member's time, as nccl-tests combines ranks' times."""
    seconds: dict[int, float] = {}
    for result in results:
        for size, s in result.seconds if result else ():
            seconds[size] = max(seconds.get(size, 0.0), s)
    n = len(group)
    factor = 2 * (n - 1) / n
    return tuple(
        SizeRate(size, round(size / 1e9 / s * factor, 4))
        for size, s in sorted(seconds.items())
        if s > 0
    )


@dataclass
class Pace:
    """How soon each group that passed was past its first op (seconds from its round's call, as
    the master saw it), over the run's rounds so far."""

    firsts: list[float] = field(default_factory=list)

    def stall_s(self, deadline_s: float) -> float | None:
        """How long a group may take to its first op before it has stalled; None while no group
        passed, or when that is no sooner than the group's deadline."""
        if not self.firsts:
            return None
        limit = max(MIN_STALL_S, STALL_FACTOR * max(self.firsts))
        return limit if limit < deadline_s else None

    def stalled(self, waiting: Sequence[str], after_s: float) -> str:
        """Why a group's test ended with ``waiting`` members not past the first op."""
        return (
            f"{', '.join(waiting)} not past the first op {after_s:.1f} s after the round's call; "
            f"the groups that passed were within {max(self.firsts):.1f} s"
        )
