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

from checks.netfacts import interface_named, master_interface
from nccldoctor.facts import NodeFacts
from nccldoctor.facts.network import Interface
from nccldoctor.model import Finding, Severity
from nccldoctor.report.units import format_bytes

IP_TCP_HEADERS = 40  # an IPv4 + TCP header without options: MTU 1500 carries 1460 bytes


@dataclass
class Cause:
    sentence: str  # leads the hang verdict
    findings: list[Finding] = field(default_factory=list)  # new findings that prove it


def judge(
    facts: Sequence[NodeFacts],
    ranks: Sequence[dict[str, Any]],
    port_probes: Mapping[str, dict[str, Any] | None],
    tcp_gbps: Mapping[str, float],
    master: str | None = None,
) -> Cause | None:
    """The first network cause that explains the stopped ranks, or None."""
    if all(r["state"] == "ok" for r in ranks):
        return None
    return ports_blocked(port_probes, facts, master) or mtu_stall(facts, ranks, tcp_gbps)


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
        "rendezvous ports pass (run.ephemeral-port-blocked), so the workers' own connections hung"
    )


def mtu_stall(
    facts: Sequence[NodeFacts], ranks: Sequence[dict[str, Any]], tcp_gbps: Mapping[str, float]
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
    stalled = [r for r in ranks if r["state"] != "ok" and _in_flight(r) > low - IP_TCP_HEADERS]
    if not stalled:
        return None
    sizes = stalled[0]["message_sizes"]
    phase, size = sizes["phase"], sizes["in_flight_bytes"]
    passed = sizes.get("largest_passed_bytes")
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
        f"{', '.join(str(r['rank']) for r in stalled)} stopped with {size} B in flight",
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
    return Cause(finding.title, [finding])


def _link(facts: NodeFacts) -> Interface | None:
    return interface_named(facts.network, master_interface(facts.network))


def _in_flight(rank: dict[str, Any]) -> int:
    return (rank.get("message_sizes") or {}).get("in_flight_bytes") or 0


def _address(iface: Interface | None) -> str:
    return iface.ipv4[0].split("/")[0] if iface and iface.ipv4 else "<peer address>"
