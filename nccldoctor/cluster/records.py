"""What crosses between the cluster's rooms (docs/design.md#records): agent/, worker/ and
diagnosis/ import these, never each other's, so that none of them depends on another in a
circle.

- The worker's phases, defined once: the worker runs them in this order (cluster/worker/rank.py)
  under these deadlines, its fault hooks name them, the agent's watchdog budgets them, the
  verdict orders stopped ranks by them.
- What a worker tells its agent as it goes: each line of its ``events.jsonl``
  (:class:`WorkerEvent`); and the rows of the report's ``phases`` (:class:`PhaseRow`), the agent's
  own phases' and each rank's, which the node report holds with what the workers came to
  (:class:`WorkersSeen`).
- What crosses node ↔ master: a node's hello at the master's gate (:class:`Hello`, the gate's
  record of it), its entry on the store (:class:`NodeEntry`), the world the master plans from
  the entries (:class:`World`); the merge and the ``world`` rules read them.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from nccldoctor.facts import NodeFacts
from nccldoctor.facts.ranks import RankOutcome, RankResult
from nccldoctor.facts.serde import from_dict, read_fields, to_dict
from nccldoctor.jsondoc import json_object, parse


@dataclass(frozen=True)
class WorkerPhase:
    name: str
    budget: tuple[str, ...]  # the timeouts (cluster/timeouts.py) whose sum bounds the phase


PHASES = (
    WorkerPhase("init", ("init",)),
    WorkerPhase("barrier", ("barrier",)),
    WorkerPhase("allreduce_correctness", ("collective",)),
    # the sweep's budget trims its sizes; the collective under way when it runs out may finish
    WorkerPhase("bandwidth", ("bandwidth_budget", "collective")),
    WorkerPhase("ddp", ("ddp",)),
    WorkerPhase("checksum", ("collective",)),
    WorkerPhase("destroy", ("destroy",)),
)
WORKER_PHASES = tuple(p.name for p in PHASES)
# The timeouts a worker needs, in the order of the phases that first use them
PHASE_TIMEOUTS = tuple(dict.fromkeys(name for p in PHASES for name in p.budget))


class EventStatus(StrEnum):
    """Where a phase is: it started, ended well or badly, or is still running."""

    START = "start"
    OK = "ok"
    FAIL = "fail"
    HEARTBEAT = "heartbeat"


@dataclass(frozen=True)
class WorkerEvent:
    """One line of a rank's ``events.jsonl``: the worker writes it as it goes (workerwatch), the
    agent's watchdog reads it while the worker runs, and after it died in any way."""

    t: float  # epoch seconds
    rank: int
    phase: str
    status: EventStatus
    detail: str = ""

    def to_line(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_line(cls, line: bytes | str) -> WorkerEvent | None:
        """The event ``line`` holds, or None when it holds none (garbled, cut, not the worker's)."""
        data = json_object(line)
        if data is None:
            return None
        t, rank, phase = data.get("t"), data.get("rank"), data.get("phase")
        status, detail = data.get("status"), data.get("detail", "")
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
            return None
        if isinstance(rank, bool) or not isinstance(rank, int):
            return None
        if not isinstance(phase, str) or not isinstance(detail, str):
            return None
        try:
            return cls(float(t), rank, phase, EventStatus(status), detail)
        except ValueError:  # a status this version does not know
            return None


class PhaseStatus(StrEnum):
    """How a phase of the agent's or of a rank went, in the report's ``phases``."""

    RUNNING = "running"
    OK = "ok"
    FAIL = "fail"
    TIMEOUT = "timeout"
    SKIPPED = "skipped"


@dataclass
class PhaseRow:
    """A row of the report's ``phases`` (docs/report.md): one phase of this node's agent (``rank``
    None) or of one rank; the agent fills it in as the phase runs."""

    node: str
    rank: int | None
    phase: str
    status: PhaseStatus = PhaseStatus.RUNNING
    started: float = field(default_factory=time.time)  # epoch seconds
    ended: float | None = None
    duration_s: float | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        # its fields are plain values: a shallow copy (a merge writes every node's rows)
        return {**vars(self), "status": self.status.value}  # the plain string, not the enum

    @classmethod
    def from_dict(cls, data: Any) -> PhaseRow:
        """A row as :meth:`to_dict` wrote it, in another node's report.

        Raises:
            ValueError: not such a row: not an object, a key missing, a value of another type,
                a status this version does not know.
        """
        return read_fields(cls, data, every_key=True)


@dataclass
class WorkersSeen:
    """What this node's workers came to, as its agent read their folders: each rank's outcome,
    its phase rows and the result it wrote (none when it wrote none)."""

    ranks: list[RankOutcome] = field(default_factory=list)
    phases: list[PhaseRow] = field(default_factory=list)
    results: dict[int, RankResult] = field(default_factory=dict)


# How a worker's own phase watch ends its error when a phase outlived its deadline: the rank was
# blocked, not told "timeout" by the backend, so the agent counts it among the stuck ones.
WORKER_DEADLINE = "(worker deadline)"


def phase_budget(phase: str, timeouts: object) -> float:
    """Seconds a worker may stay in ``phase`` under ``timeouts`` (the agent's ``Timeouts`` or the
    worker's ``WorkerTimeouts``: both carry every budget); a phase not in the table gets the
    longest."""
    budgets = {p.name: sum(getattr(timeouts, name) for name in p.budget) for p in PHASES}
    return budgets.get(phase, max(budgets.values()))


@dataclass
class Hello:
    """One node's hello as the master's gate saw it."""

    node: str
    advertised: str
    seen: str  # getpeername() of the accepted connection
    accepted: bool
    reason: str = ""  # why it was refused
    t: float = 0.0


@dataclass
class NodeEntry:
    """One node as it joined, with its Facts: the node writes it to the store
    (:meth:`to_json`), the master reads it back with every field checked
    (``cluster/diagnosis/peer.py`` node_entry)."""

    slot: int
    name: str
    advertised: str = ""
    seen: str = ""
    procs: int = 1
    cuda: bool = False
    requested_rank: int | None = None
    skew_s: float = 0.0
    facts: NodeFacts = field(default_factory=NodeFacts)

    def to_json(self) -> str:
        return json.dumps(to_dict(self))


@dataclass
class WorldNode:
    node_rank: int
    slot: int
    name: str
    address: str
    seen: str
    procs: int
    rank_offset: int  # global rank of this node's local rank 0


@dataclass
class World:
    run_id: str
    backend: str
    nodes: list[WorldNode]
    expected: int | None
    missing: list[str] = field(default_factory=list)
    abort: str | None = None  # why the run stops after rendezvous (missing nodes, clashes)

    @property
    def world_size(self) -> int:
        return sum(n.procs for n in self.nodes)

    def node(self, slot: int) -> WorldNode | None:
        return next((n for n in self.nodes if n.slot == slot), None)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> World:
        """The world the master published; anyone who knows the run id may write the key.

        Raises:
            ValueError: not JSON, or not a world (a field missing, null or of the wrong type).
        """
        data = parse(text.decode(errors="replace") if isinstance(text, bytes) else text)
        try:
            return from_dict(cls, data, strict=True)
        except TypeError as exc:
            raise ValueError(f"not a world: {exc}") from None


def given_name(world_name: str) -> str:
    """The name a node joined under (a hostname never holds "#"; the world marks a name two
    nodes share with ``#<node rank>``, agent/rendezvous.py unique_names)."""
    base, mark, rank = world_name.rpartition("#")
    return base if mark and rank.isdigit() else world_name
