"""Checks over the isolation rounds of `check` (``scope="isolation"``): which node, which link.

The subject is an :class:`~nccldoctor.facts.isolation.Isolation`, the scheduler's answer
(``cluster/isolate/scheduler.py``): a state per node and per link with the rounds that show it,
every group's test, what could not be decided and why. These rules word it: the culprit and its
fix first, with the rounds and numbers as evidence; the ranks of the all-node run that stopped
follow from it (``explains=``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from checks import RANKS_STOPPED, Problem, check
from nccldoctor.facts.isolation import GroupTest, Isolation, NodeVerdict
from nccldoctor.model import Severity
from nccldoctor.units import format_bytes, format_GBps

_NODE_FAULTY_FIX = (
    "Look at {node}'s network path, which every partner crossed:\n"
    "ip -s link show            # on {node}: errors, drops, the MTU\n"
    "ping -M do -s 8972 -c 3 <a partner>   # jumbo frames through (drop -s to 1472 for MTU 1500)\n"
    "iptables -S; nft list ruleset         # a firewall that drops new connections\n"
    "Then rerun the check without it, or with it once fixed."
)
_NODE_SLOW_FIX = (
    "Check {node}'s link speed and cable:\n"
    "ethtool {interface} | grep -E 'Speed|Duplex'   # on {node}: the rate it negotiated\n"
    "tc qdisc show              # a rate limit (tbf, htb) left on its interface\n"
    "iperf3 -c <a partner> -P 4 # what TCP gets from {node}, against another pair"
)
_LINK_FIX = (
    "Something between {a} and {b} only: a firewall rule or a route on either end, or the switch "
    "ports' path:\n"
    "iptables -S; ip route get <the other's address>   # on {a} and on {b}\n"
    "nc -zv <the other's address> <port>    # a new connection each way"
)


@check("isolation.node-faulty", area="cluster", category="connect_refused_or_timeout",
       scope="isolation", explains=RANKS_STOPPED, remedy="fix or leave out the faulty node")  # fmt: skip
def node_faulty(isolation: Isolation) -> list[Problem]:
    """A node failed with two or more partners that passed with others: the node is at fault."""
    return [
        Problem(
            Severity.FAIL,
            f"node {v.node} fails with {_whom(isolation, v.node)}: {_failures(isolation, v)}; "
            f"{_others(isolation)}",
            _evidence(isolation, v),
            _NODE_FAULTY_FIX.format(node=v.node),
            node=v.node,
        )
        for v in isolation.nodes
        if v.state == "faulty"
    ]


@check("isolation.node-slow", area="cluster", category="bandwidth", scope="isolation",
       explains=RANKS_STOPPED, remedy="check the slow node's link speed and cable")  # fmt: skip
def node_slow(isolation: Isolation) -> list[Problem]:
    """A node's pairs carry far less than the other pairs: its link is slow."""
    return [
        Problem(
            Severity.FAIL,
            f"node {v.node} is slow: {_carrier(isolation, v.node)} carries "
            f"{_rates(isolation, v)} in its pairs, {_others(isolation)}: check its link speed "
            "and cable",
            _evidence(isolation, v),
            _NODE_SLOW_FIX.format(
                node=v.node, interface=isolation.interfaces.get(v.node, "<interface>")
            ),
            node=v.node,
        )
        for v in isolation.nodes
        if v.state == "slow"
    ]


@check("isolation.node-unreachable", area="cluster", category="remote_peer_closed",
       scope="isolation", explains=RANKS_STOPPED)  # fmt: skip
def node_unreachable(isolation: Isolation) -> list[Problem]:
    """A node that joined the check never took its place in an isolation round."""
    return [
        Problem(
            Severity.FAIL,
            f"node {v.node} {v.why}",
            [
                f"round {t.round}: {', '.join(t.members)}: {v.node} never took its place"
                for t in isolation.tests
                if v.node in t.absent
            ],
            f"Is nccldoctor still running on {v.node}? Its own report (and agent.log) says where "
            "it stopped; a node the master cannot reach any more shows there as a lost master.",
            node=v.node,
        )
        for v in isolation.nodes
        if v.state == "unreachable"
    ]


@check("isolation.link-faulty", area="network", category="firewall_or_port", scope="isolation",
       explains=RANKS_STOPPED, remedy="fix the path between the two nodes")  # fmt: skip
def link_faulty(isolation: Isolation) -> list[Problem]:
    """Two nodes fail together while each passes with others: the link between them."""
    problems = []
    for link in isolation.links:
        a, b = link.nodes
        tests = [t for t in isolation.tests if set(link.nodes) <= set(t.members) and t.round > 0]
        how = "is slow" if link.state == "slow" else "fails"
        problems.append(
            Problem(
                Severity.FAIL,
                f"the link between {a} and {b} {how}, while each passes with other partners",
                [link.why, *(_test_line(t, isolation) for t in tests)],
                (
                    _NODE_SLOW_FIX.format(node=f"{a} and {b}", interface="<interface>")
                    if link.state == "slow"
                    else _LINK_FIX.format(a=a, b=b)
                ),
                node=a,
            )
        )
    return problems


@check("isolation.network-wide", area="network", category="other", scope="isolation",
       explains=RANKS_STOPPED)  # fmt: skip
