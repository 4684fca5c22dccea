"""The Facts a log shows of each host, built as the probes build them, so that the network rules
of ``check`` judge a pasted log exactly as they judge a live node
(docs/nccl-log-formats.md#network-facts).

A log shows, per host (its processes' ``host`` field): the interfaces NCCL listed, in its order,
with their addresses (bootstrap, NET/Socket; 2.2–2.3 each found interface), which one it
bootstraps on, the ``NCCL_SOCKET_*`` settings it echoed, and whether the job spans hosts. It
does not show the host's other interfaces, its routes or the master's address: those fields
stay empty, and the rules that need them stay silent. Every record carries the log lines its
facts came from, which the findings quote.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from nccldoctor.facts import NodeFacts
from nccldoctor.facts.network import Interface
from nccldoctor.nccl.rules import candidates, default_pick, parse_if_list
from nccldoctor.ncclog.records import LogSet, ProcessLog

# What an interface is, where its name says it (the kernel's and the container runtimes'
# conventions; NCCL's own order sets docker* and virbr* apart the same way). Any other name
# is left "physical", the Facts' default, which no rule remarks on.
KIND_BY_PREFIX: tuple[tuple[str, str], ...] = (
    ("lo", "loopback"),
    ("docker", "bridge"),
    ("virbr", "bridge"),
    ("br-", "bridge"),
    ("veth", "veth"),
    ("tun", "tun"),
    ("tap", "tun"),
)
# Docker's default bridge network: a container on it gets eth0 in this subnet, and a host name
# that is the container's id (its first 12 hex digits) unless --hostname was given
DOCKER_DEFAULT_BRIDGE = ipaddress.ip_network("172.17.0.0/16")
_CONTAINER_ID = re.compile(r"[0-9a-f]{12}")


def address_facts(address: str) -> dict[str, Any]:
    """What an address NCCL printed is: its family and whether it is loopback or link-local
    (``fe80::1%eth0``: the scope is part of what NCCL prints). Empty when it is not one."""
    try:
        ip = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return {}
    return {
        "family": f"IPv{ip.version}",
        "loopback": ip.is_loopback,
        "link_local": ip.is_link_local,
    }


def interface_kind(name: str, address: str) -> str:
    if address_facts(address).get("loopback"):
        return "loopback"
    return next((kind for prefix, kind in KIND_BY_PREFIX if name.startswith(prefix)), "physical")


@dataclass
class LogHost:
    """One host of a log: the Facts its lines show, and those lines."""

    facts: NodeFacts
    lines: list[str] = field(default_factory=list)
    # the log shows every rank of the job on this host (facts.multi_node says it spans hosts;
    # neither: the log does not say)
    alone: bool = False


def _listed(procs: list[ProcessLog]) -> list[tuple[str, str]]:
    """(name, address) of every interface the host's processes listed, in NCCL's order:
    the bootstrap's, then NET/Socket's, then those 2.2–2.3 printed one by one."""
    seen: dict[str, str] = {}
    for p in procs:
        found = [f for f in p.found_ifs if "ifname" in f]
        for entry in ([p.bootstrap] if p.bootstrap else []) + p.socket_ifs + found:
            if entry["address"]:  # 2.3's device list names them only
                seen.setdefault(entry["ifname"], entry["address"])
    return list(seen.items())


def _spans_hosts(logs: LogSet, procs: list[ProcessLog], own: set[str]) -> bool:
    """The log shows peers on other hosts: other hosts' lines, NCCL's node count, connections
    NCCL made over the network, or a connect to an address none of this host's interfaces
    has (``own``)."""
    if len({p.host for p in logs.processes.values()}) > 1:
        return True
    comms = [c for p in procs for c in p.comms.values()]
    if any((c.nnodes or 0) > 1 for c in comms):
        return True
    if any(label.startswith("NET/") for c in comms for label in c.transports):
        return True
    targets = {t.split("<")[0] for p in procs for t in [*p.connect_errors, *p.connect_retries]}
    return any(
        facts and not facts["loopback"] and target.split("%")[0] not in own
        for target in targets
        if (facts := address_facts(target))
    )


def _alone(procs: list[ProcessLog]) -> bool:
    """Every rank of a communicator is on this host: NCCL counted one node, or the host's
    processes hold as many ranks as the communicator has, or connected without the network."""
    comms = [c for p in procs for c in p.comms.values()]
    if any(c.nnodes == 1 for c in comms):
        return True
    sizes = {c.nranks for c in comms if c.nranks}
    ranks = {c.rank for c in comms if c.rank is not None}
    if sizes and len(ranks) >= max(sizes):
        return True
    labels = {label for c in comms for label in c.transports}
    return bool(labels) and not any(label.startswith(("NET/", "COLLNET/")) for label in labels)


def _host(logs: LogSet, host: str, procs: list[ProcessLog]) -> LogHost:
    facts = NodeFacts(node=host, root="(log)")
    net = facts.network
    net.hostname, net.live, net.address_source = host, False, "NCCL log"
    for name, address in _listed(procs):
        ip = address.split("%")[0]
        family = address_facts(ip).get("family")
        iface = Interface(name=name, up=True, running=True, kind=interface_kind(name, ip))
        if family == "IPv4":
            iface.ipv4.append(ip)
        elif family == "IPv6":
            iface.ipv6.append(address)
        net.interfaces.append(iface)
    found = default_pick(candidates(net.interfaces), None)  # NCCL's order over what it listed
    net.nccl_default_pick, net.nccl_default_pick_address = found or (None, None)
    boots = Counter((p.bootstrap["ifname"], p.bootstrap["address"]) for p in procs if p.bootstrap)
    if boots:
        (name, address), _ = boots.most_common(1)[0]
        net.nccl_pick, net.nccl_pick_address = name, address.split("%")[0]
        net.nccl_pick_measured = True  # NCCL printed it
    env = facts.env
    for p in procs:
        for name, value in p.env.items():
            env.variables.setdefault(name, value)
            env.sources.setdefault(name, "NCCL log")
    env.effective = dict(env.variables)
    if "NCCL_SOCKET_IFNAME" in env.variables:
        env.socket_ifname = parse_if_list(env.variables["NCCL_SOCKET_IFNAME"])
    own = {a.split("%")[0] for i in net.interfaces for a in i.ipv4 + i.ipv6}
    facts.multi_node = _spans_hosts(logs, procs, own)
    facts.local_ranks = len(procs)
    _container(facts, host)
    return LogHost(facts, _quoted(procs), not facts.multi_node and _alone(procs))


MAX_QUOTED = 8
# the facts of ProcessLog.quotes the Facts here are built from: what the findings stand on
QUOTED = ("bootstrap", "socket", "NCCL_SOCKET_IFNAME", "NCCL_SOCKET_FAMILY")


def _quoted(procs: list[ProcessLog]) -> list[str]:
    """The lines the host's Facts came from, one per message: every rank of a host prints the
    same bootstrap line."""
    said: dict[str, str] = {}
    for fact in QUOTED:
        for p in procs:
            line = p.quotes.get(fact)
            if line is not None:
                said.setdefault(line[line.find(" NCCL ") + 1 :], line)
    return list(said.values())[:MAX_QUOTED]


def _container(facts: NodeFacts, host: str) -> None:
    """A container on Docker's default bridge, where the log shows it: NCCL bootstraps on an
    address of that subnet (not on the host's own docker0, which is the bridge itself)."""
    pick, address = facts.network.nccl_pick, facts.network.nccl_pick_address
    if pick is None or address is None or pick.startswith("docker"):
        return
    try:
        on_bridge = ipaddress.ip_address(address) in DOCKER_DEFAULT_BRIDGE
    except ValueError:
        return
    if not on_bridge or not _CONTAINER_ID.fullmatch(host):  # a host's own network may be
        return  # in 172.17/16 too (cloud VPCs): the container's id as host name tells them apart
    c = facts.container
    c.runtime, c.network_mode = "docker", "bridge"
    c.runtime_evidence = [f"host name {host}: a container's id, as Docker names its containers"]
    c.network_evidence = [
        f"NCCL bootstraps on {pick}:{address}, an address of Docker's default bridge network "
        f"{DOCKER_DEFAULT_BRIDGE}"
    ]


def log_hosts(logs: LogSet) -> list[LogHost]:
    """The Facts of each host the logs show (the hosts NCCL's lines name), in order."""
    by_host: dict[str, list[ProcessLog]] = {}
    for p in logs.processes.values():
        by_host.setdefault(p.host, []).append(p)
    return [_host(logs, host, procs) for host, procs in by_host.items()]
