"""What each node's link should carry, for the scheduler's slowness test (a group far below the
others' median is slow only when it is also far below its slower member's link): the rate of the
link NCCL would use, read from the nodes' Facts as the bandwidth rules read it
(checks/linkrates.py): the active InfiniBand/RoCE ports where any node has them, else the NIC.
Only for NCCL: gloo moves tensors through the CPU and is not meant to fill a link."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from checks.linkrates import EXPECTED, node_links
from nccldoctor.cluster.records import NodeEntry
from nccldoctor.units import format_GBps


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
