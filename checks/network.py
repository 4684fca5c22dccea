"""Network checks: which interface NCCL and gloo will use, and whether it reaches the master.

Background (reference/failures.md F01-F07, nccl-logs.md §9): NCCL bootstraps over the first
interface its order picks (``ib*``, then anything but ``docker*``/``lo*``/``virbr*``, then
those), or over what NCCL_SOCKET_IFNAME names; every other rank must reach that address.
"""

from __future__ import annotations

import ipaddress

from checks import Problem, check
from nccldoctor.facts import NodeFacts
from nccldoctor.facts.env import IfList
from nccldoctor.facts.network import Interface, NetworkFacts
from nccldoctor.model import Severity
from nccldoctor.probes.nccl_rules import (
    candidates,
    find_interfaces,
    if_list_matches,
    socket_family,
)

_DOCKER_BRIDGE = ipaddress.ip_network("172.17.0.0/16")  # Docker's default bridge network
_PRIVATE_172 = ipaddress.ip_network("172.16.0.0/12")  # Docker's user-defined networks


def _forced(facts: NodeFacts) -> IfList | None:
    """NCCL_SOCKET_IFNAME as NCCL applies it (None when unset or ignored for being 1 char)."""
    value = facts.env.socket_ifname
    return value if value is not None and not value.ignored else None


def _iface(net: NetworkFacts, name: str | None) -> Interface | None:
    return next((i for i in net.interfaces if i.name == name), None)


def _describe(i: Interface) -> str:
    addrs = ", ".join(i.ipv4 + i.ipv6) or "no address"
    state = "RUNNING" if i.running else f"not running (operstate {i.operstate or 'unknown'})"
    return f"{i.name}: {i.kind}, {state}, {addrs}"


def _interfaces_line(net: NetworkFacts) -> str:
    return "interfaces on this node: " + ", ".join(
        f"{i.name}({i.kind}{'' if i.running else ', down'})" for i in net.interfaces
    )


def _route_iface(net: NetworkFacts) -> str | None:
    route = net.route_to_master
    return route.interface if route and not route.error else None


def _reaches(iface: Interface, address: str) -> bool:
    """Is ``address`` on one of ``iface``'s subnets (reachable without a router)?"""
    target = ipaddress.ip_address(address.split("%")[0])
    return any(target in ipaddress.ip_interface(a).network for a in iface.ipv4 + iface.ipv6)


def _route_line(net: NetworkFacts) -> str:
    r = net.route_to_master
    if r is None:
        return "no route lookup (no --master / MASTER_ADDR)"
    how = "ip route get" if r.method == "kernel" else "longest prefix in /proc/net/route"
    via = f" via {r.gateway}" if r.gateway else ""
    src = f" src {r.source}" if r.source else ""
    return f"{how} {r.destination} -> dev {r.interface}{via}{src}"


def _suggested_ifname(net: NetworkFacts) -> str:
    return _route_iface(net) or net.nccl_default_pick or "<interface that reaches the master>"


@check("socket.ifname-missing", area="network", category="interface_selection")
def ifname_missing(facts: NodeFacts) -> Problem | None:
    """NCCL_SOCKET_IFNAME matches no interface on this node."""
    forced = _forced(facts)
    if forced is None or not facts.network.interfaces:
        return None
    if any(if_list_matches(forced, i.name) for i in facts.network.interfaces):
        return None
    name = _suggested_ifname(facts.network)
    return Problem(
        Severity.FAIL,
        f"NCCL_SOCKET_IFNAME={forced.raw} matches no interface: NCCL init will fail",
        evidence=[
            f"NCCL_SOCKET_IFNAME={forced.raw} (from {facts.env.sources.get('NCCL_SOCKET_IFNAME', 'environment')})",
            _interfaces_line(facts.network),
            "NCCL then fails with 'Bootstrap : no socket interface found'",
        ],
        fix=f"export NCCL_SOCKET_IFNAME=={name}\nexport GLOO_SOCKET_IFNAME={name}",
    )


@check("socket.ifname-unusable", area="network", category="interface_selection")
def ifname_unusable(facts: NodeFacts) -> Problem | None:
    """NCCL_SOCKET_IFNAME matches only down, address-less, loopback or docker interfaces."""
    forced = _forced(facts)
    if forced is None:
        return None
    matched = [i for i in facts.network.interfaces if if_list_matches(forced, i.name)]
    if not matched:
        return None  # socket.ifname-missing says it
    family = socket_family(facts.env.effective.get("NCCL_SOCKET_FAMILY"))
    found = {name for name, _ in find_interfaces(candidates(matched), forced, family, 16)}
    usable = [i for i in matched if i.name in found]
    local_only = all(i.kind == "loopback" or i.name.startswith(("docker", "virbr")) for i in usable)
    if usable and not (local_only and facts.multi_node):
        return None
    name = _suggested_ifname(facts.network)
    why = (
        "none is running with a usable address: NCCL finds no interface"
        if not usable
        else "only loopback/docker interfaces: other nodes cannot reach them"
    )
    return Problem(
        Severity.FAIL,
        f"NCCL_SOCKET_IFNAME={forced.raw} matches {', '.join(i.name for i in matched)}, {why}",
        evidence=[f"NCCL_SOCKET_IFNAME={forced.raw}", *(_describe(i) for i in matched)],
        fix=f"export NCCL_SOCKET_IFNAME=={name}\nexport GLOO_SOCKET_IFNAME={name}",
    )


