"""Facts: plain data the probes read off one node. Checks judge them; nothing here decides."""

from __future__ import annotations

from dataclasses import dataclass, field

from nccldoctor.facts.container import ContainerFacts
from nccldoctor.facts.env import EnvFacts
from nccldoctor.facts.gpu import GpuFacts
from nccldoctor.facts.network import NetworkFacts
from nccldoctor.facts.rdma import RdmaFacts
from nccldoctor.facts.serde import from_dict, to_dict
from nccldoctor.facts.software import SoftwareFacts


@dataclass
class ProbeError:
    """A probe that crashed: its name and the error, kept as data."""

    probe: str
    error: str


@dataclass
class NodeFacts:
    node: str = ""  # hostname, or the name the cluster run gave this node
    root: str = "/"
    gpu: GpuFacts = field(default_factory=GpuFacts)
    container: ContainerFacts = field(default_factory=ContainerFacts)
    network: NetworkFacts = field(default_factory=NetworkFacts)
    rdma: RdmaFacts = field(default_factory=RdmaFacts)
    env: EnvFacts = field(default_factory=EnvFacts)
    software: SoftwareFacts = field(default_factory=SoftwareFacts)
    probe_errors: list[ProbeError] = field(default_factory=list)
    multi_node: bool = False  # a master or WORLD_SIZE > local GPUs says peers are elsewhere
    local_ranks: int | None = None  # ranks this node runs (--procs-per-node, LOCAL_WORLD_SIZE)
    # The backend of the cluster run this node is judged in (nccl, gloo); None in preflight, which
    # judges a node for NCCL. A run on gloo needs no GPU (checks/gpu.py).
    backend: str | None = None
    backend_asked: bool = False  # chosen with --backend, not by the run for want of a GPU


__all__ = [
    "ContainerFacts",
    "EnvFacts",
    "GpuFacts",
    "NetworkFacts",
    "NodeFacts",
    "ProbeError",
    "RdmaFacts",
    "SoftwareFacts",
    "from_dict",
    "to_dict",
]
