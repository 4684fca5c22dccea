"""The worker's phases, defined once for the agent and the worker (docs/design.md#records).

The worker runs them in this order (cluster/worker/rank.py) under these deadlines, its fault
hooks name them, the agent's watchdog budgets them, the verdict orders stopped ranks by them.
"""

from __future__ import annotations

from dataclasses import dataclass


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


def phase_budget(phase: str, timeouts: object) -> float:
    """Seconds a worker may stay in ``phase`` under ``timeouts`` (the agent's ``Timeouts`` or the
    worker's ``WorkerTimeouts``: both carry every budget); a phase not in the table gets the
    longest."""
    budgets = {p.name: sum(getattr(timeouts, name) for name in p.budget) for p in PHASES}
    return budgets.get(phase, max(budgets.values()))
