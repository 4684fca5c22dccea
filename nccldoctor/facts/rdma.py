"""What the InfiniBand/RoCE probe reads from /sys/class/infiniband and /proc/modules."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Gid:
    index: int
    gid: str
    type: str | None = None  # "IB/RoCE v1" | "RoCE v2"
    ndev: str | None = None
    ipv4: str | None = None  # when the GID is IPv4-mapped


@dataclass
class IbPort:
    number: int
    state: str = ""  # ACTIVE | DOWN | INIT | ARMED
    phys_state: str = ""  # LinkUp | Disabled | Polling ...
    rate: str = ""  # "200 Gb/sec (4X HDR)"
    link_layer: str = ""  # InfiniBand | Ethernet
    gids: list[Gid] = field(default_factory=list)
    netdev: str | None = None
    state_raw: str = ""  # as the kernel wrote it: "4: ACTIVE"
    phys_state_raw: str = ""  # "5: LinkUp"


@dataclass
class Hca:
    name: str
    node_guid: str | None = None
    fw_ver: str | None = None
    ports: list[IbPort] = field(default_factory=list)
    netdevs: list[str] = field(default_factory=list)


@dataclass
class RdmaFacts:
    hcas: list[Hca] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)  # relevant loaded kernel modules
    peer_memory_module: str | None = None  # nvidia_peermem | nv_peer_mem | None
    peer_memory_evidence: list[str] = field(default_factory=list)  # files that prove it loaded
    modules_readable: bool = False  # /proc/modules could be read (else modules are unknown)
    read_errors: list[str] = field(default_factory=list)  # sysfs files missing or garbled
