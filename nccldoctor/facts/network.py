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


@dataclass
class Route:
    """The kernel's answer to "how do I reach ADDR" (`ip route get`)."""

    destination: str
    interface: str | None = None
    source: str | None = None
    gateway: str | None = None
    error: str | None = None


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
    route_to_master: Route | None = None
    ip_local_port_range: tuple[int, int] | None = None
    nccl_default_pick: str | None = None  # what NCCL's documented order would pick
