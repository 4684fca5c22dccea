"""How this node's ranks ended, as the agent reads it: each rank's folder (``result.json``, its
stacks, its log) beside what the watchdog saw of it, into the report's ``ranks`` and ``phases``
rows and the results by rank (docs/design.md#records)."""

from __future__ import annotations

from pathlib import Path

from nccldoctor.cluster.agent.watchdog import RankWatch, WatchResult
from nccldoctor.cluster.records import (
    WORKER_DEADLINE,
    EventStatus,
    PhaseRow,
    PhaseStatus,
    WorkersSeen,
)
from nccldoctor.facts.ranks import OutcomeState, RankOutcome, RankResult


def load_result(rank_dir: Path) -> RankResult | None:
    """A worker's ``result.json``, or None when it never wrote one (or wrote garbage)."""
    try:
        return RankResult.from_json((rank_dir / "result.json").read_text(errors="replace"))
    except (OSError, ValueError):
        return None


def rank_row(watch: RankWatch, result: RankResult | None) -> RankOutcome:
    """One entry of ``ranks``: where the rank got to and how it ended."""
    failed = next((e for e in reversed(watch.events) if e.status is EventStatus.FAIL), None)
    error = (result.error if result else None) or (failed.detail if failed else None) or None
    error = watch.stopped or error  # its own error says no more than the signal that stopped it
    stuck = watch.stuck or (error if error and WORKER_DEADLINE in error else None)
    if stuck:
        state = OutcomeState.STUCK
    elif watch.exit_code == 0 and result is not None and result.ok:
        state = OutcomeState.OK
    elif result is None and watch.exit_code not in (0, 1, 3) and not watch.stopped:
        state = OutcomeState.CRASHED  # died without a word: a signal, os._exit, the OOM killer
    else:
        state = OutcomeState.FAILED
    if state is OutcomeState.CRASHED and not error:
        error = _tail(watch.launched.log_path) or f"exited with code {watch.exit_code}"
    ok = state is OutcomeState.OK
    ended = failed or (watch.events[-1] if watch.events else None)
    return RankOutcome(
        rank=watch.rank,
        node=watch.node,
        state=state,
        local_rank=watch.launched.local_rank,
        phase_reached=(result.phase_reached if result else None) or watch.phase or "startup",
        exit_code=watch.exit_code,
        error=error,
        ended_at=ended.t if ended else None,
        stuck=stuck,
        last_nccl_lines=tuple(watch.last_nccl_lines),
        message_sizes=result.message_sizes if result else None,
        stacks=watch.stacks or (_read(watch.launched.rank_dir / "stacks.txt") if not ok else None),
        flight_recorder=watch.flight_recorder,
        log_path=str(watch.launched.log_path),
    )


def rank_phases(watch: RankWatch) -> list[PhaseRow]:
    """The ``phases`` rows of one rank, from its start/ok/fail events."""
    rows: list[PhaseRow] = []
    for event in watch.events:
        if event.status is EventStatus.START:
            rows.append(PhaseRow(watch.node, watch.rank, event.phase, started=event.t))
        elif event.status in (EventStatus.OK, EventStatus.FAIL) and rows:
            row = rows[-1]
            if row.phase == event.phase:
                row.status = PhaseStatus(event.status.value)
                row.ended, row.detail = event.t, event.detail
                row.duration_s = round(event.t - row.started, 3)
    if rows and rows[-1].status is PhaseStatus.RUNNING:
        rows[-1].status = PhaseStatus.TIMEOUT if watch.stuck else PhaseStatus.FAIL
        rows[-1].detail = watch.stuck or f"the worker exited with code {watch.exit_code}"
    return rows


def workers_seen(watch: WatchResult) -> WorkersSeen:
    """What this node's workers came to: their outcomes, phase rows and results."""
    results = {r.rank: load_result(r.launched.rank_dir) for r in watch.ranks}
    return WorkersSeen(
        ranks=[rank_row(r, results[r.rank]) for r in watch.ranks],
        phases=[row for r in watch.ranks for row in rank_phases(r)],
        results={k: v for k, v in results.items() if v is not None},
    )


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace") or None
    except OSError:
        return None


def _tail(path: Path, count: int = 3) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(lines[-count:])
