"""Network causes of a hang: a fact observed before the workers explains how they stopped.

The rank verdict (``verdict``) names who stopped first and where; it cannot say why when the
why is the network. Each judgement here combines what the run measured before the workers (the
nodes' Facts, the port probe) with where the ranks stopped, and returns a :class:`Cause`: the
sentence that leads the hang verdict and the findings that prove it. Pure: data in, data out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from checks.cluster import advertised, advertised_address_shared
from checks.container import bridge_network
from checks.master import master_nat_bridge
from checks.netfacts import interface_named, master_interface
from checks.network import ifname_missing
from nccldoctor.facts import NodeFacts
from nccldoctor.facts.network import Interface
from nccldoctor.facts.ranks import RankOutcome
from nccldoctor.model import Finding, Severity
from nccldoctor.report.units import format_bytes

IP_TCP_HEADERS = 40  # an IPv4 + TCP header without options: MTU 1500 carries 1460 bytes


@dataclass
class Cause:
    sentence: str  # leads the hang verdict
    findings: list[Finding] = field(default_factory=list)  # new findings that prove it
    check: str = ""  # the finding (check id) the sentence rests on
    category: str = ""


def judge(
    facts: Sequence[NodeFacts],
    ranks: Sequence[RankOutcome],
    port_probes: Mapping[str, dict[str, Any] | None],
    tcp_gbps: Mapping[str, float],
    master: str | None = None,
) -> Cause | None:
    """The first network cause that explains the stopped ranks, or None. Root causes first:
    NAT and a shared advertised address explain refused ephemeral connections and init
    timeouts; a missing interface explains a bootstrap timeout (docs/design.md#verdict)."""
    if all(r.ok for r in ranks):
        return None
    return (
        docker_nat(facts, ranks)
        or interface_missing(facts)
        or ports_blocked(port_probes, facts, master)
        or mtu_stall(facts, ranks, tcp_gbps)
    )


def docker_nat(facts: Sequence[NodeFacts], ranks: Sequence[RankOutcome]) -> Cause | None:
    """Nodes behind Docker NAT: one address advertised by several nodes (a rank's connection
    to it stays home), or one node's private address that its peers cannot reach."""
    if advertised_address_shared(list(facts)):
        groups: dict[str, list[str]] = {}
        for f in facts:
            groups.setdefault(advertised(f) or "", []).append(f.node)
        address, nodes = next((a, n) for a, n in groups.items() if a and len(n) > 1)
        who = "both nodes" if len(nodes) == len(facts) == 2 else f"nodes {', '.join(nodes)}"
        home = [r for r in ranks if r.node in nodes and address in (r.error or "")]
        reached = (
            f"rank {home[0].rank}'s connection to it reached itself"
            if home
            else "a rank's connection to it reaches its own node"
        )
        return Cause(
            f"{who} advertise {address} from behind Docker NAT: {reached} "
            "(cluster.advertised-address-shared)",
            check="cluster.advertised-address-shared",
            category="docker_network",
        )
    for f in facts:
        for rule, check_id in ((bridge_network, "container.bridge-network"),
                               (master_nat_bridge, "master.nat-bridge")):  # fmt: skip
            if rule(f):
                seen = f" (the master sees {f.network.seen_by_master})" if (
                    f.network.seen_by_master) else ""  # fmt: skip
                return Cause(
                    f"node {f.node} advertises {advertised(f) or 'a private address'} from behind "
                    f"Docker NAT{seen}: the other nodes' ranks cannot connect back ({check_id})",
                    check=check_id,
                    category="docker_network",
                )
    return None


def interface_missing(facts: Sequence[NodeFacts]) -> Cause | None:
    """NCCL_SOCKET_IFNAME names no interface of a node: NCCL cannot bootstrap there."""
    for f in facts:
        problem = ifname_missing(f)
        if problem:
            return Cause(
                f"on node {f.node}, {problem.title} (socket.ifname-missing)",
                check="socket.ifname-missing",
                category="interface_selection",
            )
    return None


def verdict_args(cause: Cause | None) -> tuple[str | None, dict[str, str] | None]:
    """``cause`` as ``verdict.hang_section`` takes it: the sentence and what it rests on."""
    if cause is None:
        return None, None
    return cause.sentence, {"check": cause.check, "category": cause.category}


def ports_blocked(
    port_probes: Mapping[str, dict[str, Any] | None],
    facts: Sequence[NodeFacts],
    master: str | None = None,
) -> Cause | None:
    """A node's probe of ephemeral ports failed (run.ephemeral-port-blocked says how): gloo's
    and NCCL's connections meet the same firewall."""
    ranges = {f.node: f.network.ip_local_port_range for f in facts}
    sides = []
    for node, probe in sorted(port_probes.items()):
        if not probe:
            continue
        if probe.get("to_master_ok") is False:
            sides.append(master or "the master")
        if probe.get("from_master_ok") is False:
            sides.append(node)
    if not sides:
        return None
    named = []
    for side in dict.fromkeys(sides):
        span = ranges.get(side)
        who = f"node {side}" if side in ranges else side
        named.append(f"{who} ({span[0]}-{span[1]})" if span else who)
    return Cause(
        f"connections to ephemeral ports on {' and '.join(named)} are dropped while the "
        "rendezvous ports pass (run.ephemeral-port-blocked), so the workers' own connections hung",
        check="run.ephemeral-port-blocked",
        category="firewall_or_port",
    )


def mtu_stall(
    facts: Sequence[NodeFacts], ranks: Sequence[RankOutcome], tcp_gbps: Mapping[str, float]
) -> Cause | None:
    """The MTU differs between nodes and a collective stalled at a message bigger than the
    smaller MTU after smaller ones passed: the path drops the big frames (failures.md F20).

    Only a path that drops frames stalls: TCP endpoints with different MTUs agree on the smaller
    MSS by themselves. A 1500 switch port between two jumbo nodes drops their big frames and
    sends no ICMP back, so TCP never learns to send smaller segments."""
    links = {f.node: _link(f) for f in facts}
    mtus = {node: i.mtu for node, i in links.items() if i is not None and i.mtu}
    if len(set(mtus.values())) < 2:
        return None
    low, high = min(mtus.values()), max(mtus.values())
    stalled = [r for r in ranks if not r.ok and r.in_flight_bytes > low - IP_TCP_HEADERS]
    if not stalled or stalled[0].message_sizes is None:
        return None
    sizes = stalled[0].message_sizes
    phase, size, passed = sizes.phase, sizes.in_flight_bytes, sizes.largest_passed_bytes
    jumbo = sorted(n for n, m in mtus.items() if m > low)
    small = sorted(n for n, m in mtus.items() if m == low)
    groups = "; ".join(
        f"{m} on {', '.join(sorted(n for n, v in mtus.items() if v == m))}"
        for m in sorted(set(mtus.values()), reverse=True)
    )
    passed_text = f"{format_bytes(passed)} passed" if passed else "nothing larger passed"
    evidence = [
        "MTU of the interface towards the master: "
        + ", ".join(f"{n} {links[n].name} {m}" for n, m in sorted(mtus.items())),
        f"{phase}: every rank got through {passed or 0} B; ranks "  # exact: the MTU is in bytes
        f"{', '.join(str(r.rank) for r in stalled)} stopped with {size} B in flight",
        f"frames over {low} B: sent by {', '.join(jumbo)} (MTU {high}), dropped by a hop at {low}",
    ]
    if tcp_gbps:
        evidence.append(
            "raw TCP to the master: "
            + ", ".join(f"{n} {g:.2f} Gbit/s" for n, g in sorted(tcp_gbps.items()))
        )
    peer = _address(links[jumbo[1] if len(jumbo) > 1 else small[0]])
    finding = Finding(
        "run.mtu-stall",
        "interface_selection",
        Severity.FAIL,
        f"{phase} stalled at {format_bytes(size)} ({passed_text}): the MTU differs between nodes "
        f"({groups}) and frames over {low} B are dropped on the path",
        evidence,
        f"Use one MTU end to end. Lower the jumbo nodes:\n"
        f"ip link set dev {links[jumbo[0]].name} mtu {low}   # on {', '.join(jumbo)}\n"
        f"or set {high} on {', '.join(small)} and on every switch port between the nodes.\n"
        f"Check the path from {jumbo[0]}: ping -M do -s {high - 28} -c 1 {peer}  (must answer)",
        area="network",
    )
    return Cause(f"{finding.title} (run.mtu-stall)", [finding], "run.mtu-stall",
                 "interface_selection")  # fmt: skip


def _link(facts: NodeFacts) -> Interface | None:
    return interface_named(facts.network, master_interface(facts.network))


def _address(iface: Interface | None) -> str:
    return iface.ipv4[0].split("/")[0] if iface and iface.ipv4 else "<peer address>"
