"""Every wait of the cluster run has a named budget here; the report prints them all.

Set by ``--timeout`` (every wait at once), ``--phase-timeout NAME=S`` or the environment
(``NCCLDOCTOR_TIMEOUT`` and ``NCCLDOCTOR_TIMEOUT_<NAME>``), in that order of strength.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nccldoctor.cluster.records import PHASE_TIMEOUTS, WORKER_PHASES, phase_budget

# The shortest TCP throughput turn: still thousands of round trips on a LAN, past TCP's slow start.
MIN_TCP_TURN = 0.1
HANDOVER_MARGIN_S = 30.0


class TimeoutsError(ValueError):
    """A timeout setting that does not parse; the message quotes it."""


@dataclass(frozen=True)
class Timeouts:
    reach: float = 30.0  # resolve the master and TCP-connect to it, retrying until then
    rendezvous: float = 60.0  # every expected node joined the store
    settle: float = 5.0  # without a node count: close the join window after this quiet time
    bootstrap: float = 15.0  # libnccl's ncclGetUniqueId probe
    tcp_probe: float = 2.0  # raw TCP throughput, per node
    port_probe: float = 3.0  # one connect to an ephemeral port, each way, per node
    tcp_total: float = 16.0  # every node's TCP turn together: many nodes get shorter turns
    startup: float = 60.0  # a worker's first event (Python and torch imported)
    init: float = 60.0  # init_process_group
    barrier: float = 30.0
    collective: float = 30.0  # one correctness allreduce, the checksum allgather
    bandwidth_budget: float = 10.0  # the whole bandwidth sweep
    ddp: float = 60.0  # the DDP steps
    destroy: float = 15.0
    heartbeat: float = 10.0  # a live worker silent this long is frozen
    exit_barrier: float = 60.0  # the master waits this long for the slowest node's results
    isolate_group: float = 20.0  # one group's test in an isolation round

    # The waits that ``--timeout`` sets; the others are budgets with their own meaning.
    WAITS = ("reach", "rendezvous", "init", "barrier", "collective", "ddp", "destroy")

    def worker_timeouts(self) -> dict[str, float]:
        """The ``timeouts`` object of the worker config (cluster/worker/config.py)."""
        return {name: getattr(self, name) for name in PHASE_TIMEOUTS}

    def workers_total(self) -> float:
        """The longest a healthy worker run may take: its start plus every phase's budget."""
        return self.startup + sum(phase_budget(phase, self) for phase in WORKER_PHASES)

    def before_workers(self) -> float:
        """The longest the node agent's phases before the workers' may take: what a launcher's
        other processes on the node wait for local rank 0 to hand them the world (agent/local.py),
        with a margin for the phases' own slack (connect retries, the TCP turns' setup)."""
        return (
            self.startup
            + self.reach
            + self.rendezvous
            + self.settle
            + self.bootstrap
            + self.tcp_total
            + 2 * self.port_probe
            + HANDOVER_MARGIN_S
        )

    def agent_phase(self, phase: str) -> float | None:
        """The budget of one of the node agent's phases (cluster/agent/node.py), for the live
        progress line; None for a phase without one of its own (preflight)."""
        budgets = {
            "reach": self.reach,
            "rendezvous": self.rendezvous,
            "bootstrap": self.bootstrap,
            "tcp": self.tcp_total,
            "ports": self.port_probe,
            "workers": self.workers_total(),
        }
        return budgets.get(phase)

    def tcp_turn(self, probers: int) -> float:
        """Seconds of one node's TCP throughput turn when ``probers`` nodes take turns at the
        master: ``tcp_probe``, shortened so that all turns fit ``tcp_total``, never below
        ``MIN_TCP_TURN`` (past tcp_total / MIN_TCP_TURN nodes the turns add up beyond it)."""
        return max(MIN_TCP_TURN, min(self.tcp_probe, self.tcp_total / max(1, probers)))

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


def timeouts_from(
    overall: float | None = None,
    phases: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> Timeouts:
    """Build Timeouts from ``--timeout``, ``--phase-timeout NAME=S`` items and the environment.

    Raises:
        TimeoutsError: an unknown phase name or a value that is not a positive number.
    """
    env = env or {}
    names = {f.name for f in dataclasses.fields(Timeouts)}
    values: dict[str, float] = {}
    if overall is None and env.get("NCCLDOCTOR_TIMEOUT"):
        overall = _seconds("NCCLDOCTOR_TIMEOUT", env["NCCLDOCTOR_TIMEOUT"])
    if overall is not None:
        if overall <= 0:
            raise TimeoutsError(f"--timeout {overall}: must be positive")
        values.update({name: overall for name in Timeouts.WAITS})
    for name in sorted(names):
        key = f"NCCLDOCTOR_TIMEOUT_{name.upper()}"
        if env.get(key):
            values[name] = _seconds(key, env[key])
    for item in phases:
        name, sep, value = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in names:
            raise TimeoutsError(
                f"--phase-timeout {item!r}: expected NAME=SECONDS with NAME one of "
                + ", ".join(sorted(names))
            )
        values[name] = _seconds(f"--phase-timeout {name}", value)
    return Timeouts(**values)


def _seconds(what: str, value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise TimeoutsError(f"{what}={value!r}: not a number of seconds") from None
    if seconds <= 0:
        raise TimeoutsError(f"{what}={value!r}: must be positive")
    return seconds
