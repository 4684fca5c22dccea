"""What the container probe reads: runtime, namespaces, limits, capabilities."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ContainerFacts:
    runtime: str | None = None  # docker | containerd | podman | kubernetes | None (bare host)
    runtime_evidence: list[str] = field(default_factory=list)
    network_mode: str | None = None  # host | bridge | unknown
    network_evidence: list[str] = field(default_factory=list)
    shm_size_bytes: int | None = None
    shm_free_bytes: int | None = None
    shm_writable: bool | None = None
    ipc_namespace: str | None = None  # ipc:[4026531839]
    ipc_host: bool | None = None
    memlock_soft: int | None = None  # bytes; -1 = unlimited
    memlock_hard: int | None = None
    capabilities: list[str] = field(default_factory=list)  # CAP_IPC_LOCK ... (effective set)
    dev_infiniband: list[str] = field(default_factory=list)  # entries of /dev/infiniband
    dev_infiniband_present: bool = False
    nofile_soft: int | None = None
