"""A follower: one of the launcher's processes on a node other than local rank 0, itself one rank
of the check (docs/design.md#per-process).

It waits for local rank 0 (agent/local.py) to hand it the world, runs the worker phases in this
process with the launcher's rank and local rank (cluster/worker/rank.py, its records in the
rank's folder as a forked worker's), says it is done, and waits for the node's verdict: it shows
the report local rank 0 wrote and exits with its exit code, so the launcher reports the check's
verdict as the job's. When local rank 0 is gone or silent past its deadline, or a stop signal
comes first, the follower writes a report of its own (``check-<node>-rank<R>.json``) that says
so, and exits 3.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from nccldoctor.cluster.agent import launcher
from nccldoctor.cluster.agent.local import Handover, Link, LocalError
from nccldoctor.cluster.agent.outcomes import load_result
from nccldoctor.cluster.agent.phases.report import VERDICT_MARGIN_S
from nccldoctor.cluster.agent.state import Progress
from nccldoctor.cluster.config import CheckConfig
from nccldoctor.cluster.diagnosis.node_report import build_node_report
from nccldoctor.cluster.diagnosis.node_run import NodeRun, Role
from nccldoctor.cluster.records import WorkersSeen
from nccldoctor.cluster.torchstart import preload_torch, quiet_omp
from nccldoctor.cluster.worker import rank as worker_rank
from nccldoctor.cluster.worker.config import WorkerConfig
from nccldoctor.cluster.worker.workerwatch import GRACE_S, STOP_SIGNALS, block_stop_signals
from nccldoctor.report import Report, load_report, write_report


def run_follower(
    config: CheckConfig,
    env: Mapping[str, str],
    command: Sequence[str] = (),
    progress: Progress | None = None,
) -> tuple[Report, Path, int]:
    """The report to show, its path and the exit code of this process."""
    assert config.local is not None and not config.local.leader
    # First, before torch starts a thread: the waits below and the worker's phase watch take
    # SIGTERM/SIGINT themselves, so a rank stuck in a collective still answers them.
    block_stop_signals()
    started, t, me = time.monotonic(), config.timeouts, config.local
    say = progress or (lambda message: None)
    quiet_omp(os.environ)  # before torch loads OpenMP (the worker env has it too)
    imported = threading.Thread(target=preload_torch, name="nccldoctor-import")
    imported.daemon = True
    imported.start()  # while local rank 0 runs the node's phases
    try:
        link = Link.connect(config.port, me.rank, me.local_rank, started + t.startup)
    except LocalError as exc:
        return _own_report(config, command, started, f"{exc} within {t.startup:.0f} s", None)
    say(f"local rank {me.local_rank}: waiting for local rank 0 ...")
    heard = link.wait(started + t.before_workers(), _stop_signal)
    if heard.spec is None:
        return _ending(config, command, started, heard, None)
    try:
        spec = launcher.WorkerSpec.from_dict(heard.spec, t)
    except ValueError as exc:
        heard.spec, heard.lost = None, f"local rank 0 handed over a bad worker spec: {exc}"
        return _ending(config, command, started, heard, None)
    say(f"local rank {me.local_rank}: rank {me.rank} of {spec.world_size}, workers ...")
    imported.join(t.startup)
    code = _run_worker(config, spec, env, link, command, started)
    link.done(code)
    heard = link.wait(time.monotonic() + _verdict_wait(config), _stop_signal)
    return _ending(config, command, started, heard, spec)


def _run_worker(
    config: CheckConfig,
    spec: launcher.WorkerSpec,
    env: Mapping[str, str],
    link: Link,
    command: Sequence[str],
    started: float,
) -> int:
    """The worker phases in this process, under the worker's environment (NCCL and gloo read
    theirs when the process group is made)."""
    me = config.local
    assert me is not None
    worker_env = launcher.worker_env(spec, me.rank, me.local_rank, env)
    os.environ.clear()
    os.environ.update(worker_env)

    def end(code: int) -> NoReturn:
        """A deadline or a stop signal, in the phase watch's thread (the main one may be stuck
        in a collective): done, the verdict, then out."""
        link.done(code)
        heard = link.wait(time.monotonic() + _verdict_wait(config), lambda: None)
        report, path, verdict = _ending(config, command, started, heard, spec)
        print(f"nccldoctor check: rank {me.rank}: {report.verdict}\nReport: {path}", flush=True)
        os._exit(verdict)

    try:
        worker_config = WorkerConfig.read(launcher.rank_dir(spec, me.rank) / "config.json")
    except (OSError, ValueError) as exc:
        print(f"nccldoctor check: rank {me.rank}: bad worker config: {exc}", file=sys.stderr)
        return worker_rank.EXIT_ERROR
    return worker_rank.Worker(worker_config, worker_env, end=end).run()


def _verdict_wait(config: CheckConfig) -> float:
    """After this rank's worker ended: the node's other ranks (their budget), its report, and
    on a node other than the master the master's exit barrier and merge."""
    t = config.timeouts
    return t.workers_total() + t.heartbeat + GRACE_S + t.exit_barrier + 2 * VERDICT_MARGIN_S


def _stop_signal() -> str | None:
    received = signal.sigtimedwait(STOP_SIGNALS, 0)
    return signal.Signals(received.si_signo).name if received else None


def _ending(
    config: CheckConfig,
    command: Sequence[str],
    started: float,
    heard: Handover,
    spec: launcher.WorkerSpec | None,
) -> tuple[Report, Path, int]:
    """Local rank 0's report and verdict when it spoke; this process's own report otherwise."""
    if heard.verdict is not None and heard.report:
        try:
            return load_report(heard.report), Path(heard.report), heard.verdict
        except (OSError, ValueError, KeyError, TypeError) as exc:  # gone, or not a report
            heard.lost = f"local rank 0's report {heard.report} could not be read ({exc})"
    return _own_report(config, command, started, heard.lost or "no word from local rank 0", spec)


def _own_report(
    config: CheckConfig,
    command: Sequence[str],
    started: float,
    why: str,
    spec: launcher.WorkerSpec | None,
) -> tuple[Report, Path, int]:
    """What this process saw, when local rank 0 cannot speak for the node."""
    me = config.local
    assert me is not None
    node = spec.node if spec else config.node_name
    run = NodeRun(node, port=config.port)
    done = ""
    if spec is not None:
        result = load_result(launcher.rank_dir(spec, me.rank))
        # local rank 0 reached the master for this process: the spec has the run's id
        run.role = Role(spec.run_id, master=False)
        run.workers = WorkersSeen()
        if result is not None:
            run.workers.results[me.rank] = result
            done = f"; its own worker phases ended with exit code {result.exit_code}"
    run.aborted = f"rank {me.rank} (local rank {me.local_rank} on {node}): {why}{done}"
    report = build_node_report(run, config, command, time.monotonic() - started)
    path = config.run_dir / f"check-{node}-rank{me.rank}.json"
    # A disk gone full or read-only costs the file, not the verdict: the command finds no file
    # at the path and says so.
    with contextlib.suppress(OSError):
        write_report(report, path)
    return report, path, report.exit_code
