"""Report: the node's report on disk, handed to the master through the store; on the master,
the exit barrier and the cluster report (gather). Runs on every way out of the agent."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from nccldoctor.cluster.agent import gather
from nccldoctor.cluster.agent.state import AgentState
from nccldoctor.cluster.diagnosis.node_report import build_node_report
from nccldoctor.cluster.isolate import answer as isolate_answer
from nccldoctor.cluster.isolate import rounds
from nccldoctor.report import Report, write_report

# A node waits for the master's verdict through the master's exit barrier, plus this for its merge.
VERDICT_MARGIN_S = 10.0


def run(state: AgentState) -> tuple[Report, Path]:
    """The report to show (the cluster's on the master) and its path; its exit code is the
    cluster's verdict wherever this node heard it (Report.exit_code)."""
    config, run = state.config, state.run
    store = state.store if state.keys and run.node_rank is not None else None
    if store is not None and not run.is_master and gather.master_lost(run, config, store):
        store = None  # a dead master's store would only make the publish wait
    report = build_node_report(run, config, state.command, time.monotonic() - state.started)
    if run.isolation is not None:
        isolate_answer.attach(report, run.isolation)
    path = _write(report, config.run_dir / f"check-{run.node}.json", "node", state.progress)
    interrupted = bool(run.aborted and run.aborted.startswith("interrupted"))
    if not run.is_master:
        if store is not None:
            gather.publish(store, state.keys, run.node_rank, report, path, not interrupted)
            if not interrupted:  # the master's exit barrier and merge, then a margin
                wait = config.timeouts.exit_barrier + VERDICT_MARGIN_S
                verdict = gather.await_verdict(store, state.keys, wait)
                _exits_with(verdict, report, path, state.progress)
        return report, path
    if store is not None and run.isolation is None:  # no node waits for rounds that never come
        rounds.close_plan(store, rounds.IsoKeys(state.keys.prefix), run.aborted or "no rounds")
    cluster = gather.cluster_report(
        report, path, run, config, store, state.keys,
        0.0 if interrupted else config.timeouts.exit_barrier,
        state.gate, state.command, state.progress,
    )  # fmt: skip
    cluster_path = _write(cluster, config.run_dir / "check-cluster.json", "cluster", state.progress)
    _exits_with(cluster.exit_code, report, path, state.progress)
    if store is not None:
        # interrupted (scancel, a launcher's SIGTERM): its kill follows, and this node's own
        # other processes wait for the verdict from this process: no lingering for readers
        linger = 0.0 if interrupted else gather.VERDICT_LINGER_S
        gather.announce_verdict(store, state.keys, cluster.exit_code, linger)
    return cluster, cluster_path


def _exits_with(
    verdict: int | None, report: Report, path: Path, progress: Callable[[str], None]
) -> None:
    """The node's report, written again with the cluster's verdict it exits with (and says so:
    ``exit_decided_by``), so that a tool reading it never sees a success where the process
    failed. A node that never heard the verdict exits with its own report's code, as written."""
    if verdict is None:
        return
    report.cluster_exit_code = verdict
    _write(report, path, f"node (exit {verdict}: the cluster's verdict)", progress)


def _write(report: Report, path: Path, what: str, progress: Callable[[str], None]) -> Path:
    """Write ``report`` into this run's folder and say where; a disk that filled up or went
    read-only during the run is said too, and costs the file, not the verdict: the report is
    still shown and handed on, and the command, finding no file at the path, exits 3."""
    try:
        write_report(report, path)
    except OSError as exc:
        progress(f"{what} report: cannot write {path}: {exc.strerror or exc}")
    else:
        progress(f"{what} report: {path}")
    return path
