"""Network causes of a hang: a fact observed before the workers explains how they stopped.

The rank verdict (``verdict``) names who stopped first and where; it cannot say why when the
why is the network. Each judgement here combines what the run measured before the workers (the
nodes' Facts, the port probe) with where the ranks stopped, and returns a :class:`Cause`: the
sentence that leads the hang verdict and the findings that prove it. Pure: data in, data out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from checks.cluster import advertised, advertised_address_shared
from checks.container import bridge_network
from checks.master import master_nat_bridge
from checks.network import ifname_missing
from nccldoctor.facts import NodeFacts
from nccldoctor.facts.ranks import RankOutcome
from nccldoctor.facts.run import PortProbe
from nccldoctor.model import Finding

MTU_STALL = "run.mtu-stall"


@dataclass
class Cause:
    sentence: str  # leads the hang verdict
    findings: list[Finding] = field(default_factory=list)  # the rule's findings it rests on
    check: str = ""  # the finding (check id) the sentence rests on
    category: str = ""
    # The nodes it puts at fault: a stopped rank there is the cause, a rank stuck on another
    # node only waited on them (verdict.hang_section, checks/ranks.py)
    nodes: tuple[str, ...] = ()


def at_fault(cause: Cause | None) -> tuple[str, ...]:
    return cause.nodes if cause else ()


def judge(
    facts: Sequence[NodeFacts],
    ranks: Sequence[RankOutcome],
    port_probes: Mapping[str | None, PortProbe | None],
    found: Sequence[Finding] = (),
    master: str | None = None,
) -> Cause | None:
    """The first network cause that explains the stopped ranks, or None. Root causes first:
    NAT and a shared advertised address explain refused ephemeral connections and init
    timeouts; a missing interface explains a bootstrap timeout (docs/design.md#verdict).
    ``found``: the ``world`` rules' findings, on the master (only it sees every node's MTU)."""
    if all(r.ok for r in ranks):
        return None
    return (
        docker_nat(facts, ranks)
        or interface_missing(facts)
        or ports_blocked(port_probes, facts, master)
        or mtu_stall(found)
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
            nodes=tuple(nodes),
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
                    nodes=(f.node,),
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
                nodes=(f.node,),
            )
    return None


def verdict_args(cause: Cause | None) -> tuple[str | None, dict[str, str] | None]:
    """``cause`` as ``verdict.hang_section`` takes it: the sentence and what it rests on."""
    if cause is None:
        return None, None
    return cause.sentence, {"check": cause.check, "category": cause.category}


def ports_blocked(
    port_probes: Mapping[str | None, PortProbe | None],
    facts: Sequence[NodeFacts],
    master: str | None = None,
) -> Cause | None:
    """A node's probe of ephemeral ports failed (run.ephemeral-port-blocked says how): gloo's
    and NCCL's connections meet the same firewall."""
    ranges = {f.node: f.network.ip_local_port_range for f in facts}
    sides = []
    for node, probe in sorted(port_probes.items(), key=lambda item: str(item[0])):
        if probe is None:
            continue
        if probe.to_master_ok is False:
            sides.append(master or "the master")
        if probe.from_master_ok is False:
            sides.append(node or "a node")
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
        nodes=tuple(side for side in dict.fromkeys(sides) if side in ranges),
    )


def mtu_stall(found: Sequence[Finding]) -> Cause | None:
    """The MTU differs between nodes and a collective stalled above the smaller one: the
    ``run.mtu-stall`` rule's finding (``checks/world.py``), when the master's rules found it."""
    finding = next((f for f in found if f.id == MTU_STALL), None)
    if finding is None:
        return None
    return Cause(f"{finding.title} ({MTU_STALL})", [finding], MTU_STALL, finding.category)
