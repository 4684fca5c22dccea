"""The nouns every part of nccldoctor shares: severities, categories, findings.

A Finding is what a check (or a matched log signature) says about one problem: a stable id, the
category it belongs to, how bad it is, the evidence that proves it and a fix the user can paste.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class Severity(enum.StrEnum):
    """How bad a finding is; ordered so that ``max()`` gives the worst."""

    OK = "ok"
    INFO = "info"
    WARN = "warn"
    FAIL = "fail"

    @property
    def rank(self) -> int:
        return _SEVERITY_ORDER[self]


_SEVERITY_ORDER = {Severity.OK: 0, Severity.INFO: 1, Severity.WARN: 2, Severity.FAIL: 3}


class AreaState(enum.StrEnum):
    """What an area's status line stands for when no finding judges the area: without one, an
    area with a status line passed. Views mark these "–" (nothing to judge) or "✗" (stopped),
    never "✓"."""

    NOT_APPLICABLE = "not-applicable"  # nothing of it here: no NVIDIA driver, no HCA
    NOT_MEASURED = "not-measured"  # the run ended before it: no rendezvous, no cross-node facts
    STOPPED = "stopped"  # the run stopped in it


# The category vocabulary shared by preflight checks, log signatures and cluster findings.
CATEGORIES: tuple[str, ...] = (
    "interface_selection",
    "connect_refused_or_timeout",
    "firewall_or_port",
    "ib_error",
    "ib_memlock",
    "shm_docker",
    "docker_network",
    "duplicate_gpu",
    "version_mismatch",
    "collective_timeout_hang",
    "remote_peer_closed",
    "cuda_error",
    "p2p_error",
    "gpu_visibility",
    "env_config",
    "data_corruption",
    "bandwidth",
    "nvls_fabric",
    "net_plugin",
    "other",
)

# The headings of the terminal and HTML views, in display order (flutter doctor's areas).
AREAS: tuple[str, ...] = (
    "gpu",
    "software",
    "nccl",
    "network",
    "rdma",
    "container",
    "environment",
    "cluster",
    "run",
    "logs",
    "nccl_tests",
    "ras",
)

AREA_TITLES: dict[str, str] = {
    "gpu": "GPU and driver",
    "software": "Software (Python, torch, CUDA, NCCL)",
    "nccl": "NCCL",
    "network": "Network",
    "rdma": "InfiniBand / RoCE",
    "container": "Container",
    "environment": "Environment variables",
    "cluster": "Cluster consistency",
    "run": "Cluster run",
    "logs": "NCCL logs",
    "nccl_tests": "nccl-tests output",
    "ras": "NCCL RAS",
}


@dataclass
class Finding:
    """One problem (or one clean bill of health) with the evidence behind it."""

    id: str
    category: str
    severity: Severity
    title: str
    evidence: list[str] = field(default_factory=list)
    fix: str = ""
    area: str = "nccl"
    links: list[str] = field(default_factory=list)
    node: str | None = None
    rank: int | None = None
    remedy: str = ""  # the fix in a few words, for the report's first line (its rule's)
    explained_by: str | None = None  # the id of the root cause this finding follows from

    def __post_init__(self) -> None:
        self.severity = Severity(self.severity)
        if self.category not in CATEGORIES:
            raise ValueError(f"finding {self.id}: unknown category {self.category!r}")
        if self.area not in AREAS:
            raise ValueError(f"finding {self.id}: unknown area {self.area!r}")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["severity"] = self.severity.value
        for optional in _OPTIONAL_KEYS:  # only where a rule says so: most findings have neither
            if not data[optional]:
                del data[optional]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


_OPTIONAL_KEYS = ("remedy", "explained_by")


def worst(findings: list[Finding]) -> Severity:
    """The worst severity among ``findings`` (OK when there are none)."""
    return max((f.severity for f in findings), key=lambda s: s.rank, default=Severity.OK)
