"""What the master saw of a `check` run's nodes: the subject of the ``world`` rules.

One node's own observations are the ``run`` rules' (``facts/run.py``); these are what only the
side that merges every node's report can see: who knocked at the master's listener and who
joined the store (``Rendezvous``), each node's clock against the master's, the nodes that
stopped reporting, every node's Facts beside where the ranks stopped (an MTU that differs
between nodes shows only there), and, for a merge of report files, which files it read.
The cluster code fills it (``cluster/diagnosis/findings.py``, ``merge.py``); each part is
absent where the merge did not see it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from nccldoctor.facts import NodeFacts
from nccldoctor.facts.ranks import RankOutcome


@dataclass(frozen=True)
class Knock:
    """One node's hello to the master's listener, as the master saw it."""

    node: str
    seen: str  # the peer address of the connection
    accepted: bool
    reason: str = ""  # why it was refused; for an accepted hello, what the node said


@dataclass(frozen=True)
class Member:
    """A node of the world the master published."""

    name: str  # its name in the world ("trainer#1" when two nodes share a hostname)
    given: str  # the name it joined under
    address: str
    seen: str  # the peer address the store saw


@dataclass(frozen=True)
class HelloFlood:
    """The knocks at the master's listener past those it kept one by one: beyond the expected
    nodes (a few more for retries), and refused ones past the first few."""

    count: int
    refused: int  # of them without the token
    peers: Sequence[str]  # the addresses that knocked most
    addresses: int  # how many addresses knocked (told apart up to gate.FLOOD_ADDRESSES)
    expected: int | None  # the nodes the run expected (None: not known)


@dataclass(frozen=True)
class Rejected:
    """Something written to the master's store as a node's entry or result that was not one
    (cluster/diagnosis/peer.py): left out of the world or the merge."""

    what: str  # "entry" or "result"
    node: str  # the node it was written as (a result), or the name it claims (an entry)
    key: str  # where in the run's keys: "node/3", "result/1/2"
    why: str


@dataclass(frozen=True)
class SectionUnread:
    """A section of a node's report that did not read (a value of another type than this
    version writes there): the merge went on without it (cluster/diagnosis/sections.py)."""

    node: str  # the node the report speaks for
    source: str | None  # the report's file, where known
    section: str  # "phases", "run.port_probe"
    why: str


@dataclass(frozen=True)
class Rendezvous:
    """The master's rendezvous: the store's port (its listener is the next), who joined, who
    knocked, and why the world closed short."""

    port: int
    members: Sequence[Member] = ()
    hellos: Sequence[Knock] = ()
    missing: Sequence[str] = ()
    abort: str | None = None
    flood: HelloFlood | None = None
    rejected: Sequence[Rejected] = ()


@dataclass(frozen=True)
class Clock:
    node: str
    skew_s: float  # the master's clock minus the node's, at its hello


@dataclass(frozen=True)
class LostNode:
    """A node that joined and then stopped reporting before the exit barrier's deadline."""

    name: str
    node_rank: int
    phase: str  # the last phase it announced


@dataclass(frozen=True)
class Stall:
    """A rank that ended badly, with the message sizes of the sized collective it was in."""

    rank: int
    phase: str | None
    in_flight_bytes: int  # 0: no sized collective in flight
    largest_passed_bytes: int | None


def stalls(ranks: Sequence[RankOutcome]) -> tuple[Stall, ...]:
    """The ranks that did not end well, with the message sizes they stopped at."""
    return tuple(
        Stall(
            r.rank,
            r.message_sizes.phase if r.message_sizes else None,
            (r.message_sizes.in_flight_bytes or 0) if r.message_sizes else 0,
            r.message_sizes.largest_passed_bytes if r.message_sizes else None,
        )
        for r in ranks
        if not r.ok
    )


@dataclass(frozen=True)
class MergedFrom:
    """A cluster report merged from node report files: each node's file, and the nodes listed
    by the run without a report of their own."""

    sources: Mapping[str, str | None]  # node -> the file its report came from, in merge order
    missing: Sequence[str] = ()


@dataclass(frozen=True)
class WorldSeen:
    facts: Sequence[NodeFacts] = ()  # every node's Facts
    stalls: Sequence[Stall] = ()
    tcp_gbps: Mapping[str, float] = field(default_factory=dict)  # raw TCP to the master, by node
    rendezvous: Rendezvous | None = None  # None: no world was published (or not the master)
    clocks: Sequence[Clock] = ()
    lost: Sequence[LostNode] = ()
    merged: MergedFrom | None = None  # None: the master's own report
    unread: Sequence[SectionUnread] = ()  # the nodes' report sections the merge left out
