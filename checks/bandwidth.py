"""Checks of the bandwidth sweep against the links it ran over (``scope="bandwidth"``).

The subject is a :class:`~checks.linkrates.LinkBudget`. Only an NCCL sweep is judged: gloo
moves tensors through the CPU and is not meant to fill a link.
"""

from __future__ import annotations

from checks import Problem, check
from checks.linkrates import EXPECTED, LinkBudget, of_what, percent
from nccldoctor.model import Severity
from nccldoctor.units import format_bytes, format_GBps, format_link_rate

_FIXES = {
    "IB": (
        "Check that NCCL uses every HCA at its full rate and GPUDirect RDMA:\n"
        "ibstat    # every port ACTIVE at the rate the cable is rated for\n"
        "NCCL_DEBUG=INFO ... | grep -E 'NET/IB|GDRDMA'\n"
        "ib_write_bw -d mlx5_0 <peer>    # the port's own rate, without NCCL"
    ),
    "Socket": (
        "Check that NCCL picks the fast NIC and opens enough sockets:\n"
        "NCCL_SOCKET_IFNAME=<the fast interface>\n"
        "NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=4    # more streams on a fast link\n"
        "iperf3 -c <peer> -P 4    # what TCP itself gets between the nodes"
    ),
}


@check("run.busbw-below-link", area="network", category="interface_selection", scope="bandwidth")
def busbw_below_link(budget: LinkBudget) -> Problem | None:
    """The largest allreduce busbw is far below what the slowest relevant link carries."""
    fraction, slowest = budget.fraction(), budget.slowest()
    if budget.backend != "nccl" or budget.transport is None or fraction is None or not slowest:
        return None
    low, _high, expected = EXPECTED[budget.transport]
    if fraction >= low / 2:
        return None
    node, link, gbitps = slowest
    return Problem(
        Severity.WARN,
        f"allreduce busbw {format_GBps(budget.busbw_GBps)} = {percent(fraction)} "
        f"{of_what(link, format_link_rate(gbitps))} ({node})",
        [
            f"largest busbw {format_GBps(budget.busbw_GBps)} at "
            f"{format_bytes(budget.size_bytes or 0)} over NET/{budget.transport}",
            f"slowest relevant link: {link} on {node}, {format_link_rate(gbitps)}",
            f"{expected}; below {low / 2:.0%} is far below",
        ],
        _FIXES[budget.transport],
        node=node,
    )
