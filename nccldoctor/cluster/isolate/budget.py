"""What each node's link should carry, for the scheduler's slowness test (a group far below the
others' median is slow only when it is also far below its slower member's link): the rate of the
link NCCL would use, read from the nodes' Facts as the bandwidth rules read it
(checks/linkrates.py): the active InfiniBand/RoCE ports where any node has them, else the NIC.
Only for NCCL: gloo moves tensors through the CPU and is not meant to fill a link; under gloo the
all-node busbw is held to what the TCP probes measured instead (:func:`ran_at_wire`)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from checks.linkrates import EXPECTED, node_links
from nccldoctor.cluster.records import NodeEntry
from nccldoctor.units import GBps_of_Gbitps, format_GBps, format_link_rate

# Under gloo: the all-node busbw between these shares of a node's TCP rate to the master ran at
# that node's wire (a little above: a rate limiter's burst let the first bytes through; far above,
# the probe under-measured the link, checks/linkrates.py), while the other nodes' median carries
# WIRE_HEADROOM times the busbw. Six lab nodes, the default 10 s sweep: a node limited to
# 100 Mbit/s held the busbw at 1.01 times its probe, the others' median 24 times it; healthy, gloo
# (CPU-bound) levelled off at 0.2 GB/s, near one node's probe read low, the median 4.8 times it.
WIRE_SHARES = (0.5, 1.5)
WIRE_HEADROOM = 10.0


def link_budgets(
    entries: Sequence[NodeEntry], names: Mapping[int, str], backend: str
) -> tuple[str, dict[str, float]]:
    """The transport NCCL would use (IB or Socket) and node name -> GB/s its link carries;
    ``names``: slot -> the world's name of the node."""
    if backend != "nccl":
        return "", {}
    links = {}
    for entry in entries:
        if entry.slot not in names:
            continue
        links[names[entry.slot]] = node_links(entry.facts, None)
    transport = (
        "IB" if any(k.kind in ("ib", "roce") for n in links.values() for k in n.links) else "Socket"
    )
    budgets = {}
    for name, node in links.items():
        relevant = node.relevant(transport)
        if relevant and relevant[1] > 0:
            budgets[name] = relevant[1] / 8  # Gbit/s to GB/s, busbw's unit
    return transport, budgets


def below_links(busbw_GBps: float | None, transport: str, budgets: Mapping[str, float]) -> str:
    """Why to isolate when the all-node run's largest busbw is far below what the slowest link
    carries (half the low end of what NCCL reaches over it, run.busbw-below-link's measure), or
    "" when it is not, or nothing is known."""
    if busbw_GBps is None or transport not in EXPECTED or not budgets:
        return ""
    node, slowest = min(budgets.items(), key=lambda item: item[1])
    share = EXPECTED[transport][0] / 2
    if busbw_GBps >= share * slowest:
        return ""
    return (
        f"the all-node busbw {format_GBps(busbw_GBps)} is below {share:.0%} of what {node}'s "
        f"link carries ({format_GBps(slowest)})"
    )


def ran_at_wire(busbw_GBps: float | None, tcp_gbps: Mapping[str, float]) -> str:
    """Why to isolate under gloo, or "": the all-node run's largest busbw ran at one node's TCP
    rate to the master (:data:`WIRE_SHARES`) while the other nodes' links carry
    :data:`WIRE_HEADROOM` times more: that node's link bounds the run. Gloo, CPU-bound, stays far
    below a NIC's rating and below the probes of healthy links; a cluster whose links are all as
    slow is not one node's fault. The master receives the probes and has none of its own."""
    rates = {n: r for n, r in tcp_gbps.items() if isinstance(r, (int, float)) and r > 0}
    if busbw_GBps is None or busbw_GBps <= 0 or len(rates) < 3:
        return ""
    low, high = WIRE_SHARES
    for node, rate in sorted(rates.items(), key=lambda item: item[1]):
        wire = GBps_of_Gbitps(rate)
        others = statistics.median(GBps_of_Gbitps(r) for n, r in rates.items() if n != node)
        if low * wire <= busbw_GBps <= high * wire and others >= WIRE_HEADROOM * busbw_GBps:
            return (
                f"the all-node busbw {format_GBps(busbw_GBps)} ran at {node}'s TCP rate to the "
                f"master ({format_link_rate(rate)}), the others' median {format_GBps(others)}"
            )
    return ""
