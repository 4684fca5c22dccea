"""What the node agent's phases share: the run that holds their results and the handles one phase
leaves for the next (the store, the gate, the launched workers, the background imports)."""

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
from nccldoctor.cluster.diagnosis.node_run import NodeRun, PhaseResult
from nccldoctor.cluster.records import PhaseStatus

# What the agent tells its caller as it runs: a phase's lines, and nodes joining on the master.
Progress = Callable[[str | rendezvous.Joined], None]


class PhaseFailed(Exception):
    """A phase ended the run; its findings say why, and ``result`` is what it found before."""

    def __init__(self, why: str, result: PhaseResult | None = None) -> None:
        super().__init__(why)
        self.result = result


@dataclass(frozen=True)
class PhaseEnd:
    """How a phase ended, as its row in ``phases`` says: ``status`` and a line of ``detail``,
    and what it found for the node run to hold (a phase that ends the run raises PhaseFailed
    instead)."""

    detail: str = ""
    status: PhaseStatus = PhaseStatus.OK
    result: PhaseResult | None = None

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
    bootstrap_probe: tuple[str, concurrent.futures.Future] | None = None
    started: float = field(default_factory=time.monotonic)

    @property
    def node_dir(self) -> Path:
        """This run's own folder on this node: the ranks' folders go under it."""
        return self.config.run_dir
