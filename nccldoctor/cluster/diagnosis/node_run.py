"""What one node's cluster run holds: each phase's result as the phase returned it (a record per
phase that finds or decides something), the phase rows, and what the ``run`` rules judge. The
agent's phases return the results (agent/phases/); the node report is built from the run at the
end (node_report.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from nccldoctor.cluster.records import NodeEntry, PhaseRow, WorkersSeen, World
from nccldoctor.facts import NetworkFacts, NodeFacts
from nccldoctor.facts.isolation import Isolation
from nccldoctor.facts.ranks import RankOutcome
from nccldoctor.facts.run import NcclBootstrap, PortProbe, RunObserved
from nccldoctor.facts.world import Rejected
from nccldoctor.model import AreaState, Finding


@dataclass(frozen=True)
class Preflight:
    """What preflight found on this node, its name in the run on the facts and findings."""

    facts: NodeFacts
    findings: tuple[Finding, ...]
    area_status: Mapping[str, str]
    area_state: Mapping[str, AreaState]
    cuda: bool  # this node would run NCCL (GPUs, a CUDA torch, no --backend gloo)


@dataclass(frozen=True)
class Role:
    """This node's part in the run, as reach decided it."""

    run_id: str  # "" until the master's gate told it
    master: bool  # it hosts the store and the gate


@dataclass(frozen=True)
class Place:
    """The world the rendezvous decided, and this node's place in it."""

    world: World
    node_rank: int | None  # None: the world closed before this node came
    entries: tuple[NodeEntry, ...] = ()  # on the master: every node's entry
    rejected: tuple[Rejected, ...] = ()  # on the master: store entries that were not ones


@dataclass(frozen=True)
class TcpMeasured:
    """The raw wire's throughput from this node to the master's gate."""

    gbps: float


# What a phase may return for the node run to hold: besides the records above, libnccl's own
# bootstrap and the port probe (observations the run rules judge), the workers' own record and
# the rounds' answer.
PhaseResult = (
    Preflight | Role | Place | NcclBootstrap | TcpMeasured | PortProbe | WorkersSeen | Isolation
)


@dataclass
class NodeRun:
    """Everything this node observed, turned into its report at the end: each phase's result
    (None: that phase did not get as far), the phase rows, and ``observed``, what the run rules
    judge: the results of bootstrap and ports, and what reach and rendezvous saw on the way,
    which they write as they go (a failed phase's observations stand too)."""

    node: str
    port: int = 0  # the store's port (--port)
    phases: list[PhaseRow] = field(default_factory=list)  # the agent's
    preflight: Preflight | None = None
    role: Role | None = None
    place: Place | None = None
    tcp: TcpMeasured | None = None
    workers: WorkersSeen | None = None  # None: they never started
    isolation: Isolation | None = None  # the rounds' answer, on the master when they ran
    aborted: str | None = None
    lost: list[str] = field(default_factory=list)  # sentences: nodes this one outlived
    # reach, the hello's reply, the port probe ...: what the run rules judge
    observed: RunObserved = field(init=False)

    def __post_init__(self) -> None:
        self.observed = RunObserved(self.node, self.port)

    def hold(self, result: PhaseResult | None) -> None:
        """Keep what a phase returned (None: nothing)."""
        match result:
            case Preflight():
                self.preflight = result
            case Role():
                self.role = result
            case Place():
                self.place = result
            case NcclBootstrap():
                self.observed.bootstrap = result
            case TcpMeasured():
                self.tcp = result
            case PortProbe():
                self.observed.port_probe = result
            case WorkersSeen():
                self.workers = result
            case Isolation():
                self.isolation = result

    @property
    def facts(self) -> NodeFacts | None:
        """Preflight's facts under this node's name, with what the run measured since in
        place of preflight's predictions: the address the master saw (the hello) and the
        interface libnccl itself picked (the bootstrap probe)."""
        if self.preflight is None:
            return None
        facts = self.preflight.facts
        network = facts.network
        if self.observed.hello:
            network = dataclasses.replace(network, seen_by_master=self.observed.hello.seen or None)
        nccl = self.observed.bootstrap
        if nccl and nccl.interface:
            forced = facts.env.socket_ifname
            network = record_nccl_pick(
                network, nccl.interface, forced is not None and not forced.ignored
            )
        return dataclasses.replace(facts, node=self.node, network=network)

    @property
    def findings(self) -> list[Finding]:
        """Preflight's findings, those about this node under its name in the world."""
        if self.preflight is None:
            return []
        named = self.preflight.facts.node
        return [
            dataclasses.replace(f, node=self.node if f.node == named else f.node)
            for f in self.preflight.findings
        ]

    @property
    def world(self) -> World | None:
        return self.place.world if self.place else None

    @property
    def node_rank(self) -> int | None:
        return self.place.node_rank if self.place else None

    @property
    def is_master(self) -> bool:
        return bool(self.role and self.role.master)

    @property
    def run_id(self) -> str:
        return self.role.run_id if self.role else ""

    @property
    def ranks(self) -> list[RankOutcome]:
        return self.workers.ranks if self.workers else []

    def rename(self, name: str) -> None:
        """The world's name for this node (its hostname with its node rank, when another
        node has the same: agent/rendezvous.py unique_names) on everything said so far."""
        old, self.node, self.observed.node = self.node, name, name
        for row in self.phases:
            if row.node == old:
                row.node = name


def record_nccl_pick(network: NetworkFacts, used: tuple[str, str], forced: bool) -> NetworkFacts:
    """The facts with libnccl's own bootstrap interface in place of NCCL's order applied to
    them (``forced``: NCCL_SOCKET_IFNAME chose it, so NCCL's default order is still unknown)."""
    measured = {"nccl_pick": used[0], "nccl_pick_address": used[1], "nccl_pick_measured": True}
    if not forced:
        measured |= {"nccl_default_pick": used[0], "nccl_default_pick_address": used[1]}
    return dataclasses.replace(network, **measured)
