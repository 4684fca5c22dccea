"""The watchdog over real child processes that write events.jsonl the way the worker does (docs/design.md#records)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from nccldoctor.cluster.agent.launcher import Launched
from nccldoctor.cluster.agent.outcomes import workers_seen
from nccldoctor.cluster.agent.watchdog import GRACE_S, watch_ranks
from nccldoctor.cluster.diagnosis.node_report import nccl_section
from nccldoctor.cluster.timeouts import Timeouts
from nccldoctor.facts.ranks import OutcomeState
from nccldoctor.forensics.capture import last_nccl_lines

# A process speaking the worker's side of the records (docs/design.md#records): events, heartbeats, SIGUSR1 stacks.
CHILD = textwrap.dedent("""
    import faulthandler, json, signal, sys, time
    rank_dir, phase, beat, then = sys.argv[1], sys.argv[2], sys.argv[3] == "beat", sys.argv[4]
    stacks = open(rank_dir + "/stacks.txt", "w")
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True, chain=False)
    events = open(rank_dir + "/events.jsonl", "a")
    def emit(status, detail=""):
        events.write(json.dumps({"t": time.time(), "rank": 0, "phase": phase,
                                 "status": status, "detail": detail}) + "\\n")
        events.flush()
    emit("start")
    if then == "exit":
        emit("ok")
        sys.exit(0)
    def waiting_in_the_collective():
        while True:
            time.sleep(0.3)
            if beat:
                emit("heartbeat")
    waiting_in_the_collective()
""")


def start(tmp_path: Path, phase: str, beat: str, then: str = "hang") -> Launched:
    rank_dir = tmp_path / "rank0"
    rank_dir.mkdir()
    log = rank_dir / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(rank_dir), phase, beat, then],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    return Launched(0, 0, rank_dir, proc, log)


def test_a_rank_over_its_phase_budget_is_stuck_and_its_stacks_are_saved(tmp_path):
    launched = start(tmp_path, "barrier", "beat")
    t0 = time.monotonic()
    watch = watch_ranks([launched], "A", Timeouts(barrier=1, heartbeat=30), "gloo", poll_s=0.2)
    elapsed = time.monotonic() - t0
    assert 1 + GRACE_S <= elapsed < 1 + GRACE_S + 6
    (r,) = watch.ranks
    assert r.stuck.startswith("still in barrier after") and "budget 1 s" in r.stuck
    assert "waiting_in_the_collective" in r.stacks
    assert launched.proc.poll() is not None  # ended by the watchdog
    seen = workers_seen(watch)
    ranks, phases = seen.ranks, seen.phases
    assert ranks[0].state is OutcomeState.STUCK and ranks[0].phase_reached == "barrier"
    assert phases[0].status == "timeout"


def test_a_silent_rank_is_frozen(tmp_path):
    launched = start(tmp_path, "ddp", "silent")
    watch = watch_ranks([launched], "A", Timeouts(ddp=60, heartbeat=1.5), "gloo", poll_s=0.2)
    assert watch.ranks[0].stuck.startswith("no heartbeat for")
    assert watch.elapsed_s < 10


def test_a_rank_that_ends_is_not_stuck(tmp_path):
    launched = start(tmp_path, "destroy", "beat", then="exit")
    watch = watch_ranks([launched], "A", Timeouts(), "gloo", poll_s=0.2)
    (r,) = watch.ranks
    assert (r.stuck, r.exit_code, watch.stuck_reason) == (None, 0, None)
    seen = workers_seen(watch)
    ranks, phases, results = seen.ranks, seen.phases, seen.results
    assert ranks[0].state is OutcomeState.FAILED  # exit 0 without a result.json is no success
    assert phases[0].status == "ok" and results == {}


def test_last_nccl_lines(tmp_path):
    lines = [f"host:1:1 [0] NCCL INFO line {i}" for i in range(8)]
    (tmp_path / "nccl.host.1.log").write_text("\n".join(["not nccl", *lines]) + "\n")
    assert last_nccl_lines(tmp_path.glob("nccl.*.log"), 3) == lines[-3:]
    assert last_nccl_lines((tmp_path / "none").glob("nccl.*.log")) == []
    assert last_nccl_lines([tmp_path / "vanished.log"]) == []  # a file gone meanwhile is no error


def test_a_nccl_log_deleted_mid_run_leaves_the_rank_stuck_not_the_agent_crashed(tmp_path):
    launched = start(tmp_path, "barrier", "beat")
    nccl_log = launched.rank_dir / "nccl.host.1.log"
    nccl_log.write_text("host:1:1 [0] NCCL INFO Bootstrap: Using eth0:198.18.0.2<0>\n")
    threading.Timer(0.5, nccl_log.unlink).start()
    watch = watch_ranks([launched], "A", Timeouts(barrier=1, heartbeat=30), "gloo", poll_s=0.2)
    ranks = workers_seen(watch).ranks
    assert ranks[0].state is OutcomeState.STUCK and ranks[0].last_nccl_lines == ()
    assert nccl_section(ranks) == (None, [])
