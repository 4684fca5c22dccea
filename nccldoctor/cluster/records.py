"""Records that cross the agent/worker process boundary, defined once for both sides."""

from __future__ import annotations

# A worker's phases, in the order it runs them (cluster/worker/rank.py): the fault hooks name
# them, the agent's watchdog budgets them, the verdict orders stopped ranks by them.
WORKER_PHASES = (
    "init",
    "barrier",
    "allreduce_correctness",
    "bandwidth",
    "ddp",
    "checksum",
    "destroy",
)