@check("socket.ifname-not-routed", area="network", category="interface_selection")
def ifname_not_routed(facts: NodeFacts) -> Problem | None:
    """NCCL_SOCKET_IFNAME makes NCCL use an interface that is not the route to the master."""
    net = facts.network
    pick, route_iface = _iface(net, net.nccl_pick), _route_iface(net)
    if _forced(facts) is None or pick is None or route_iface is None or pick.name == route_iface:
        return None
    if any(_reaches(pick, a) for a in net.master_addresses):
        return None
    return Problem(
        Severity.WARN,
        f"NCCL_SOCKET_IFNAME selects {pick.name}, but the master {net.master} is reached through {route_iface}",
        evidence=[
            f"NCCL_SOCKET_IFNAME={facts.env.socket_ifname.raw} -> NCCL bootstraps on "  # type: ignore[union-attr]
            f"{pick.name}:{net.nccl_pick_address}",
            _route_line(net),
            "peers must reach this node on the NCCL interface's address: check that they can",
        ],
        fix=f"export NCCL_SOCKET_IFNAME=={route_iface}\nexport GLOO_SOCKET_IFNAME={route_iface}",
    )


@check("gloo.ifname-missing", area="network", category="interface_selection")
def gloo_ifname_missing(facts: NodeFacts) -> Problem | None:
    """GLOO_SOCKET_IFNAME names an interface this node does not have."""
    names = facts.env.gloo_socket_ifname
    if not names or not facts.network.interfaces:
        return None
    have = {i.name for i in facts.network.interfaces}
    missing = [n for n in names if n not in have and not n.startswith(("^", "="))]
    if not missing:
        return None
    name = _suggested_ifname(facts.network)
    return Problem(
        Severity.FAIL,
        f"GLOO_SOCKET_IFNAME names {', '.join(missing)}, which this node does not have",
        evidence=[
            f"GLOO_SOCKET_IFNAME={','.join(names)}",
            _interfaces_line(facts.network),
            "gloo fails with 'Unable to find address for: <name>'",
        ],
        fix=f"export GLOO_SOCKET_IFNAME={name}",
    )


@check("gloo.ifname-syntax", area="network", category="env_config")
def gloo_ifname_syntax(facts: NodeFacts) -> Problem | None:
    """GLOO_SOCKET_IFNAME given NCCL's ^/= syntax, which gloo does not understand."""
    names = facts.env.gloo_socket_ifname
    odd = [n for n in names or () if n.startswith(("^", "="))]
    if not odd:
        return None
    return Problem(
        Severity.FAIL,
        "GLOO_SOCKET_IFNAME uses NCCL's ^/= syntax; gloo takes plain interface names only",
        evidence=[
            f"GLOO_SOCKET_IFNAME={','.join(names or ())}",
            f"gloo fails with 'Unable to find address for: {odd[0]}'",
        ],
        fix=f"export GLOO_SOCKET_IFNAME={_suggested_ifname(facts.network)}",
    )


@check("socket.default-pick-differs", area="network", category="interface_selection")
def default_pick_differs(facts: NodeFacts) -> Problem | None:
    """Without NCCL_SOCKET_IFNAME, NCCL would pick another interface than the route to the master."""
    net = facts.network
    pick, route_iface = _iface(net, net.nccl_default_pick), _route_iface(net)
    if _forced(facts) is not None or pick is None or route_iface is None:
        return None
    if pick.name == route_iface or any(_reaches(pick, a) for a in net.master_addresses):
        return None
    return Problem(
        Severity.WARN,
        f"NCCL would bootstrap on {pick.name}, but the master {net.master} is reached through {route_iface}",
        evidence=[
            f"NCCL's order (ib*, then not docker*/lo*/virbr*) picks {pick.name}:{net.nccl_default_pick_address}",
            _route_line(net),
            "every other rank must reach the bootstrap address; a different interface often is not routed",
        ],
        fix=f"export NCCL_SOCKET_IFNAME=={route_iface}\nexport GLOO_SOCKET_IFNAME={route_iface}",
    )


