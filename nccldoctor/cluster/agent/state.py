"""What the node agent's phases share: the run being recorded and the handles one phase leaves
for the next (the store, the gate, the launched workers, the background imports)."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nccldoctor.cluster.agent import launcher, local, rendezvous
from nccldoctor.cluster.agent.gate import Gate
from nccldoctor.cluster.config import CheckConfig
from nccldoctor.cluster.diagnosis.node_report import NodeRun
from nccldoctor.cluster.records import NodeEntry, PhaseStatus
from nccldoctor.facts.isolation import Isolation
from nccldoctor.facts.world import Rejected

# What the agent tells its caller as it runs: a phase's lines, and nodes joining on the master.
Progress = Callable[[str | rendezvous.Joined], None]


class PhaseFailed(Exception):
    """A phase ended the run; its findings say why."""


@dataclass(frozen=True)
class PhaseEnd:
    """How a phase ended, as its row in ``phases`` says: ``status`` and a line of ``detail``
    (a phase that ends the run raises PhaseFailed instead)."""

    detail: str = ""
    status: PhaseStatus = PhaseStatus.OK

    @classmethod
    def skipped(cls, why: str) -> PhaseEnd:
        return cls(why, PhaseStatus.SKIPPED)


@dataclass
class AgentState:
    config: CheckConfig
    env: dict[str, str]
    command: list[str]
    progress: Progress
    run: NodeRun
    background: concurrent.futures.ThreadPoolExecutor
    torch: concurrent.futures.Future | None = None  # the background import of torch
    torch_loaded: threading.Event = field(default_factory=threading.Event)
    store: Any = None
    keys: rendezvous.Keys | None = None
    gate: Gate | None = None
    leader: local.Leader | None = None  # local rank 0 of several processes per node
    launched: list[launcher.Launched] = field(default_factory=list)
    entries: list[NodeEntry] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)  # store entries that were not ones
    bootstrap_probe: tuple[str, concurrent.futures.Future] | None = None
    started: float = field(default_factory=time.monotonic)
    verdict: int | None = None  # the cluster report's exit code, once known here
    isolation: Isolation | None = None  # the rounds' answer, on the master when they ran

    @property
    def node_dir(self) -> Path:
        """This run's own folder on this node: the ranks' folders go under it."""
        return self.config.run_dir
