"""Shared readings of a node's network facts for the network checks (no checks here)."""

from __future__ import annotations

import ipaddress

from nccldoctor.facts.network import Interface, NetworkFacts


def interface_named(net: NetworkFacts, name: str | None) -> Interface | None:
    return next((i for i in net.interfaces if i.name == name), None)


def describe(i: Interface) -> str:
    addrs = ", ".join(i.ipv4 + i.ipv6) or "no address"
    state = "RUNNING" if i.running else f"not running (operstate {i.operstate or 'unknown'})"
    return f"{i.name}: {i.kind}, {state}, {addrs}"


def interfaces_line(net: NetworkFacts) -> str:
    return "interfaces on this node: " + ", ".join(
        f"{i.name}({i.kind}{'' if i.running else ', down'})" for i in net.interfaces
    )


def route_device(net: NetworkFacts) -> str | None:
    route = net.route_to_master
    return route.interface if route and not route.error else None


def reaches(iface: Interface, address: str) -> bool:
    """Is ``address`` on one of ``iface``'s subnets (reachable without a router)?"""
    target = ipaddress.ip_address(address.split("%")[0])
    return any(target in ipaddress.ip_interface(a).network for a in iface.ipv4 + iface.ipv6)


def route_line(net: NetworkFacts) -> str:
    r = net.route_to_master
    if r is None:
        return "no route lookup (no --master / MASTER_ADDR)"
    how = {"kernel": "ip route get", "table": "longest prefix in the captured route table"}.get(
        r.method, "scoped address"
    )
    via = f" via {r.gateway}" if r.gateway else ""
    src = f" src {r.source}" if r.source else ""
    return f"{how} {r.destination} -> dev {r.interface}{via}{src}"


def master_interface(net: NetworkFacts) -> str | None:
    """The interface that carries traffic to the master: the one holding the master's address
    when this node is the master (its kernel route is loopback), else the routed one."""
    route = net.route_to_master
    # the master's own addresses, and the source of its kernel route to itself (over lo)
    held = set(net.master_addresses) | ({route.source} if route and route.source else set())
    own = [
        i.name
        for i in net.interfaces
        if i.kind != "loopback" and any(a.split("/")[0] in held for a in i.ipv4 + i.ipv6)
    ]
    routed = interface_named(net, route_device(net))
    if routed is not None and routed.kind != "loopback":
        return routed.name
    return own[0] if own else None


def master_link(net: NetworkFacts) -> Interface | None:
    """The interface itself that carries traffic to the master (:func:`master_interface`)."""
    return interface_named(net, master_interface(net))


def suggested_ifname(net: NetworkFacts) -> str:
    """The interface to put in NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME."""
    return master_interface(net) or net.nccl_default_pick or "<interface that reaches the master>"