@check("socket.pick-virtual", area="network", category="interface_selection")
def pick_virtual(facts: NodeFacts) -> Problem | None:
    """NCCL would bootstrap on a bridge, tunnel, stray veth or a link-local address."""
    net = facts.network
    pick = _iface(net, net.nccl_pick)
    if not facts.multi_node or pick is None or not net.nccl_pick_address:
        return None
    address = ipaddress.ip_interface(net.nccl_pick_address).ip
    reasons = []
    if pick.kind in ("bridge", "tun"):
        reasons.append(f"{pick.name} is a {pick.kind}")
    if pick.kind == "veth" and pick.name != _route_iface(net):
        reasons.append(f"{pick.name} is a veth that does not carry the route to the master")
    if address.is_link_local:
        reasons.append(f"{address} is link-local: not routable to other nodes")
    if not reasons:
        return None
    name = _suggested_ifname(net)
    return Problem(
        Severity.WARN,
        f"NCCL would bootstrap on {pick.name}:{address}, which other nodes usually cannot reach",
        evidence=[*reasons, _describe(pick), _route_line(net)],
        fix=f"export NCCL_SOCKET_IFNAME=={name}\nexport GLOO_SOCKET_IFNAME={name}",
    )


@check("host.hostname-loopback", area="network", category="interface_selection")
def hostname_loopback(facts: NodeFacts) -> Problem | None:
    """The hostname resolves only to a loopback address (the 127.0.1.1 line in /etc/hosts)."""
    net = facts.network
    if not facts.multi_node or not net.hostname_addresses:
        return None
    if not all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in net.hostname_addresses):
        return None
    route = net.route_to_master
    ip = route.source if route and route.source else "<this node's routable IP>"
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
            f"# in /etc/hosts, map the hostname to the routable address instead of 127.0.1.1:\n"
            f"{ip} {net.hostname}\n"
            f"export GLOO_SOCKET_IFNAME={_suggested_ifname(net)}"
        ),
    )


@check("master.unresolvable", area="network", category="connect_refused_or_timeout")
def master_unresolvable(facts: NodeFacts) -> Problem | None:
    """The master's name does not resolve on this node."""
    net = facts.network
    if not net.master or not net.master_resolve_error:
        return None
    return Problem(
        Severity.FAIL,
        f"the master {net.master} does not resolve on this node",
        evidence=[f"getaddrinfo({net.master}): {net.master_resolve_error}"],
        fix="export MASTER_ADDR=<numeric IP of the master's fast interface>  # same on all nodes",
    )


@check("master.loopback", area="network", category="connect_refused_or_timeout")
def master_loopback(facts: NodeFacts) -> Problem | None:
    """The master is localhost/loopback while peers are on other nodes."""
    net = facts.network
    if not net.master_addresses or _single_node(facts):
        return None
    if not all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in net.master_addresses):
        return None
    return Problem(
        Severity.FAIL,
        f"the master {net.master} is a loopback address: other nodes cannot reach it",
        evidence=[f"{net.master} -> {', '.join(net.master_addresses)}"],
        fix="export MASTER_ADDR=<the master's routable IP>  # the same value on every node",
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
        evidence=[f"route lookup ({route.method}): {route.error}", _interfaces_line(facts.network)],
        fix=f"ip route get {route.destination}  # add a route, or use the master's address on a shared subnet",
    )


@check("master.nat-bridge", area="network", category="docker_network")
def master_nat_bridge(facts: NodeFacts) -> Problem | None:
    """The master is reached from a Docker bridge address through a gateway (NAT)."""
    net, route = facts.network, facts.network.route_to_master
    if route is None or not route.gateway:
        return None
    gateway = ipaddress.ip_address(route.gateway)
    source = ipaddress.ip_address(route.source) if route.source else None
    iface = _iface(net, route.interface)
    veth = iface is not None and iface.kind == "veth"
    on_bridge = gateway in _DOCKER_BRIDGE or (source is not None and source in _DOCKER_BRIDGE)
    if not on_bridge and not (veth and gateway in _PRIVATE_172):
        return None
    return Problem(
        Severity.FAIL,
        f"this node reaches the master from {source or route.interface} via gateway {gateway}: behind Docker NAT",
        evidence=[
            _route_line(net),
            *([_describe(iface)] if iface else []),
            "NCCL advertises this private address; peers on other hosts cannot connect back",
        ],
        fix="docker run --network host --ipc host ...  # on every node",
    )


@check("network.mtu", area="network", category="interface_selection")
def mtu(facts: NodeFacts) -> Problem | None:
    """The MTU of the interface to the master (jumbo, or unlike this node's others): compare nodes."""
    net = facts.network
    iface = _iface(net, _route_iface(net))
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
