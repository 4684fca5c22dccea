"""The node agent: runs the phases of `nccldoctor check` on one node and always writes a report.

Phases (docs/design.md#phases): preflight → reach → rendezvous → bootstrap → tcp → ports → workers,
then the report (gather). Each lives in its own module under ``phases/`` with one entry point,
``run``, which says how it ended and what it found (:class:`PhaseEnd`: its row of ``phases``, a
PhaseRow, and its result, which the node run holds); :data:`PHASES` lists them once, in order.
Each has a deadline from :class:`Timeouts`. The master (node rank 0, or the node owning
``--master``) also hosts the store and the gate, and after the exit barrier merges every node's
report into the cluster report. torch is imported in the background as the agent starts, the
store's part first, and the workers are forked from the agent with it loaded (launcher). When
the launcher started several processes per node, local rank 0 is the agent, forks the worker of
its own rank only, and hands the world to the others, which run theirs themselves (local.py,
follower.py). Any way out — success, a failed phase, an error, SIGINT/SIGTERM — goes through one
``finally`` that ends the workers and writes the report(s).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from nccldoctor.cluster.agent import local, outcomes, rendezvous, watchdog
from nccldoctor.cluster.agent.phases import (
    bootstrap,
    isolate,
    ports,
    preflight,
    reach,
    report,
    tcp,
    workers,
)
from nccldoctor.cluster.agent.phases import rendezvous as rendezvous_phase
from nccldoctor.cluster.agent.state import AgentState, PhaseEnd, PhaseFailed, Progress
from nccldoctor.cluster.config import CheckConfig
from nccldoctor.cluster.diagnosis.node_run import NodeRun
from nccldoctor.cluster.records import PhaseRow, PhaseStatus
from nccldoctor.cluster.torchstart import preload_torch, quiet_omp, uncollected_imports
from nccldoctor.report import Report

Phase = Callable[[AgentState], PhaseEnd]

PHASES: tuple[tuple[str, Phase], ...] = (
    ("preflight", preflight.run),
    ("reach", reach.run),
    ("rendezvous", rendezvous_phase.run),
    ("bootstrap", bootstrap.run),
    ("tcp", tcp.run),
    ("ports", ports.run),
    ("workers", workers.run),
    ("isolate", isolate.run),
)


class Interrupted(Exception):
    """SIGINT or SIGTERM arrived; the run stops and the report is still written."""


class NodeAgent:
    def __init__(
        self,
        config: CheckConfig,
        env: Mapping[str, str],
        command: Sequence[str] = (),
        progress: Progress | None = None,
    ) -> None:
        self.state = AgentState(
            config=config,
            env=dict(env),
            command=list(command),
            progress=progress or (lambda message: None),
            run=NodeRun(config.node_name, port=config.port),
            background=concurrent.futures.ThreadPoolExecutor(2, "nccldoctor-agent"),
        )
        self._stopping = False

    # -- the template: phases in order, one finally -------------------------------------------
    def execute(self) -> tuple[Report, Path]:
        """Run every phase; the report to show (the cluster's on the master) and its path."""
        state, run = self.state, self.state.run
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        # Seconds of CPU: torch's own libraries first (then preflight may load others), then
        # what the workers use, while the phases up to theirs run. A forked worker keeps the
        # OpenMP this process loads, so its setting goes in first (state.env stays the user's).
        quiet_omp(os.environ)
        state.torch = state.background.submit(_import_torch, state.torch_loaded)
        try:
            self._open_local()
            for name, step in PHASES:
                with self.phase(name) as row:
                    end = step(state)
                    row.status, row.detail = end.status, end.detail
                    run.hold(end.result)
        except Interrupted as exc:
            run.aborted = f"interrupted by {exc}"
        except PhaseFailed as exc:
            run.aborted = str(exc)
        except Exception as exc:  # a bug must still leave a report behind
            run.observed.crash = f"{type(exc).__name__}: {exc}"
            run.aborted = f"internal error: {run.observed.crash}"
        self._stopping = True
        try:
            watchdog.stop(state.launched)
            if state.launched and run.workers is None:  # interrupted while watching them
                watch = watchdog.observe(state.launched, run.node, str(run.aborted))
                run.hold(outcomes.workers_seen(watch))
            shown, path = report.run(state)
            if state.leader:  # the node's other processes show this report and exit with it
                state.leader.announce(shown.exit_code, path)
            return shown, path
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            state.background.shutdown(wait=False, cancel_futures=True)
            if state.gate:
                state.gate.close()
            if state.leader:
                state.leader.close()

    def _open_local(self) -> None:
        """Local rank 0 of several: the socket the node's other processes wait on."""
        me = self.state.config.local
        if me is None:
            return
        try:
            self.state.leader = local.Leader(self.state.config.port, me.local_world, me.world_size)
        except local.LocalError as exc:
            raise PhaseFailed(f"local: {exc}") from None

    def _on_signal(self, signum: int, frame: object) -> None:
        if self._stopping:
            return
        self._stopping = True
        raise Interrupted(signal.Signals(signum).name)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[PhaseRow]:
        state, run = self.state, self.state.run
        row = PhaseRow(run.node, None, name, started=time.time())
        run.phases.append(row)
        if state.store is not None and run.node_rank is not None and state.keys:
            rendezvous.set_phase(state.store, state.keys, run.node_rank, name)
        state.progress(f"{name} ...")
        try:
            yield row
        except PhaseFailed as exc:
            row.status, row.detail = PhaseStatus.FAIL, str(exc)
            run.hold(exc.result)
            raise
        except rendezvous.RendezvousError as exc:
            row.status, row.detail = PhaseStatus.TIMEOUT, str(exc)
            raise PhaseFailed(f"{name}: {exc}") from exc
        except BaseException as exc:
            row.status, row.detail = PhaseStatus.FAIL, f"{type(exc).__name__}: {exc}"
            raise
        finally:
            row.ended = time.time()
            row.duration_s = round(row.ended - row.started, 3)
            state.progress(f"{name} {row.status} ({row.duration_s:.1f} s) {row.detail}")


def _import_torch(loaded: threading.Event) -> None:
    """torch.distributed first (the store and preflight wait for it), then what the workers use."""
    with uncollected_imports():
        try:
            import torch.distributed  # noqa: F401
        finally:
            loaded.set()  # a broken torch is preflight's to report, not to wait for
        preload_torch()


def run_check(
    config: CheckConfig,
    env: Mapping[str, str],
    command: Sequence[str] = (),
    progress: Progress | None = None,
) -> tuple[Report, Path, int]:
    """Run `nccldoctor check` on this node: the report to show, where it was written, and the
    exit code, the cluster's verdict wherever this node heard it (else its own report's). A
    launcher's process other than local rank 0 is a follower (follower.py)."""
    if config.local is not None and not config.local.leader:
        from nccldoctor.cluster.agent.follower import run_follower

        return run_follower(config, env, command, progress)
    agent = NodeAgent(config, env, command, progress)
    report, path = agent.execute()
    return report, path, report.exit_code
