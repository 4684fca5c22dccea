"""The master's records as the ``world`` rules' subject (``facts/world.py``).

The rendezvous (the world, the hellos at the master's listener) and the clocks of the nodes as
they joined are judged by ``checks/world.py``; what one node observed of its run by the ``run``
rules of ``checks/run.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

from nccldoctor.cluster.records import Hello, NodeEntry, World, given_name
from nccldoctor.facts.world import Clock, HelloFlood, Knock, Member, Rejected, Rendezvous


def rendezvous_seen(
    world: World,
    hellos: Sequence[Hello],
    port: int,
    flood: HelloFlood | None = None,
    rejected: Sequence[Rejected] = (),
) -> Rendezvous:
    """The master's rendezvous: who joined the published world, who knocked (and how many
    more), who is missing, and what was written to the store in a node's place."""
    return Rendezvous(
        port=port,
        members=tuple(Member(n.name, given_name(n.name), n.address, n.seen) for n in world.nodes),
        hellos=tuple(Knock(h.node, h.seen, h.accepted, h.reason) for h in hellos),
        missing=tuple(world.missing),
        abort=world.abort,
        flood=flood,
        rejected=tuple(rejected),
    )


def clocks(entries: Sequence[NodeEntry]) -> tuple[Clock, ...]:
    """Each node's clock against the master's, as it joined."""
    return tuple(Clock(e.name, e.skew_s) for e in entries)