def network_wide(isolation: Isolation) -> Problem | None:
    """Every group of the isolation rounds failed alike: no one node is at fault."""
    if not isolation.network_wide:
        return None
    return Problem(
        Severity.FAIL,
        "every pair of nodes fails alike: the fault is shared, not one node's",
        [isolation.network_wide, *(_test_line(t, isolation) for t in isolation.tests[:12])],
        "Look at what every node shares: the switch or VLAN, a firewall policy pushed to every "
        "host, the interface the workers bind to (NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME), the "
        "software versions. The other findings of this report say which.",
    )


@check("isolation.undecided", area="cluster", category="other", scope="isolation")
def undecided(isolation: Isolation) -> Problem | None:
    """The isolation rounds ended with nodes or failures they could not explain."""
    if not isolation.undecided or isolation.network_wide:
        return None
    return Problem(
        Severity.WARN,
        f"the isolation rounds could not decide everything: {isolation.undecided[0]}",
        list(isolation.undecided),
        "Rerun with more nodes (a third node tells a node from a link), or a longer group "
        "deadline: --phase-timeout isolate_group=SECONDS.",
    )


@check("isolation.all-passed", area="cluster", category="other", scope="isolation")
def all_passed(isolation: Isolation) -> Problem | None:
    """The isolation rounds ran and every node and link passed."""
    if isolation.culprits or isolation.links or isolation.network_wide or isolation.undecided:
        return None
    ok = sum(t.status == "ok" for t in isolation.tests if t.round > 0)
    return Problem(
        Severity.INFO,
        f"isolation: every node passed in {isolation.rounds} round(s) of pairs ({ok} groups)",
        [isolation.why_run or "isolation ran", f"pairs' busbw {_range(_healthy(isolation))}"],
    )


# -- wording --------------------------------------------------------------------------------------
def _failures(isolation: Isolation, verdict: NodeVerdict) -> str:
    tests = [t for t in _tests_of(isolation, verdict) if t.status != "ok" and t.round > 0]
    return "; ".join(_short(t, verdict.node) for t in tests) or verdict.why


def _whom(isolation: Isolation, node: str) -> str:
    """ "every partner", or "its partners but node0" where a pair with it passed (an MTU trap
    passes with a peer whose own frames are small)."""
    passed = sorted(
        {m for t in isolation.tests if t.round > 0 and t.status == "ok" and len(t.members) == 2
         and node in t.members for m in t.members if m != node}
    )  # fmt: skip
    return f"its partners but {', '.join(passed)}" if passed else "every partner"


def _carrier(isolation: Isolation, node: str) -> str:
    """ "eth0", or "its link" when the node did not say which interface its groups used."""
    return isolation.interfaces.get(node) or "its link"


def _rates(isolation: Isolation, verdict: NodeVerdict) -> str:
    rates = [t.busbw_GBps for t in _tests_of(isolation, verdict) if t.busbw_GBps is not None]
    return _range(rates)


def _others(isolation: Isolation) -> str:
    healthy = _healthy(isolation)
    return f"the other pairs {_range(healthy)}" if healthy else "no other pair completed"


def _healthy(isolation: Isolation) -> list[float]:
    """busbw of the pairs that hold no node or link at fault."""
    bad = {v.node for v in isolation.culprits}
    links = {frozenset(v.nodes) for v in isolation.links}
    return [
        t.busbw_GBps
        for t in isolation.tests
        if len(t.members) == 2 and t.busbw_GBps is not None and t.status == "ok"
        and not bad & set(t.members) and frozenset(t.members) not in links
    ]  # fmt: skip


def _range(rates: Sequence[float]) -> str:
    if not rates:
        return "nothing"
    low, high = min(rates), max(rates)
    if format_GBps(low) == format_GBps(high):
        return format_GBps(low)
    return f"{format_GBps(low)}–{format_GBps(high)}"


def _tests_of(isolation: Isolation, verdict: NodeVerdict) -> Iterable[GroupTest]:
    rounds = set(verdict.rounds)
    return [t for t in isolation.tests if t.round in rounds and verdict.node in t.members]


def _short(test: GroupTest, node: str) -> str:
    others = ", ".join(m for m in test.members if m != node)
    what = test.status if test.status != "ok" else format_GBps(test.busbw_GBps)
    return f"{others} in round {test.round} ({what})"


def _evidence(isolation: Isolation, verdict: NodeVerdict) -> list[str]:
    lines = [verdict.why]
    if verdict.node in isolation.budget_GBps:  # what a slow group was held to besides the others
        rate = format_GBps(isolation.budget_GBps[verdict.node])
        lines.append(f"{_carrier(isolation, verdict.node)} on {verdict.node} is rated {rate}")
    lines += [
        _test_line(t, isolation)
        for t in isolation.tests
        if verdict.node in t.members and t.round > 0  # the all-node run holds every node
    ]
    return lines


def _test_line(test: GroupTest, isolation: Isolation) -> str:
    """ "round 2: gpu-1 + gpu-5: error: gpu-5: RuntimeError: ..." or the sizes' busbw."""
    head = f"round {test.round}: {' + '.join(test.members) if len(test.members) < 5 else f'{len(test.members)} nodes'}"
    if test.status == "ok" and test.rates:
        sizes = ", ".join(f"{format_GBps(r.busbw_GBps)} at {format_bytes(r.size_bytes)}"
                          for r in test.rates)  # fmt: skip
        init = f", init {test.init_s:.2f} s" if test.init_s is not None else ""
        return f"{head}: busbw {sizes}{init}"
    detail = f": {test.detail}" if test.detail else ""
    if test.absent:
        detail = f": {', '.join(test.absent)} never took its place"
    return f"{head}: {test.status}{detail}"
