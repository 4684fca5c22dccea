"""What a group's busbw is held to, for the scheduler's slowness test: per group size, the median
over the other nodes of each one's best busbw in the groups that passed without the node under
suspicion. A node's own groups never set its reference: a slow master whose pairs are the only
ones most nodes passed would otherwise be held to its own rate and pass (nobody is assumed good,
the master included). Each member of a group is the suspect in turn, and the group is held to the
highest of those references."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from nccldoctor.facts.isolation import GroupTest

SLOW_SHARE = 1 / 3  # a group this far below the others' median busbw is slow


class References:
    def __init__(self, tests: Sequence[GroupTest]) -> None:
        # per group size: node -> its passed groups of that size, fastest first
        self.passed: dict[int, dict[str, list[tuple[float, tuple[str, ...]]]]] = {}
        self.counts: dict[int, int] = {}
        for t in tests:
            if t.status == "ok" and t.busbw_GBps:
                self.counts[len(t.members)] = self.counts.get(len(t.members), 0) + 1
                row = self.passed.setdefault(len(t.members), {})
                for m in t.members:
                    row.setdefault(m, []).append((t.busbw_GBps, t.members))
        for row in self.passed.values():
            for groups in row.values():
                groups.sort(key=lambda group: -group[0])
        self.top = {k: max(g[0][0] for g in row.values()) for k, row in self.passed.items()}
        self._without: dict[tuple[str, int], float | None] = {}

    def median(self, size: int) -> float | None:
        """The median over all nodes of each node's best busbw at ``size`` (what the report
        shows), where more than one group of that size passed."""
        if self.counts.get(size, 0) < 2:
            return None
        return statistics.median(groups[0][0] for groups in self.passed[size].values())

    def without(self, node: str, size: int) -> float | None:
        """The median over the nodes other than ``node`` of their best busbw in passed groups of
        ``size`` that ``node`` was not in; None where no such group passed."""
        key = (node, size)
        if key not in self._without:
            bests = [
                next((rate for rate, members in groups if node not in members), None)
                for other, groups in self.passed.get(size, {}).items()
                if other != node
            ]
            rates = [rate for rate in bests if rate is not None]
            self._without[key] = statistics.median(rates) if rates else None
        return self._without[key]

    def slow(self, group: Sequence[str], rate: float, sizes: Sequence[int]) -> bool:
        """Whether ``rate`` is below SLOW_SHARE of the group's reference: the first of ``sizes``
        that has one (the group's own size, then a fallback), each member the suspect in turn."""
        if rate >= SLOW_SHARE * max((self.top.get(k, 0.0) for k in sizes), default=0.0):
            return False  # above a share of the fastest group: no reference can make it slow
        for size in sizes:
            references = [r for m in group if (r := self.without(m, size)) is not None]
            if references:
                return rate < SLOW_SHARE * max(references)
        return False
