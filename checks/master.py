"""Network checks on the path to the master: name resolution, loopback, NAT, route, ports, MTU.

Background (docs/failures.md F01, F02, F05, F06, F20).
"""

from __future__ import annotations

import ipaddress

from checks import RANKS_STOPPED, Problem, check
from checks.container import on_bridge_network
from checks.netfacts import (
    describe,
    interface_named,
    interfaces_line,
    master_link,
    route_line,
    suggested_ifname,
)
from nccldoctor.facts import NetworkFacts, NodeFacts
from nccldoctor.model import Severity

_DOCKER_BRIDGE = ipaddress.ip_network("172.17.0.0/16")  # Docker's default bridge network
_PRIVATE_172 = ipaddress.ip_network("172.16.0.0/12")  # Docker's user-defined networks


@check(
    "host.hostname-loopback", area="network", category="interface_selection",
    explains=RANKS_STOPPED, remedy="map the hostname to its routable address in /etc/hosts",
)  # fmt: skip
def hostname_loopback(facts: NodeFacts) -> Problem | None:
    """The hostname resolves only to a loopback address (the 127.0.1.1 line in /etc/hosts)."""
    net = facts.network
    if not facts.multi_node or not net.hostname_addresses:
        return None
    if not all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in net.hostname_addresses):
        return None
    if net.master in (net.hostname, net.hostname.split(".")[0]) and _master_on_loopback(facts):
        return None  # the master's own name: master.loopback says it, with these lines
    ip = _routable_address(net)
    return Problem(
        Severity.WARN,
        f"hostname {net.hostname} resolves to {', '.join(net.hostname_addresses)}: gloo will advertise loopback",
        evidence=[
            f"{net.hostname} resolves to {', '.join(net.hostname_addresses)}"
            + ("" if net.live else " (the tree's /etc/hosts)"),
            *(f"/etc/hosts: {line}" for line in net.hosts_file_entries),
            "PyTorch: 'Unable to resolve hostname to a (local) address. Using the loopback address'",
        ],
        fix=(
            f"# in /etc/hosts, map the hostname to the routable address instead of "
            f"{net.hostname_addresses[0]}:\n"
            f"{ip} {net.hostname}\n"
            f"export GLOO_SOCKET_IFNAME={suggested_ifname(net)}"
        ),
    )


def _routable_address(net: NetworkFacts) -> str:
    """This node's address towards the master (not the loopback source of the master's own
    route to itself), for an /etc/hosts line."""
    route = net.route_to_master
    if route and route.source and not ipaddress.ip_address(route.source).is_loopback:
        return route.source
    iface = interface_named(net, suggested_ifname(net))
    if iface and iface.ipv4:
        return iface.ipv4[0].split("/")[0]
    routable = [a for i in net.interfaces if i.kind != "loopback" for a in i.ipv4]
    return routable[0].split("/")[0] if len(routable) == 1 else "<this node's routable IP>"


@check("master.unresolvable", area="network", category="env_config")
def master_unresolvable(facts: NodeFacts) -> Problem | None:
    """The master's name does not resolve on this node."""
    net = facts.network
    if not net.master or not net.master_resolve_error:
        return None
    return Problem(
        Severity.FAIL,
        f"the master {net.master} does not resolve on this node",
        evidence=[f"getaddrinfo({net.master}): {net.master_resolve_error}"],
        fix=(
            "Use the master's numeric IP on every node (--master <the master's IP>, or\n"
            "export MASTER_ADDR=<numeric IP of the master's fast interface>), or fix /etc/hosts\n"
            "or DNS so that every node resolves the same address."
        ),
    )


@check("master.loopback", area="network", category="connect_refused_or_timeout")
def master_loopback(facts: NodeFacts) -> Problem | None:
    """The master is localhost/loopback while peers are on other nodes."""
    net = facts.network
    if not _master_on_loopback(facts):
        return None
    addresses = ", ".join(net.master_addresses)
    if net.master in ("localhost", *net.master_addresses):  # loopback itself, not a name
        return Problem(
            Severity.FAIL,
            f"the master {net.master} is a loopback address: other nodes cannot reach it",
            evidence=[f"{net.master} -> {addresses}"],
            fix="export MASTER_ADDR=<the master's routable IP>  # the same value on every node",
        )
    # A name on loopback (Debian's 127.0.1.1 hostname line): the store listens on every
    # address, so the others join, but the ranks here advertise loopback and the other
    # nodes' ranks connect to their own 127.0.0.1.
    lines = net.master_hosts_entries
    where = "/etc/hosts: " + "; ".join(lines) if lines else "not from /etc/hosts"
    ip = _routable_address(net)
    if lines:
        fix = f"# in /etc/hosts replace {lines[0]!r} with:\n{ip} {net.master}"
    else:
        fix = f"# make {net.master} resolve to {ip} on this node (DNS, or /etc/hosts)"
    return Problem(
        Severity.FAIL,
        f"the master {net.master} resolves to {addresses} (loopback) on this node: it advertises "
        "loopback, and nodes that resolve it the same way cannot reach it",
        evidence=[
            f"{net.master} -> {addresses} on this node ({where})",
            "routable addresses here: "
            + (
                ", ".join(
                    f"{i.name} {a}" for i in net.interfaces if i.kind != "loopback" for a in i.ipv4
                )
                or "none"
            ),
            route_line(net) + ": gloo and NCCL would bind and advertise this",
        ],
        fix=f"{fix}\n# or give the master by IP on every node: --master {ip} (MASTER_ADDR={ip})",
    )


