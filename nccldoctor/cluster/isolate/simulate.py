"""The scheduler against a model of a cluster: which nodes and links are faulty or slow, which
nodes stop answering from which round. No process runs; each group's test is what the model says
it would measure. Used by bench/isolate.py and the property tests of the scheduler."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from nccldoctor.cluster.isolate.scheduler import Round, next_step
from nccldoctor.facts.isolation import GroupTest, Isolation, SizeRate

HEALTHY_GBPS = 2.2
SLOW_GBPS = 0.4
LINK_GBPS = 3.0  # what every node's link carries (an NCCL cluster: its busbw holds at any size)
SIZE = 4 << 20


@dataclass(frozen=True)
class Cluster:
    nodes: Sequence[str]
    faulty: Collection[str] = ()  # err with every partner
    slow: Collection[str] = ()  # pass, at SLOW_GBPS
    bad_links: Collection[frozenset[str]] = ()  # the pair errs; each end passes with others
    slow_links: Collection[frozenset[str]] = ()
    gone_from: Mapping[str, int] = field(default_factory=dict)  # node -> first round it misses
    everything_fails: bool = False  # the network: every group errs

    def test(self, number: int, members: tuple[str, ...]) -> GroupTest:
        absent = tuple(m for m in members if self.gone_from.get(m, 1 << 30) <= number)
        if absent:
            return GroupTest(number, members, "absent", absent=absent)
        inside = set(members)
        links = lambda kind: any(link <= inside for link in kind)  # noqa: E731
        if self.everything_fails or links(self.bad_links) or inside & set(self.faulty):
            return GroupTest(number, members, "error", detail="connection reset")
        slow = links(self.slow_links) or bool(inside & set(self.slow))
        rate = SLOW_GBPS if slow else HEALTHY_GBPS
        return GroupTest(number, members, "ok", (SizeRate(SIZE, rate),), init_s=0.1)


def run(cluster: Cluster, budget: Mapping[str, float] | None = None) -> Isolation:
    """Rounds until the scheduler answers, after the all-node run (round 0) that failed; each
    node's link rated LINK_GBPS unless ``budget`` says otherwise."""
    budget = {n: LINK_GBPS for n in cluster.nodes} if budget is None else budget
    everyone = cluster.test(0, tuple(sorted(cluster.nodes)))
    if everyone.busbw_GBps == SLOW_GBPS:  # as check judges its all-node run against its links
        everyone = dataclasses.replace(everyone, status="slow")
    tests = [everyone]
    while True:
        step = next_step(cluster.nodes, tests, budget)
        if not isinstance(step, Round):
            return step
        tests += [cluster.test(step.number, group) for group in step.groups]
