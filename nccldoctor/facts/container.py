"""What the container probe reads: runtime, namespaces, limits, capabilities."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ContainerFacts:
    # docker | containerd | podman | kubernetes | container (runtime unknown) | None (bare host)
    runtime: str | None = None
    runtime_evidence: list[str] = field(default_factory=list)
    network_mode: str | None = None  # host | bridge | unknown
    network_evidence: list[str] = field(default_factory=list)
    default_interface: str | None = None  # the interface of the default route (/proc/net/route)
    shm_size_bytes: int | None = None
    shm_free_bytes: int | None = None
    shm_writable: bool | None = None
    shm_source: str | None = None  # "statvfs" | "mountinfo size=65536k"
    ipc_namespace: str | None = None  # ipc:[4026531839]
    ipc_host: bool | None = None
    memlock_soft: int | None = None  # bytes; -1 = unlimited
    memlock_hard: int | None = None
    cap_eff: str | None = None  # CapEff as /proc/self/status writes it (hex)
    capabilities: list[str] = field(default_factory=list)  # CAP_IPC_LOCK ... (effective set)
    dev_infiniband: list[str] = field(default_factory=list)  # entries of /dev/infiniband
    dev_infiniband_present: bool = False
    nofile_soft: int | None = None  # -1 = unlimited
    nofile_hard: int | None = None
