"""Gather: every node hands its report to the master through the store; the master waits at the
exit barrier (its own deadline) for the slowest node, then merges them all."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from nccldoctor.cluster.agent import rendezvous
from nccldoctor.cluster.agent.gate import Gate
from nccldoctor.cluster.agent.reach import still_listening
from nccldoctor.cluster.config import CheckConfig
from nccldoctor.cluster.diagnosis import merge
from nccldoctor.cluster.diagnosis.node_run import NodeRun
from nccldoctor.cluster.records import PhaseStatus
from nccldoctor.facts.run import MasterLost
from nccldoctor.facts.world import Rejected
from nccldoctor.report import Report
from nccldoctor.report.document import EXIT_FAIL, EXIT_INCOMPLETE, EXIT_OK, with_summaries

STORE_PING_S = 2.0  # a live store answers in milliseconds; a dying master never does
VERDICT_LINGER_S = 5.0  # a node waiting for the verdict reads it in milliseconds
# What reading a value of an unexpected type raises (a dict where a list was, a missing key)
_UNEXPECTED_VALUE = (TypeError, ValueError, LookupError, AttributeError)


def publish(
    store: Any,
    keys: rendezvous.Keys,
    node_rank: int,
    report: Report,
    path: Path,
    reads_verdict: bool = True,
) -> None:
    """Best effort: when the master is gone, the node's own report on disk is what remains.
    ``reads_verdict``: the node will wait for the verdict (an interrupted one will not, and the
    master must not linger for it while the launcher's kill comes).

    The world's node list stays out: the master has it, and N nodes sending N entries each
    would make the exit barrier's traffic and the master's memory grow as N squared (so the
    summaries, whose consistency table has a row per node, are rebuilt without it)."""
    doc = report.to_dict()
    doc["report_path"] = str(path)
    doc["cluster"] = {**doc.get("cluster", {}), "nodes": []}
    doc = with_summaries(doc)
    with contextlib.suppress(Exception):
        if reads_verdict:  # before the result: the master waits for this many readers
            store.add(keys.handed, 1)
        version = int(store.add(keys.results(node_rank), 1))
        store.set(keys.result(node_rank, version), json.dumps(doc))


def announce_verdict(
    store: Any, keys: rendezvous.Keys, exit_code: int, linger_s: float = VERDICT_LINGER_S
) -> None:
    """The master, after writing the cluster report: its exit code, for every node to exit with
    (best effort: a node that does not hear it exits with its own). The store goes down with
    the master's agent, so it stays up until every node that handed a report over has read the
    verdict, VERDICT_LINGER_S at most: a node asking a moment later got no answer, and exited
    with its own code where the cluster's differed."""
    deadline = time.monotonic() + linger_s
    with contextlib.suppress(Exception):
        store.set(keys.verdict, str(exit_code))
        while int(store.add(keys.verdict_read, 0)) < int(store.add(keys.handed, 0)):
            if time.monotonic() >= deadline:
                return
            time.sleep(0.02)


def await_verdict(store: Any, keys: rendezvous.Keys, timeout_s: float) -> int | None:
    """A node, after handing its report over: the master's verdict, waiting up to ``timeout_s``
    (the master's own exit barrier and merge); None when it never came or the master is gone.

    So every process of a launcher's job exits with the cluster's verdict, after the master
    wrote its report: srun passes on the highest exit code of its tasks, and mpirun kills the
    job's other processes as soon as one exits non-zero (docs/launch/mpirun.md)."""
    deadline = time.monotonic() + timeout_s
    try:
        while not store.check([keys.verdict]):
            if time.monotonic() >= deadline:
                return None
            rendezvous.wait_a_little(store, [keys.verdict])
        verdict = int(store.get(keys.verdict)[:8])
        store.add(keys.verdict_read, 1)  # the master may go now
    except Exception:  # the master's store went away (DistNetworkError, RuntimeError), or junk
        return None
    # anyone who reaches the store may have written it
    return verdict if verdict in (EXIT_OK, EXIT_FAIL, EXIT_INCOMPLETE) else None


def master_lost(run: NodeRun, config: CheckConfig, store: Any = None) -> bool:
    """Before handing its report over, does the master's store still answer? If not, the master
    died (or its network did): say so in this node's report, the one that remains."""
    if run.world is None:
        return False
    reach = run.observed.reach
    address = (reach.addresses if reach and reach.addresses else [config.master])[0]
    error = still_listening(address, config.port)
    if error is None and store is not None and not _store_answers(store):
        error = still_listening(address, config.port) or "the store accepts but does not answer"
    if error is None:
        return False
    master = next((n.name for n in run.world.nodes if n.node_rank == 0), config.master)
    # the last phase that ran: one skipped after the loss (isolate, with no store) did not see it
    ran = [p for p in run.phases if p.status is not PhaseStatus.SKIPPED]
    phase = ran[-1].phase if ran else "?"
    errors = {r.rank: r.error or "" for r in run.ranks}
    run.observed.master_lost = MasterLost(master, address, error, phase, errors)
    run.lost.append(f"the master {master} (node rank 0) was lost during the {phase} phase")
    return True


def _store_answers(store: Any, timeout_s: float = STORE_PING_S) -> bool:
    """Whether the master's store process itself replies. A TCP connect alone is not proof: a
    killed master's kernel completes handshakes on its listening socket until the dying process
    has released its memory and, only then, its files."""
    previous = store.timeout
    try:
        store.set_timeout(timedelta(seconds=timeout_s))
        store.check(["nccldoctor/alive"])
    except Exception:  # torch raises DistNetworkError, RuntimeError or TimeoutError
        return False
    finally:
        with contextlib.suppress(Exception):
            store.set_timeout(previous)
    return True


def cluster_report(
    own: Report,
    own_path: Path,
    run: NodeRun,
    config: CheckConfig,
    store: Any,
    keys: rendezvous.Keys | None,
    exit_barrier_s: float,
    gate: Gate | None,
    command: Sequence[str],
    progress: Callable[[str], None],
) -> Report:
    """The master's cluster report: the other nodes' reports (waiting up to ``exit_barrier_s``)
    merged with its own; the nodes that never reported are named with their last phase, what
    was written to the store in a node's place (entries at the rendezvous, results here) by the
    ``world`` rules."""
    others: dict[int, Report] = {}
    last_phase: dict[int, str] = {}
    rejected = list(run.place.rejected) if run.place else []
    world = run.world
    if world and store is not None and keys:
        ranks = {n.node_rank: n.name for n in world.nodes if n.node_rank != run.node_rank}
        progress(f"gather: waiting up to {exit_barrier_s:.0f} s for {len(ranks)} node(s)")
        deadline = time.monotonic() + exit_barrier_s
        others, last_phase = rendezvous.gather_results(store, keys, ranks, deadline, rejected)
    gathered = merge.Gathered(
        master=config.master,
        world=world,
        lost=last_phase,
        hellos=gate.snapshot() if gate else [],
        tcp_gbps=gate.tcp_gbps if gate else {},
        port=config.port,
        entries=run.place.entries if run.place else (),
        command=command,
        flood=gate.flood() if gate else None,
        rejected=rejected,
    )
    names = {n.node_rank: n.name for n in world.nodes} if world else {}
    return merge_or_leave_out((str(own_path), own), others, gathered, names)


def merge_or_leave_out(
    own: tuple[str, Report],
    others: Mapping[int, Report],
    gathered: merge.Gathered,
    names: Mapping[int, str],
) -> Report:
    """The merge of the master's report with the others (node rank -> report). The merge reads
    each section it judges by with its types checked (sections.py) and runs the rules behind
    their crash guard, so no report known breaks it; one that held to the schema (peer.py) and
    still does, by the errors a value of an unexpected type raises where it was read loosely, is
    found by merging each alone with the master's and left out as a rejected result: the cluster
    report is written regardless."""
    reports = [own, *((others[r].extra.get("report_path"), others[r]) for r in sorted(others))]
    try:
        return merge.merge_reports(reports, gathered)
    except _UNEXPECTED_VALUE:  # some node's report breaks it: which one, is found below
        pass
    kept: list[tuple[str | None, Report]] = [own]
    for rank in sorted(others):
        try:
            merge.merge_reports([own, (None, others[rank])], gathered)
        except _UNEXPECTED_VALUE as exc:
            why = f"the merge failed on it: {type(exc).__name__}: {str(exc)[:200]}"
            rejection = Rejected("result", names.get(rank, str(rank)), f"result/{rank}", why)
            gathered = dataclasses.replace(gathered, rejected=[*gathered.rejected, rejection])
            continue
        kept.append((others[rank].extra.get("report_path"), others[rank]))
    return merge.merge_reports(kept, gathered)
