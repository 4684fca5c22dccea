"""Report: the node's report on disk, handed to the master through the store; on the master,
the exit barrier and the cluster report (gather). Runs on every way out of the agent."""

from __future__ import annotations

import time
from pathlib import Path

from nccldoctor.cluster.agent import gather
from nccldoctor.cluster.agent.state import AgentState
from nccldoctor.cluster.diagnosis.node_report import build_node_report
from nccldoctor.report import Report, write_report

# A node waits for the master's verdict through the master's exit barrier, plus this for its merge.
VERDICT_MARGIN_S = 10.0


def run(state: AgentState) -> tuple[Report, Path]:
    """The report to show (the cluster's on the master) and its path."""
    config, run = state.config, state.run
    store = state.store if state.keys and run.node_rank is not None else None
    if store is not None and not run.is_master and gather.master_lost(run, config, store):
        store = None  # a dead master's store would only make the publish wait
    report = build_node_report(run, config, state.command, time.monotonic() - state.started)
    path = write_report(report, config.out / f"check-{run.node}.json")
    state.progress(f"node report: {path}")
    interrupted = bool(run.aborted and run.aborted.startswith("interrupted"))
    if not run.is_master:
        if store is not None:
            gather.publish(store, state.keys, run.node_rank, report, path)
            if not interrupted:  # the master's exit barrier and merge, then a margin
                wait = config.timeouts.exit_barrier + VERDICT_MARGIN_S
                state.verdict = gather.await_verdict(store, state.keys, wait)
        return report, path
    cluster = gather.cluster_report(
        report, path, run, config, store, state.keys,
        0.0 if interrupted else config.timeouts.exit_barrier,
        state.gate, state.entries, state.command, state.progress,
    )  # fmt: skip
    cluster_path = write_report(cluster, config.out / "check-cluster.json")
    state.progress(f"cluster report: {cluster_path}")
    state.verdict = cluster.exit_code
    if store is not None:
        gather.announce_verdict(store, state.keys, cluster.exit_code)
    return cluster, cluster_path
