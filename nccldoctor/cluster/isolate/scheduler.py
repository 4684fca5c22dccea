"""Which groups to test next, or what the rounds showed: a pure function of the nodes and the
group tests so far, run alike by `check` and by the simulation of ``bench/isolate.py``. The plan
(docs/design.md#isolation): pairing; confirmation of a failed pair's nodes against nodes that
passed (nobody is assumed good, the master included); the bisection of a failed group no node
explains, for the link in it; the others tested together once a fault is found. A node that fails
with two partners that passed with others (and fail with nobody else) is at fault; a pair that
fails while both ends pass with others is a faulty link; a member that never takes its place is
unreachable. A group fails when a member errs or passes the deadline, or when its busbw is below
SLOW_SHARE of the reference (cluster/isolate/reference.py: the others' median, without the
suspect) and, where the link rates are known, of the slower member's link:
a group that passes below what it should reach counts as failed (NVIDIA's Cluster Readiness
Engine). Every group of two rounds failing, no node common to them all, is network-wide.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from nccldoctor.cluster.isolate.reference import SLOW_SHARE, References
from nccldoctor.cluster.isolate.wording import partners_text, rounds_text
from nccldoctor.facts.isolation import (
    GroupTest,
    Isolation,
    LinkState,
    LinkVerdict,
    NodeState,
    NodeVerdict,
)

CONFIRMATIONS = 2  # failures with distinct cleared partners that make a node faulty
NETWORK_WIDE_ROUNDS = 2  # rounds in which every group failed, before blaming the network

Judged = Literal["ok", "slow", "error", "timeout", "absent"]
FAILED = ("slow", "error", "timeout")


@dataclass(frozen=True)
class Round:
    """The next round: these groups, tested at once."""

    number: int
    groups: tuple[tuple[str, ...], ...]


def max_rounds(n: int) -> int:
    """The rounds the scheduler allows itself before it says what is still undecided: a link's
    search takes up to two rounds a halving of the failed group, after pairing."""
    return 2 * math.ceil(math.log2(max(n, 2))) + 4


def next_step(
    nodes: Sequence[str],
    tests: Sequence[GroupTest],
    budget_GBps: Mapping[str, float] | None = None,
    limit: int | None = None,
) -> Round | Isolation:
    """The next round to run, or the answer when the rounds so far settle every node (or nothing
    more can be learned). ``budget_GBps``: each node's nominal link rate, where known."""
    return _State(nodes, tests, budget_GBps or {}, limit).step()


