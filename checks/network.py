"""Network checks: which interface NCCL and gloo will use (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME,
NCCL's own order), and whether it is the one that reaches the master.

Background (docs/failures.md F03, F04; docs/nccl-log-formats.md#interface-selection): NCCL bootstraps over the first
interface its order picks (``ib*``, then anything but ``docker*``/``lo*``/``virbr*``, then
those), or over what NCCL_SOCKET_IFNAME names; every other rank must reach that address.
"""

from __future__ import annotations

import ipaddress

from checks import RANKS_STOPPED, Problem, check
from checks.netfacts import (
    describe,
    interface_named,
    interfaces_line,
    master_interface,
    reaches,
    route_line,
    suggested_ifname,
)
from nccldoctor.facts import NodeFacts
from nccldoctor.facts.env import IfList
from nccldoctor.model import Severity
from nccldoctor.nccl.rules import (
    candidates,
    find_interfaces,
    if_list_matches,
    socket_family,
)


def _forced(facts: NodeFacts) -> IfList | None:
    """NCCL_SOCKET_IFNAME as NCCL applies it (None when unset or ignored for being 1 char)."""
    value = facts.env.socket_ifname
    return value if value is not None and not value.ignored else None


@check(
    "socket.ifname-missing", area="network", category="interface_selection",
    explains=RANKS_STOPPED, remedy="set NCCL_SOCKET_IFNAME to an interface this node has",
)  # fmt: skip
def ifname_missing(facts: NodeFacts) -> Problem | None:
    """NCCL_SOCKET_IFNAME matches no interface on this node."""
    forced = _forced(facts)
    if forced is None or not facts.network.interfaces:
        return None
    if any(if_list_matches(forced, i.name) for i in facts.network.interfaces):
        return None
    name = suggested_ifname(facts.network)
    return Problem(
        Severity.FAIL,
        f"NCCL_SOCKET_IFNAME={forced.raw} matches no interface: NCCL init will fail",
        evidence=[
            f"NCCL_SOCKET_IFNAME={forced.raw} (from {facts.env.sources.get('NCCL_SOCKET_IFNAME', 'environment')})",
            interfaces_line(facts.network),
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
    name = suggested_ifname(facts.network)
    why = (
        "none is running with a usable address: NCCL finds no interface"
        if not usable
        else "only loopback/docker interfaces: other nodes cannot reach them"
    )
    return Problem(
        Severity.FAIL,
        f"NCCL_SOCKET_IFNAME={forced.raw} matches {', '.join(i.name for i in matched)}, {why}",
        evidence=[f"NCCL_SOCKET_IFNAME={forced.raw}", *(describe(i) for i in matched)],
        fix=f"export NCCL_SOCKET_IFNAME=={name}\nexport GLOO_SOCKET_IFNAME={name}",
    )


@check("socket.ifname-not-routed", area="network", category="interface_selection")
def ifname_not_routed(facts: NodeFacts) -> Problem | None:
    """NCCL_SOCKET_IFNAME makes NCCL use an interface that is not the route to the master."""
    net, forced = facts.network, _forced(facts)
    pick, wanted = interface_named(net, net.nccl_pick), master_interface(net)
    if forced is None or pick is None or wanted is None or pick.name == wanted:
        return None
    if any(reaches(pick, a) for a in net.master_addresses):
        return None
    return Problem(
        Severity.WARN,
        f"NCCL_SOCKET_IFNAME selects {pick.name}, but the master {net.master} is reached through {wanted}",
        evidence=[
            f"NCCL_SOCKET_IFNAME={forced.raw} -> NCCL bootstraps on {pick.name}:{net.nccl_pick_address}",
            route_line(net),
            "peers must reach this node on the NCCL interface's address: check that they can",
        ],
        fix=f"export NCCL_SOCKET_IFNAME=={wanted}\nexport GLOO_SOCKET_IFNAME={wanted}",
    )


@check("socket.ifname-prefix-broad", area="network", category="interface_selection")
def ifname_prefix_broad(facts: NodeFacts) -> Problem | None:
    """A bare NCCL_SOCKET_IFNAME entry is a prefix that matches several interfaces (eth -> eth10)."""
    forced = _forced(facts)
    if forced is None or forced.exact or forced.exclude:
        return None
    names = [i.name for i in facts.network.interfaces]
    broad = {e: [n for n in names if n.startswith(e)] for e in forced.entries}
    broad = {e: hits for e, hits in broad.items() if len(hits) > 1}
    if not broad:
        return None
    return Problem(
        Severity.INFO,
        f"NCCL_SOCKET_IFNAME={forced.raw} is a prefix list matching "
        + ", ".join(n for hits in broad.values() for n in hits)
        + ": NET/Socket uses every match",
        evidence=[f"'{e}' matches {', '.join(hits)}" for e, hits in broad.items()],
        fix=f"export NCCL_SOCKET_IFNAME=={suggested_ifname(facts.network)}  # = makes names exact",
    )


@check(
    "gloo.ifname-missing", area="network", category="interface_selection",
    explains=RANKS_STOPPED, remedy="set GLOO_SOCKET_IFNAME to an interface this node has",
)  # fmt: skip
def gloo_ifname_missing(facts: NodeFacts) -> Problem | None:
    """GLOO_SOCKET_IFNAME names an interface this node does not have, or one without an address."""
    names = facts.env.gloo_socket_ifname
    if not names or not facts.network.interfaces:
        return None
    usable = {i.name for i in facts.network.interfaces if i.ipv4 or i.ipv6}
    missing = [n for n in names if n not in usable and not n.startswith(("^", "="))]
    if not missing:
        return None  # (NCCL's ^/= syntax: gloo.ifname-syntax says it)
    name = suggested_ifname(facts.network)
    return Problem(
        Severity.FAIL,
        f"GLOO_SOCKET_IFNAME={','.join(names)} names {', '.join(missing)}, which this node does "
        "not have with an address",
        evidence=[
            f"GLOO_SOCKET_IFNAME={','.join(names)}",
            interfaces_line(facts.network),
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
        fix=f"export GLOO_SOCKET_IFNAME={suggested_ifname(facts.network)}",
    )


@check("socket.default-pick-differs", area="network", category="interface_selection")
def default_pick_differs(facts: NodeFacts) -> Problem | None:
    """Without NCCL_SOCKET_IFNAME, NCCL picks another interface than the route to the master
    (measured by libnccl's own bootstrap in a check run, else predicted by NCCL's order)."""
    net = facts.network
    pick, wanted = interface_named(net, net.nccl_default_pick), master_interface(net)
    if _forced(facts) is not None or pick is None or wanted is None or pick.name == wanted:
        return None
    if any(reaches(pick, a) for a in net.master_addresses):
        return None
    how = (
        "measured: libnccl's ncclGetUniqueId bootstraps on"
        if net.nccl_pick_measured
        else "NCCL's order (ib*, then not docker*/lo*/virbr*) picks"
    )
    return Problem(
        Severity.FAIL if net.nccl_pick_measured else Severity.WARN,
        f"NCCL {'bootstraps' if net.nccl_pick_measured else 'would bootstrap'} on {pick.name}, "
        f"but the master {net.master} is reached through {wanted}",
        evidence=[
            f"{how} {pick.name}:{net.nccl_default_pick_address}",
            route_line(net),
            "every other rank must reach the bootstrap address; a different interface often is not routed",
        ],
        fix=f"export NCCL_SOCKET_IFNAME=={wanted}\nexport GLOO_SOCKET_IFNAME={wanted}",
    )


@check(
    "socket.pick-virtual", area="network", category="interface_selection",
    explains=RANKS_STOPPED, remedy="set NCCL_SOCKET_IFNAME to the interface the nodes share",
)  # fmt: skip
def pick_virtual(facts: NodeFacts) -> Problem | None:
    """NCCL would bootstrap on loopback, a bridge, tunnel, stray veth or a link-local address."""
    net = facts.network
    pick = interface_named(net, net.nccl_pick)
    if not facts.multi_node or pick is None or not net.nccl_pick_address:
        return None
    address = ipaddress.ip_interface(net.nccl_pick_address).ip
    reasons = []
    if pick.kind == "loopback" or address.is_loopback:
        reasons.append(f"{pick.name} is loopback: every peer would connect to itself")
    wanted = master_interface(net)
    off_route = wanted not in (None, pick.name) and not any(
        reaches(pick, a) for a in net.master_addresses
    )
    # A bridge carrying the route to the master is the host's uplink (br0 with the NIC as its
    # port, as on a hypervisor); docker0 and virbr0 carry no such route.
    if pick.kind == "tun" or (pick.kind == "bridge" and (off_route or wanted is None)):
        reasons.append(f"{pick.name} is a {pick.kind}")
    if pick.kind == "veth" and off_route:
        reasons.append(f"{pick.name} is a veth that does not carry the route to the master")
    if address.is_link_local:
        reasons.append(f"{address} is link-local: not routable to other nodes")
    if not reasons:
        return None
    name = suggested_ifname(net)
    return Problem(
        Severity.FAIL if address.is_loopback else Severity.WARN,
        f"NCCL would bootstrap on {pick.name}:{address}, which other nodes "
        + ("cannot reach" if address.is_loopback else "usually cannot reach"),
        evidence=[*reasons, describe(pick), route_line(net)],
        fix=f"export NCCL_SOCKET_IFNAME=={name}\nexport GLOO_SOCKET_IFNAME={name}",
    )
