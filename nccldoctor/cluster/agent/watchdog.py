"""Watch this node's workers: heartbeats, phase deadlines, and the evidence of a hang.

``watch_ranks`` polls every rank's ``events.jsonl`` and process. A live rank that overstays its
phase's budget (plus a short grace, so the worker's own timeout fires first), falls silent for
``heartbeat`` seconds, or never starts, is stuck: the watchdog saves what shows where it stopped
(its phase, its last NCCL lines, Python stacks from ``nccldoctor.forensics``: py-spy with
locals when installed, faulthandler otherwise, the Flight Recorder dump on NCCL) before it ends the workers (SIGTERM, then SIGKILL).
The loop survives its own errors: a bad line or a vanished file is skipped, never fatal.

When a rank ends before the run's last phase, its node tells the others through the store
(worldend.py); every node then stops its ranks still waiting, ``WORLD_GRACE_S`` after hearing it
(time for a peer's closed socket to end them on their own): a collective whose member is gone
never completes, and the rounds of isolation wait for every node's workers. A rank stopped while
it waited inside a collective, and no further behind than the one that ended, failed because of
it; one stopped anywhere else is stuck, as at its own deadline. One whose phase already ended
with its own error is not waiting: it is left to exit, and its error stays its outcome.

Rank states: ``starting`` (no event yet) → ``running`` (a phase started) → ``exited`` (the
process ended, ``exit_code`` set) or ``stuck`` (the watchdog stopped it).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from nccldoctor.cluster.agent.launcher import Launched
from nccldoctor.cluster.agent.local import FollowerProcess, stop_followers
from nccldoctor.cluster.agent.worldend import STARTUP, WorkersEnded, WorldEnd
from nccldoctor.cluster.records import WORKER_PHASES, EventStatus, WorkerEvent, phase_budget
from nccldoctor.cluster.timeouts import Timeouts
from nccldoctor.forensics.capture import last_nccl_lines, python_stacks
from nccldoctor.forensics.stacks import in_collective, main_thread_frames
from nccldoctor.forensics.stop import stop_groups

# Past a phase budget before the agent steps in: the backend's timeout and then the worker's own
# phase deadline (2 s after the budget) speak first; the agent acts when the worker cannot.
GRACE_S = 4.0
# After another node's rank ended: a gloo peer's closed socket ends the waiting ranks within
# milliseconds, on their own and with their own error.
WORLD_GRACE_S = 2.0
LAST_PHASE = WORKER_PHASES[-1]  # a rank ending in it leaves its peers nothing to wait for


@dataclass
class RankWatch:
    """What the agent knows of one local rank."""

    launched: Launched
    node: str
    events: list[WorkerEvent] = field(default_factory=list)  # heartbeats left out
    phase: str | None = None  # the last phase that started
    phase_status: EventStatus | None = None  # of ``phase`` (None: no event yet)
    phase_started: float = 0.0  # monotonic, when the agent read the phase's start
    last_seen: float = 0.0  # monotonic, the last event of any kind
    exit_code: int | None = None
    stuck: str | None = None  # why the watchdog stopped it
    stopped: str | None = None  # why it was stopped while waiting in a collective for a rank gone
    stacks: str | None = None
    flight_recorder: str | None = None
    last_nccl_lines: list[str] = field(default_factory=list)
    _offset: int = 0

    @property
    def rank(self) -> int:
        return self.launched.rank

    @property
    def alive(self) -> bool:
        return self.exit_code is None

    @property
    def failed_on_its_own(self) -> bool:
        """Its phase ended with its own error: it left the collective and is on its way out."""
        return self.phase_status is EventStatus.FAIL

    def read_events(self, now: float) -> None:
        path = self.launched.rank_dir / "events.jsonl"
        try:
            with open(path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return
        complete = data[: data.rfind(b"\n") + 1]  # a half-written line waits for the next poll
        self._offset += len(complete)
        for line in complete.splitlines():
            event = WorkerEvent.from_line(line)
            if event is None:
                continue
            self.last_seen = now
            if event.status is EventStatus.HEARTBEAT:
                continue
            self.events.append(event)
            if event.status is EventStatus.START and event.phase != self.phase:
                self.phase, self.phase_started = event.phase, now
            if event.phase == self.phase:
                self.phase_status = event.status


@dataclass
class WatchResult:
    ranks: list[RankWatch]
    stuck_reason: str | None  # set when the watchdog had to stop workers
    elapsed_s: float


def watch_ranks(
    launched: list[Launched],
    node: str,
    timeouts: Timeouts,
    backend: str,
    poll_s: float = 0.5,
    on_change: Callable[[str], None] | None = None,
    world: WorldEnd | None = None,
) -> WatchResult:
    """Watch until every worker exits or one is stuck; then collect evidence and stop them.
    ``world``: where ranks ended early are told to and heard from the other nodes."""
    start = time.monotonic()
    ranks = [RankWatch(item, node, last_seen=start) for item in launched]
    total_deadline = start + timeouts.workers_total() + timeouts.heartbeat
    reason = None
    told = heard = False
    heard_at = 0.0
    while True:
        now = time.monotonic()
        for r in ranks:
            if r.alive:
                r.read_events(now)
                r.exit_code = r.launched.proc.poll()
                if r.exit_code is not None:
                    r.read_events(now)
        ended = next((r for r in ranks if not r.alive and r.phase != LAST_PHASE), None)
        if world and ended and not told:
            world.end(WorkersEnded(node, ended.rank, ended.phase or STARTUP,
                                   f"exit code {ended.exit_code}"))  # fmt: skip
            told = True
        if not any(r.alive for r in ranks):
            break
        reason = _stuck_reason(ranks, now, start, timeouts, total_deadline)
        gone = world.ended() if world and not reason else None
        if gone and not heard:
            heard, heard_at = True, now
        elif gone and now - heard_at >= WORLD_GRACE_S:
            reason = _waiting_for(ranks, gone, now)
        if reason:
            if on_change:
                on_change(reason)
            alive = [r for r in ranks if r.alive]
            collect_evidence(alive, backend)
            for r in alive:  # an error of its own may have come while the stacks were taken
                r.read_events(time.monotonic())
            if gone:
                _judge_waiting(alive, gone)
            elif world and not told:
                stuck = next(r for r in alive if r.stuck)
                world.end(WorkersEnded(node, stuck.rank, stuck.phase or STARTUP,
                                       "stopped by its watchdog"))  # fmt: skip
            stop([r.launched for r in ranks])
            for r in ranks:
                if r.alive:
                    r.stuck = r.stuck or (
                        None if r.stopped or r.failed_on_its_own else "stopped by the watchdog"
                    )
                    r.exit_code = r.launched.proc.poll()
            break
        _wait_any(ranks, poll_s)
    for r in ranks:
        r.last_nccl_lines = r.last_nccl_lines or last_nccl_lines(
            r.launched.rank_dir.glob("nccl.*.log")
        )
    return WatchResult(ranks, reason, time.monotonic() - start)


def _wait_any(ranks: list[RankWatch], poll_s: float) -> None:
    """Sleep ``poll_s``, or less: a live rank's exit wakes the loop (the last one's exit is
    what the whole node waits for)."""
    alive = next(r for r in ranks if r.alive)
    try:
        alive.launched.proc.wait(timeout=poll_s)
    except subprocess.TimeoutExpired:
        return


def observe(launched: list[Launched], node: str, reason: str) -> WatchResult:
    """What the rank folders say now, for workers the agent stopped outside ``watch_ranks`` (the
    agent itself was interrupted): events read, exit codes taken, each rank marked ``reason``."""
    now = time.monotonic()
    ranks = [RankWatch(item, node, last_seen=now) for item in launched]
    for r in ranks:
        r.read_events(now)
        r.exit_code = r.launched.proc.poll()
        r.last_nccl_lines = last_nccl_lines(r.launched.rank_dir.glob("nccl.*.log"))
    return WatchResult(ranks, reason, 0.0)


def _stuck_reason(
    ranks: list[RankWatch], now: float, start: float, timeouts: Timeouts, total_deadline: float
) -> str | None:
    for r in ranks:
        if not r.alive:
            continue
        if r.phase is None and now - start > timeouts.startup:
            r.stuck = f"no event within {timeouts.startup:.0f} s of its start"
        elif r.phase_status is EventStatus.START and r.phase is not None:
            budget = phase_budget(r.phase, timeouts)
            if now - r.phase_started > budget + GRACE_S:
                r.stuck = f"still in {r.phase} after {now - r.phase_started:.1f} s (budget {budget:.0f} s)"
        if r.stuck is None and r.phase is not None and now - r.last_seen > timeouts.heartbeat:
            r.stuck = f"no heartbeat for {now - r.last_seen:.1f} s (in {r.phase})"
        if r.stuck is None and now > total_deadline:
            r.stuck = "the workers' overall deadline passed"
    stuck = [r for r in ranks if r.stuck]
    if not stuck:
        return None
    return "; ".join(f"rank {r.rank}: {r.stuck}" for r in stuck)


def _waiting_for(ranks: list[RankWatch], gone: WorkersEnded, now: float) -> str | None:
    """Why the live ranks stop now that ``gone`` ended, or None when every live one is in the
    last phase (it needs no peer to finish) or failed on its own (it is ending: its own error
    is its outcome, and a stop now would race the result it is writing)."""
    waiting = [r for r in ranks if r.alive and r.phase != LAST_PHASE and not r.failed_on_its_own]
    if not waiting:
        return None
    for r in waiting:
        r.stuck = f"still in {r.phase or STARTUP} when {gone.sentence()}"
    return "; ".join(f"rank {r.rank}: {r.stuck}" for r in waiting)


def _judge_waiting(ranks: list[RankWatch], gone: WorkersEnded) -> None:
    """A rank stopped while it waited inside a collective, not behind the one that ended,
    waited for it: it failed because of it, the cause is the other. One whose phase ended
    with its own error before the stop failed on its own. Any other is stuck."""
    for r in ranks:
        if r.failed_on_its_own:
            r.stuck = None
        elif (
            r.stuck
            and not gone.behind(r.phase)
            and in_collective(main_thread_frames(r.stacks or ""))
        ):
            r.stopped, r.stuck = f"stopped while it waited in {r.phase}: {gone.sentence()}", None


def collect_evidence(ranks: list[RankWatch], backend: str) -> None:
    """Stacks, last NCCL lines and Flight Recorder dumps of live ranks, before anything is killed."""
    for r in ranks:
        r.stacks, _ = python_stacks(r.launched.proc.pid, r.launched.rank_dir / "stacks.txt")
        if backend == "nccl":
            dumps = sorted(r.launched.rank_dir.glob("fr_trace_rank_*"))
            r.flight_recorder = str(dumps[-1]) if dumps else None
        r.last_nccl_lines = last_nccl_lines(r.launched.rank_dir.glob("nccl.*.log"))


def stop(launched: list[Launched], term_wait_s: float = 2.0) -> None:
    """SIGTERM every live worker's session, then SIGKILL what is left after ``term_wait_s``;
    a follower (another process of the launcher's, agent/local.py) is signalled alone."""
    procs = [item.proc for item in launched]
    stop_groups([p for p in procs if not isinstance(p, FollowerProcess)], term_wait_s)
    stop_followers([p for p in procs if isinstance(p, FollowerProcess)], term_wait_s)