class _State:
    def __init__(self, nodes: Sequence[str], tests: Sequence[GroupTest],
                 budget: Mapping[str, float], limit: int | None) -> None:  # fmt: skip
        self.nodes = sorted(dict.fromkeys(nodes))
        self.tests = [t for t in tests if t.members]
        self.budget = budget
        self.done_rounds = max((t.round for t in self.tests), default=0)
        self.limit = max_rounds(len(self.nodes)) if limit is None else limit
        self.references = References(self.tests)
        self.median = self.references.median(2)
        self.judged = [(t, self._judge(t)) for t in self.tests]
        self.of: dict[str, list[tuple[GroupTest, Judged]]] = {n: [] for n in self.nodes}
        for t, j in self.judged:
            for m in t.members:
                self.of.setdefault(m, []).append((t, j))
        self.unreachable = {m for t in self.tests for m in t.absent}
        self.cleared = {n for n, rows in self.of.items() if any(j == "ok" for _, j in rows)}
        self.cleared -= self.unreachable
        self.tested = {frozenset(t.members) for t in self.tests}
        self._suspects: dict[str, bool] = {}
        self._links = self.link_verdicts()

    # -- judging one group ----------------------------------------------------------------------
    def _judge(self, t: GroupTest) -> Judged:
        if t.absent or t.status == "absent":
            return "absent"
        if t.status != "ok":
            return t.status
        # A size tested once is held to the pairs' reference where link rates are known (NCCL,
        # whose busbw does not fall with the group's size); gloo's does (CPU-bound), so not there
        rate, size = t.busbw_GBps, len(t.members)
        sizes = (size, 2) if self.budget else (size,)
        if rate is None or not self.references.slow(t.members, rate, sizes):
            return "ok"
        links = [self.budget[m] for m in t.members if m in self.budget]
        return "slow" if not links or rate < SLOW_SHARE * min(links) else "ok"

    # -- what the tests show --------------------------------------------------------------------
    def failed_pairs(self, node: str) -> list[tuple[GroupTest, Judged]]:
        """The failed pairs of ``node`` whose partner passed elsewhere (a larger group that
        failed may hold a faulty link between the others: it shows nothing against one node).
        Beside a pair that erred or timed out, a pair slow in one test only is left out until it
        is slow again: one noisy measurement (a loaded machine's) and a timeout the partner
        caused would otherwise blame the node."""
        rows = [
            (t, j)
            for t, j in self.of.get(node, [])
            if j in FAILED
            and len(t.members) == 2
            and all(m in self.cleared for m in t.members if m != node)
        ]
        if all(j == "slow" for _, j in rows):
            return rows  # slow with each partner: a measurement with each, a slow node's sign
        return [(t, j) for t, j in rows if j != "slow" or self.slow_twice(t.members)]

    def slow_twice(self, pair: Sequence[str]) -> bool:
        """Slow in two tests of this pair and never passed: more than one noisy measurement."""
        members = set(pair)
        slow = [t for t, j in self.judged if j == "slow" and set(t.members) == members]
        return len(slow) >= 2 and not self.passes(pair)

    def suspect(self, node: str) -> bool:
        """Failed with two partners or more that passed elsewhere: the node, or each link."""
        if node not in self._suspects:
            partners = {m for t, _ in self.failed_pairs(node) for m in t.members if m != node}
            self._suspects[node] = len(partners) >= CONFIRMATIONS
        return self._suspects[node]

    def shown_against(self, node: str) -> list[tuple[GroupTest, Judged]]:
        """The failed pairs of ``node`` whose partner passed elsewhere and is no suspect
        itself: a failure with a node that fails with others too shows nothing of this one."""
        return [
            (t, j)
            for t, j in self.failed_pairs(node)
            if not any(self.suspect(m) for m in t.members if m != node)
        ]

    def decided(self, node: str) -> NodeState | None:
        """A node that failed with two partners that passed with others is at fault, even where
        it passed with a third (a path that fails towards most nodes, not all: an MTU that
        only some peers' frames exceed). A node that passed and is still a suspect waits for
        another partner."""
        if node in self.unreachable:
            return "unreachable"
        shown = self.shown_against(node)
        partners = {m for t, _ in shown for m in t.members if m != node}
        if len(partners) >= CONFIRMATIONS:
            return "slow" if all(j == "slow" for _, j in shown) else "faulty"
        return "ok" if node in self.cleared and not self.suspect(node) else None

    def network_wide(self) -> str | None:
        """Every group of NETWORK_WIDE_ROUNDS rounds or more failed, no node ever passed, and no
        one node was in them all."""
        if self.cleared or self.done_rounds < NETWORK_WIDE_ROUNDS:
            return None
        present = [(t, j) for t, j in self.judged if j != "absent"]
        if not present or any(j not in FAILED for _, j in present):
            return None
        if set.intersection(*(set(t.members) for t, _ in present)):
            return None  # one node in every failed group explains them all: test on
        kinds = sorted({j for _, j in present})
        return (
            f"all {len(present)} groups of rounds 1–{self.done_rounds} failed "
            f"({', '.join(kinds)}), each node with different partners: the fault is shared "
            "by every node (the network, or the software every node runs), not one node's"
        )

    # -- the next round -------------------------------------------------------------------------
    def step(self) -> Round | Isolation:
        if len(self.nodes) < 2:
            return self.answer(["fewer than two nodes: there is no pair to test"])
        wide = self.network_wide()
        if wide:
            return self.answer([], network_wide=wide)
        pending = [n for n in self.nodes if self.decided(n) is None]
        if self.done_rounds >= self.limit and (pending or self.unexplained() or self.slow_once()):
            return self.answer([f"not decided within {self.limit} rounds"])
        groups = self.pair(pending) if pending else []
        busy = {m for g in groups for m in g}
        for pair in self.slow_once():
            if not busy & set(pair):
                groups.append(pair)
                busy.update(pair)
        if groups:
            return Round(self.done_rounds + 1, tuple(groups))
        given_up = []
        for failed, members in self.unexplained():
            groups = self.split(members) or self.retest(failed)
            if groups:
                return Round(self.done_rounds + 1, tuple(groups))
            given_up.append(
                f"the group {', '.join(failed.members)} (round {failed.round}) failed while "
                "every part of it passed: a fault that needs them all at once"
            )
        rest = self.remaining()
        if rest and not given_up:
            return Round(self.done_rounds + 1, (rest,))
        return self.answer(given_up)

    def remaining(self) -> tuple[str, ...]:
        """When nodes or links were found at fault: the other nodes (one end of each faulty
        link left out), to be tested together once, since a fault found may hide another among
        them; empty when that is known already."""
        if all(self.decided(n) == "ok" for n in self.nodes) and not self._links:
            return ()
        left_out = {v.nodes[1] for v in self._links}
        ok = [n for n in self.nodes if self.decided(n) == "ok" and n not in left_out]
        if len(ok) < 3 or frozenset(ok) in self.tested or self.passes(ok):
            return ()
        return tuple(ok)

    # -- a failed group no member's state explains: bisect it for the link -------------------
    def unexplained(self) -> list[tuple[GroupTest, list[str]]]:
        """Failed groups of three or more that no member's state and no link found explains,
        each with its members that passed elsewhere (where the link must be), smallest first.
        A slow or faulty node explains a slow group; an error or a timeout takes a faulty or
        unreachable node, or a faulty link."""
        bad_links = {v.nodes: v.state for v in self._links}
        rows = []
        for t, j in self.judged:
            if j not in FAILED or len(t.members) <= 2 or (j == "slow" and self.passes(t.members)):
                continue  # a pair, or slow once and then passed: noise
            states = {self.decided(m) for m in t.members}
            explains = {"faulty", "slow"} if j == "slow" else {"faulty", "unreachable"}
            links = {bad_links.get((a, b)) for a in t.members for b in t.members}
            if states & explains or links & (explains | {"faulty"}):
                continue
            rows.append((t, [m for m in t.members if m in self.cleared]))
        return sorted(rows, key=lambda row: (len(row[1]), row[0].round))

    def split(self, members: list[str]) -> list[tuple[str, ...]]:
        """The next groups inside a failed group's ``members``: its halves, then the halves'
        quarters crossed one way, then the other way, which covers every pair; a part that
        fails becomes the smallest failed group and is split in turn, so a faulty link is found
        in one or two rounds a halving."""
        g1, g2 = members[: len(members) // 2], members[len(members) // 2 :]
        a1, a2 = g1[: len(g1) // 2], g1[len(g1) // 2 :]
        b1, b2 = g2[: len(g2) // 2], g2[len(g2) // 2 :]
        for candidates in ([g1, g2], [a1 + b1, a2 + b2], [a1 + b2, a2 + b1]):
            groups = [
                tuple(sorted(g))
                for g in candidates
                if len(g) >= 2 and frozenset(g) not in self.tested and not self.passes(g)
            ]
            if groups:
                return groups
        return []

    def retest(self, failed: GroupTest) -> list[tuple[str, ...]]:
        """A group slow once while each part passed: noise, or a fault that needs them all."""
        once = sum(set(t.members) == set(failed.members) for t in self.tests) < 2
        return [failed.members] if once and self._judged_of(failed) == "slow" else []

    def passes(self, group: Sequence[str]) -> bool:
        """Whether a test that passed held every member of ``group``."""
        members = set(group)
        return any(j == "ok" and members <= set(t.members) for t, j in self.judged)

    def pair(self, pending: list[str]) -> list[tuple[str, ...]]:
        """Suspects first, each with a cleared partner where one is free, else with another
        pending node; then the untested among themselves. Never a pair tested before."""
        suspects = [n for n in pending if self.of.get(n)]
        untested = [n for n in pending if not self.of.get(n)]
        busy: set[str] = set()
        groups: list[tuple[str, ...]] = []
        cleared = sorted(self.cleared)
        spare = iter(cleared)  # cleared nodes are handed out in order, each once a round
        leftover: list[str] = []
        for node in suspects:
            partner = self._first_free(node, spare, busy) or self._first_free(
                node, iter(cleared), busy
            )
            if partner is None:
                leftover.append(node)
                continue
            busy.update((node, partner))
            groups.append(tuple(sorted((node, partner))))
        # the rest: suspects with each other or with the untested, the untested in pairs
        rest = [n for n in leftover + untested if n not in busy]
        for i, node in enumerate(rest):
            if node in busy:
                continue
            partner = self._first_free(node, iter(rest[i + 1 :]), busy)
            if partner is None and node in untested:
                partner = self._first_free(node, iter(cleared), busy)
            if partner is None:
                continue
            busy.update((node, partner))
            groups.append(tuple(sorted((node, partner))))
        return groups

    def _first_free(self, node: str, candidates: Iterable[str], busy: set[str]) -> str | None:
        for other in candidates:
            if other == node or other in busy or other in self.unreachable:
                continue
            if frozenset((node, other)) not in self.tested:
                return other
        return None

    # -- the answer -----------------------------------------------------------------------------
    def answer(self, undecided: list[str], network_wide: str | None = None) -> Isolation:
        verdicts = [self.node_verdict(n, network_wide) for n in self.nodes]
        links = [] if network_wide else self._links
        why = list(undecided)
        why += [f"{v.node}: {v.why}" for v in verdicts if v.state == "undecided"]
        return Isolation(
            nodes=tuple(verdicts),
            links=tuple(links),
            tests=tuple(self.tests),
            rounds=self.done_rounds,
            median_GBps=self.median,
            network_wide=network_wide,
            undecided=tuple(why),
            budget_GBps=dict(self.budget),
        )

    def node_verdict(self, node: str, network_wide: str | None) -> NodeVerdict:
        rows = self.of.get(node, [])
        rounds = tuple(t.round for t, _ in rows)
        state = self.decided(node)
        if state == "unreachable":
            missed = sorted({t.round for t, _ in rows if node in t.absent})
            took = sorted({t.round for t, _ in rows if node not in t.absent})
            said = f", after taking part in round(s) {rounds_text(took)}" if took else ""
            why = f"never took its place in round(s) {rounds_text(missed)}{said}"
            return NodeVerdict(node, "unreachable", tuple(missed), why)
        if state == "ok":
            passed = [t for t, j in rows if j == "ok"]
            why = partners_text(node, passed)
            return NodeVerdict(node, "ok", tuple(t.round for t in passed), why)
        if state is not None:
            shown = self.shown_against(node)
            failed = partners_text(node, [t for t, _ in shown], self._judged_of)
            why = f"failed with {failed}, partners that passed with others"
            passed = [t for t, j in rows if j == "ok"]
            if passed:
                why += f"; passed only with {partners_text(node, passed)}"
            return NodeVerdict(node, state, tuple(t.round for t, _ in shown), why)
        if network_wide:
            return NodeVerdict(node, "undecided", rounds, "every group failed alike")
        if not rows:
            return NodeVerdict(node, "undecided", (), "was never tested")
        failed_rows = [t for t, j in rows if j in FAILED]
        shown = self.shown_against(node)
        if shown:
            why = (
                f"failed only with {partners_text(node, [t for t, _ in shown], self._judged_of)}, and "
                "no other partner that passed was left to tell the node from the link"
            )
        elif failed_rows:
            why = (
                f"failed with {partners_text(node, failed_rows, self._judged_of)}, partners that "
                "never passed either"
            )
        else:
            why = "its partners never took their place"
        return NodeVerdict(node, "undecided", rounds, why)

    def _judged_of(self, t: GroupTest) -> str:
        return next(j for s, j in self.judged if s is t)

    def pair_failures(self) -> dict[tuple[str, str], list[tuple[GroupTest, Judged]]]:
        """The failed pairs whose ends both passed elsewhere and are at fault neither."""
        links: dict[tuple[str, str], list[tuple[GroupTest, Judged]]] = {}
        for t, j in self.judged:
            if j not in FAILED or len(t.members) != 2 or not set(t.members) <= self.cleared:
                continue
            if not any(self.decided(m) in ("faulty", "slow") for m in t.members):
                links.setdefault((t.members[0], t.members[1]), []).append((t, j))
        return links

    def slow_once(self) -> list[tuple[str, str]]:
        """Pairs slow in one test only, never passed: a slow link, or one noisy measurement
        (a loaded machine's); tested once more before a link is blamed for slowness."""
        return [
            pair
            for pair, rows in self.pair_failures().items()
            if all(j == "slow" for _, j in rows) and len(rows) < 2 and not self.passes(pair)
        ]

    def link_verdicts(self) -> list[LinkVerdict]:
        verdicts = []
        for (a, b), rows in sorted(self.pair_failures().items()):
            if all(j == "slow" for _, j in rows) and (len(rows) < 2 or self.passes((a, b))):
                continue  # slow once (to be retested), or slow once and then passed: noise
            state: LinkState = "slow" if all(j == "slow" for _, j in rows) else "faulty"
            passed_a = [t.round for t, j in self.of[a] if j == "ok"]
            passed_b = [t.round for t, j in self.of[b] if j == "ok"]
            how = ", ".join(sorted({j for _, j in rows}))
            why = (
                f"{a} and {b} failed together in round(s) {rounds_text(t.round for t, _ in rows)} "
                f"({how}), while {a} passed in round(s) {rounds_text(passed_a)} and {b} in round(s) "
                f"{rounds_text(passed_b)} with other partners"
            )
            verdicts.append(LinkVerdict((a, b), state, tuple(t.round for t, _ in rows), why))
        return verdicts