def _master_on_loopback(facts: NodeFacts) -> bool:
    """The master resolves only to loopback here, and the launcher does not say it is alone."""
    addresses = facts.network.master_addresses
    return (
        bool(addresses)
        and not _single_node(facts)
        and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)
    )


def _single_node(facts: NodeFacts) -> bool:
    """The launcher says every rank is local (WORLD_SIZE == LOCAL_WORLD_SIZE)."""
    env = facts.env.variables
    return "WORLD_SIZE" in env and env.get("WORLD_SIZE") == env.get("LOCAL_WORLD_SIZE")


@check("master.no-route", area="network", category="connect_refused_or_timeout")
def master_no_route(facts: NodeFacts) -> Problem | None:
    """The kernel has no route to the master."""
    route = facts.network.route_to_master
    if route is None or not route.error:
        return None
    return Problem(
        Severity.FAIL,
        f"no route to the master {route.destination}",
        evidence=[f"route lookup ({route.method}): {route.error}", interfaces_line(facts.network)],
        fix=f"ip route get {route.destination}  # add a route, or use the master's address on a shared subnet",
    )


@check(
    "master.nat-bridge", area="network", category="docker_network",
    explains=("cluster.advertised-address-shared", "run.ephemeral-port-blocked", *RANKS_STOPPED),
    remedy="run the containers with --network host",
)  # fmt: skip
def master_nat_bridge(facts: NodeFacts) -> Problem | None:
    """This node sits behind NAT (a Docker bridge): measured when the master saw another address
    than the one this node advertises, predicted from a route through a bridge gateway (where
    the container itself was not recognised, else container.bridge-network says it)."""
    net, route = facts.network, facts.network.route_to_master
    if route is None or on_bridge_network(facts):
        return None  # (a recognised bridge container: container.bridge-network says it all)
    fix = (
        "docker run --network host --ipc host ...  # on every node; publishing ports (-p) "
        "does not help NCCL, which uses random ports"
    )
    if net.seen_by_master and route.source and net.seen_by_master != route.source:
        return Problem(
            Severity.FAIL,
            f"this node sits behind NAT: it advertises {route.source}, the master sees "
            f"{net.seen_by_master}; NCCL's peers will not reach the advertised address",
            evidence=[
                f"advertised (route source): {route.source}",
                f"seen by the master (measured on nccldoctor's hello): {net.seen_by_master}",
                route_line(net),
            ],
            fix=fix,
        )
    if not route.gateway:
        return None
    gateway = ipaddress.ip_address(route.gateway)
    source = ipaddress.ip_address(route.source) if route.source else None
    iface = interface_named(net, route.interface)
    veth = iface is not None and iface.kind == "veth"
    on_bridge = gateway in _DOCKER_BRIDGE or (source is not None and source in _DOCKER_BRIDGE)
    if not on_bridge and not (veth and gateway in _PRIVATE_172):
        return None
    return Problem(
        Severity.FAIL,
        f"this node reaches the master from {source or route.interface} via gateway {gateway}: behind Docker NAT",
        evidence=[
            route_line(net),
            *([describe(iface)] if iface else []),
            "predicted from the route: NCCL advertises this private address; peers on other "
            "hosts cannot connect back",
        ],
        fix=fix,
    )


@check("network.ephemeral-ports", area="network", category="firewall_or_port")
def ephemeral_ports(facts: NodeFacts) -> Problem | None:
    """NCCL listens on ephemeral ports: say which range a firewall must let through."""
    ports = facts.network.ip_local_port_range
    if not facts.multi_node or not ports:
        return None
    low, high = ports
    return Problem(
        Severity.INFO,
        f"NCCL listens on random ports {low}-{high} besides MASTER_PORT: allow them between nodes",
        evidence=[f"/proc/sys/net/ipv4/ip_local_port_range: {low} {high}"],
        fix=(
            f"# allow TCP {low}-{high} and MASTER_PORT from the other nodes, e.g.:\n"
            f"iptables -A INPUT -p tcp -s <peer subnet> --dport {low}:{high} -j ACCEPT"
        ),
    )


@check("network.mtu", area="network", category="interface_selection")
def mtu(facts: NodeFacts) -> Problem | None:
    """The MTU of the interface to the master (jumbo, or unlike this node's others): compare nodes."""
    net = facts.network
    iface = master_link(net)
    if iface is None or iface.kind == "loopback" or iface.mtu is None:
        return None
    others = {
        i.name: i.mtu
        for i in net.interfaces
        if i is not iface and i.running and i.kind == "physical" and i.ipv4 and i.mtu
    }
    if iface.mtu == 1500 and all(m == 1500 for m in others.values()):
        return None
    return Problem(
        Severity.INFO,
        f"{iface.name} (to the master) has MTU {iface.mtu}; every node's path must use the same MTU",
        evidence=[
            f"{iface.name} mtu {iface.mtu}",
            *(f"{name} mtu {m}" for name, m in others.items()),
        ],
        fix=f"cat /sys/class/net/{iface.name}/mtu  # on every node; set one value end to end",
    )
