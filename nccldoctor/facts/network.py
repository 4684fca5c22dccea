"""What the network probe reads: interfaces, the kernel's route to the master, name resolution."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Interface:
    name: str
    index: int | None = None
    up: bool = False
    running: bool | None = None
    mtu: int | None = None
    speed_mbps: int | None = None
    ipv4: list[str] = field(default_factory=list)  # "198.18.0.2/24"
    ipv6: list[str] = field(default_factory=list)
    kind: str = "physical"  # physical | loopback | bridge | veth | bond | vlan | tun | virtual
    driver: str | None = None
    veth_peer_ifindex: int | None = None  # iflink when it differs from ifindex
    operstate: str | None = None  # up | down | unknown | dormant ... (/sys/class/net/X/operstate)
    mac: str | None = None
    bridge_ports: list[str] = field(default_factory=list)  # brif/* of a bridge
    bond_slaves: list[str] = field(default_factory=list)


@dataclass
class Route:
    """The kernel's answer to "how do I reach ADDR" (`ip route get`)."""

    destination: str
    interface: str | None = None
    source: str | None = None
    gateway: str | None = None
    error: str | None = None
    method: str = "kernel"  # kernel (`ip route get`) | table (longest prefix, /proc/net/*route)
    # | scope (a link-local address whose %scope names the interface)


@dataclass
class NetworkFacts:
    hostname: str = ""
    fqdn: str | None = None
    hostname_addresses: list[str] = field(default_factory=list)  # what getaddrinfo(hostname) gave
    hosts_file_entries: list[str] = field(default_factory=list)  # /etc/hosts lines naming hostname
    interfaces: list[Interface] = field(default_factory=list)
    master: str | None = None  # as given by the user
    master_addresses: list[str] = field(default_factory=list)  # resolved
    master_resolve_error: str | None = None
    master_hosts_entries: list[str] = field(default_factory=list)  # /etc/hosts lines naming it
    route_to_master: Route | None = None
    ip_local_port_range: list[int] | None = None  # [low, high]; a list so JSON round-trips
    nccl_default_pick: str | None = None  # what NCCL's documented order would pick
    nccl_default_pick_address: str | None = None
    nccl_pick: str | None = None  # what NCCL's bootstrap would use with this env (IFNAME honoured)
    nccl_pick_address: str | None = None
    # What `nccldoctor check` measured, where a probe of the files could only predict: the
    # picks above came from libnccl's own bootstrap (ncclGetUniqueId), and the address the
    # master saw this node's hello come from (NAT when it is not the route's source).
    nccl_pick_measured: bool = False
    seen_by_master: str | None = None
    live: bool = True  # read from the running kernel (False: a captured tree under --root)
    address_source: str | None = None  # psutil | <root>/run/nccldoctor/ip-addr.json | None
    read_errors: list[str] = field(default_factory=list)  # files that were missing or garbled
