"""What each node's links can carry, and the largest busbw against the slowest relevant one.

Read from the Facts (the NIC speed the probe read from ``/sys/class/net/<if>/speed``, the
IB/RoCE port rate from ``/sys/class/infiniband/<hca>/ports/<n>/rate``) and the run's bandwidth
section (the TCP probe). Which link is relevant follows the transport NCCL used: over Socket the
NIC NCCL picks or the TCP probe, whichever is slower; over IB the node's ACTIVE ports together
(NCCL spreads a collective over every HCA it uses). A TCP probe that measured less than the
busbw under-measured the link (a loaded host, loopback) or the collective took another path:
its rate is a lower bound, never the budget. A rate nothing measured stays None: the report says
unknown, never a guess (docs/report.md, *links*).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nccldoctor.facts import NodeFacts

# "200 Gb/sec (4X HDR)", "2.5 Gb/sec (1X SDR)": the kernel's rate file
_PORT_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec")
# What NCCL reaches at large sizes, as a fraction of the relevant link (docs/report.md, *links*)
EXPECTED = {
    "IB": (0.8, 0.9, "NCCL over IB reaches ~80–90% of the port rate at large sizes"),
    "Socket": (0.3, 0.7, "NCCL over sockets reaches far less, ~30–70% of the NIC's rate"),
}


@dataclass(frozen=True)
class Link:
    kind: str  # nic | ib | roce | tcp
    name: str  # eth0, mlx5_0/1, "TCP probe"
    Gbitps: float | None  # None: nothing measured it
    source: str  # where the rate was read


@dataclass
class NodeLinks:
    node: str
    links: list[Link] = field(default_factory=list)

    def relevant(self, transport: str, busbw_Gbitps: float = 0.0) -> tuple[str, float] | None:
        """(what, Gbit/s) of the link that bounds this node over ``transport``; None unknown.
        A TCP probe below ``busbw_Gbitps`` under-measured the link and bounds nothing."""
        if transport == "IB":
            ports = [k for k in self.links if k.kind in ("ib", "roce") and k.Gbitps]
            if not ports:
                return None
            names = ", ".join(k.name for k in ports)
            return names, sum(k.Gbitps for k in ports if k.Gbitps)
        known = [
            (k.name, k.Gbitps)
            for k in self.links
            if k.Gbitps and (k.kind == "nic" or (k.kind == "tcp" and k.Gbitps >= busbw_Gbitps))
        ]
        return min(known, key=lambda pair: pair[1]) if known else None


@dataclass
class LinkBudget:
    """The subject of the ``bandwidth`` rules: the transport, the largest busbw and every
    node's links."""

    backend: str  # nccl | gloo | ""
    transport: str | None  # IB | Socket | None (nothing says)
    busbw_GBps: float | None
    size_bytes: int | None
    nodes: list[NodeLinks] = field(default_factory=list)

    def slowest(self) -> tuple[str, str, float] | None:
        """(node, link, Gbit/s) of the slowest node's relevant link; None when none is known."""
        if self.transport is None:
            return None
        busbw = self._busbw_Gbitps()
        known = [
            (n.node, *pair)
            for n in self.nodes
            if (pair := n.relevant(self.transport, busbw)) is not None
        ]
        return min(known, key=lambda entry: entry[2]) if known else None

    def probe_below(self) -> tuple[str, float] | None:
        """(node, Gbit/s) of the slowest TCP probe that measured less than the busbw over
        Socket: a lower bound of that node's link, left out of the budget; None when none did."""
        if self.transport != "Socket":
            return None
        busbw = self._busbw_Gbitps()
        low = [
            (n.node, k.Gbitps)
            for n in self.nodes
            for k in n.links
            if k.kind == "tcp" and k.Gbitps and k.Gbitps < busbw
        ]
        return min(low, key=lambda entry: entry[1]) if low else None

    def _busbw_Gbitps(self) -> float:
        return self.busbw_GBps * 8 if self.busbw_GBps is not None else 0.0

    def fraction(self) -> float | None:
        """The largest busbw over what the slowest relevant link carries (both in GB/s)."""
        slowest = self.slowest()
        if slowest is None or self.busbw_GBps is None:
            return None
        return self.busbw_GBps / (slowest[2] / 8)


PROBE = "TCP probe"


def of_what(link: str, rate: str) -> str:
    """ "of what eth0's 12.50 GB/s carries", "of the 1.88 GB/s the TCP probe measured"."""
    if link == PROBE:
        return f"of the {rate} the TCP probe measured"
    return f"of what {link}'s {rate} carries"


def percent(fraction: float) -> str:
    return "<1%" if 0 < fraction < 0.01 else f"{fraction:.0%}"


def port_rate_Gbitps(rate: str) -> float | None:
    match = _PORT_RATE.match(rate or "")
    return float(match.group(1)) if match else None


def node_links(facts: NodeFacts, tcp_Gbitps: float | None) -> NodeLinks:
    net = facts.network
    route = net.route_to_master.interface if net.route_to_master else None
    nic_name = net.nccl_pick or route
    links = []
    nic = next((i for i in net.interfaces if i.name == nic_name), None)
    if nic is not None:
        speed = nic.speed_mbps / 1000 if nic.speed_mbps and nic.speed_mbps > 0 else None
        links.append(Link("nic", nic.name, speed, f"/sys/class/net/{nic.name}/speed"))
    for hca in facts.rdma.hcas:
        for port in hca.ports:
            if port.state != "ACTIVE":
                continue
            kind = "roce" if port.link_layer == "Ethernet" else "ib"
            name = f"{hca.name}/{port.number}"
            links.append(Link(kind, name, port_rate_Gbitps(port.rate), port.rate or "no rate"))
    links.append(Link("tcp", PROBE, tcp_Gbitps, "nccldoctor's TCP probe to the master"))
    return NodeLinks(facts.node, links)


def link_budget(
    facts: Sequence[NodeFacts], bandwidth: Mapping[str, Any], network: Any
) -> LinkBudget:
    """The budget of a run from its nodes' Facts, its ``bandwidth`` section and the network
    NCCL said it used (``IB``, ``Socket`` or None)."""
    wire = bandwidth.get("tcp_wire_Gbitps")
    wire = wire if isinstance(wire, Mapping) else {}
    rows = bandwidth.get("rows")
    rows = [
        r
        for r in (rows if isinstance(rows, list) else [])
        if isinstance(r, dict) and _number(r.get("busbw_GBps")) and _number(r.get("size_bytes"))
    ]
    best = max(rows, key=lambda r: r["busbw_GBps"], default=None)
    backend = str(bandwidth.get("backend") or "")
    known = isinstance(network, str) and network in EXPECTED  # a bad document: any JSON value
    transport = network if known else ("Socket" if backend == "gloo" else None)
    return LinkBudget(
        backend=backend,
        transport=transport,
        busbw_GBps=best["busbw_GBps"] if best else None,
        size_bytes=best["size_bytes"] if best else None,
        nodes=[node_links(f, _wire(wire, f.node)) for f in facts],
    )


def _wire(wire: Mapping[str, Any], node: Any) -> float | None:
    """The TCP probe's rate for ``node``; facts read from a bad document may name it oddly."""
    rate = wire.get(node) if isinstance(node, str) else None
    return rate if _number(rate) else None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
