"""What the isolation rounds of `check` measured and what they showed: the subject of the
``isolation`` rules (docs/design.md#isolation).

The rounds are scheduled by ``cluster/isolate/scheduler.py``: small groups of nodes (pairs), each a
fresh process group, tested at once. A :class:`GroupTest` is one group's outcome in one round; the
scheduler reads them all and ends with an :class:`Isolation`: a state per node and per link, each
with the rounds that show it, or what could not be decided and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# How a group's test ended, as the nodes that ran it reported it:
#   ok       every member initialised, reduced exactly and timed its sizes
#   error    a member's init or collective raised, or the sum was wrong
#   timeout  a member passed the group's deadline, or the group stalled before its first op
#            (rounds.py: the round went on without it)
#   absent   a member never took its place in the group: the others learned nothing
#   slow     judged so by whoever ran it (the all-node run below what its links carry)
GroupStatus = Literal["ok", "error", "timeout", "absent", "slow"]
# A node's state once the rounds end (the four, and what the rounds could not settle)
NodeState = Literal["ok", "slow", "faulty", "unreachable", "undecided"]
LinkState = Literal["slow", "faulty"]


@dataclass(frozen=True)
class SizeRate:
    """One size of a group's bandwidth sweep: busbw as nccl-tests computes it."""

    size_bytes: int
    busbw_GBps: float


@dataclass(frozen=True)
class GroupTest:
    """One group's test in one round."""

    round: int  # 1, 2, ...; 0 is the all-node run that made `check` isolate
    members: tuple[str, ...]  # node names, sorted
    status: GroupStatus
    rates: tuple[SizeRate, ...] = ()  # the sweep, smallest size first (empty unless ok)
    init_s: float | None = None  # the slowest member's process group init
    absent: tuple[str, ...] = ()  # members that never took their place
    detail: str = ""  # the first member's error, or who passed the deadline

    @property
    def busbw_GBps(self) -> float | None:
        """The busbw of the largest size: the one the link bounds, not the latency."""
        return self.rates[-1].busbw_GBps if self.rates else None


@dataclass(frozen=True)
class NodeVerdict:
    node: str
    state: NodeState
    rounds: tuple[int, ...]  # the rounds that show it
    why: str  # one sentence: which groups failed or passed, and with whom


@dataclass(frozen=True)
class LinkVerdict:
    """A pair that failed while both ends passed with others."""

    nodes: tuple[str, str]
    state: LinkState
    rounds: tuple[int, ...]
    why: str


@dataclass(frozen=True)
class Isolation:
    """The rounds' answer."""

    nodes: tuple[NodeVerdict, ...]
    links: tuple[LinkVerdict, ...]
    tests: tuple[GroupTest, ...]  # every group's test, in round order
    rounds: int
    median_GBps: float | None  # the median busbw of the groups that completed
    network_wide: str | None = None  # every group failed alike: what they had in common
    undecided: tuple[str, ...] = ()  # what could not be decided, and why
    why_run: str = ""  # what made `check` isolate (filled by the runner)
    budget_GBps: dict[str, float] = field(default_factory=dict)  # nominal link rate per node
    interfaces: dict[str, str] = field(default_factory=dict)  # node -> the one its groups used

    def state_of(self, node: str) -> NodeState | None:
        return next((v.state for v in self.nodes if v.node == node), None)

    @property
    def culprits(self) -> tuple[NodeVerdict, ...]:
        return tuple(v for v in self.nodes if v.state in ("faulty", "slow", "unreachable"))
