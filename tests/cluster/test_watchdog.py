"""The watchdog over real child processes that write events.jsonl the way the worker does (docs/design.md#records)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from nccldoctor.cluster.agent.launcher import Launched
from nccldoctor.cluster.agent.outcomes import workers_seen
from nccldoctor.cluster.agent.watchdog import GRACE_S, WORLD_GRACE_S, watch_ranks
from nccldoctor.cluster.agent.worldend import STORE_S, WorkersEnded, WorldEnd
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
    if then == "fail":
        emit("fail", "RuntimeError: a peer went away")
        sys.exit(3)
    if then == "fail-then-linger":  # its error first, then a slow exit (gloo's teardown)
        time.sleep(1)
        emit("fail", "RuntimeError: Connection closed by peer")
        time.sleep(3)
        sys.exit(3)
    def waiting_in_the_collective():
        while True:
            time.sleep(0.3)
            if beat:
                emit("heartbeat")
    waiting_in_the_collective()
""")


def start(tmp_path: Path, phase: str, beat: str, then: str = "hang", rank: int = 0) -> Launched:
    rank_dir = tmp_path / f"rank{rank}"
    rank_dir.mkdir()
    log = rank_dir / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(rank_dir), phase, beat, then],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    return Launched(rank, rank, rank_dir, proc, log)


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


# A rank waiting inside torch.distributed for a peer that never comes: gloo's init of a world of
# two, alone.
IN_INIT = textwrap.dedent("""
    import faulthandler, json, signal, sys, time
    from datetime import timedelta
    import torch.distributed as dist
    rank_dir, port = sys.argv[1], int(sys.argv[2])
    stacks = open(rank_dir + "/stacks.txt", "w")
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True, chain=False)
    store = dist.TCPStore("127.0.0.1", port, 2, True, timeout=timedelta(seconds=120),
                          wait_for_workers=False)
    with open(rank_dir + "/events.jsonl", "a") as events:
        events.write(json.dumps({"t": time.time(), "rank": 0, "phase": "init",
                                 "status": "start", "detail": ""}) + "\\n")
    dist.init_process_group("gloo", store=store, rank=0, world_size=2,
                            timeout=timedelta(seconds=120))
""")


def store():
    from datetime import timedelta

    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=10))


def test_a_rank_that_ends_before_the_last_phase_tells_the_other_nodes(tmp_path):
    world = WorldEnd(store(), "nccldoctor/run")
    launched = start(tmp_path, "barrier", "beat", then="fail")
    watch = watch_ranks([launched], "A", Timeouts(), "gloo", poll_s=0.2, world=world)
    assert watch.ranks[0].exit_code == 3 and watch.stuck_reason is None
    assert world.ended() == WorkersEnded("A", 0, "barrier", "exit code 3")
    world.end(WorkersEnded("B", 1, "init", "exit code 3"))  # the first end stays the one told
    assert world.ended() == WorkersEnded("A", 0, "barrier", "exit code 3")


def test_a_rank_still_waiting_when_another_node_s_rank_ended_is_stopped_at_once(tmp_path):
    world = WorldEnd(store(), "nccldoctor/run")
    world.end(WorkersEnded("B", 1, "barrier", "exit code 3"))
    launched = start(tmp_path, "barrier", "beat")
    t0 = time.monotonic()
    watch = watch_ranks([launched], "A", Timeouts(barrier=60), "gloo", poll_s=0.2, world=world)
    assert WORLD_GRACE_S <= time.monotonic() - t0 < WORLD_GRACE_S + 6  # not its 60 s budget
    (r,) = watch.ranks
    assert r.stuck == "still in barrier when rank 1 on node B ended in barrier (exit code 3)"
    # its own code held it, not a collective: stuck, as at its own deadline
    assert workers_seen(watch).ranks[0].state is OutcomeState.STUCK


def test_a_rank_that_failed_on_its_own_before_the_world_end_stop_keeps_its_error(tmp_path):
    # node B's rank was killed; this one's peer socket closed, it failed within the world-end
    # grace and was still exiting when the grace ran out: not stuck, not stopped, its own error
    world = WorldEnd(store(), "nccldoctor/run")
    world.end(WorkersEnded("B", 3, "ddp", "exit code -9"))
    launched = start(tmp_path, "ddp", "beat", then="fail-then-linger")
    watch = watch_ranks([launched], "A", Timeouts(ddp=60), "gloo", poll_s=0.2, world=world)
    (r,) = watch.ranks
    assert watch.stuck_reason is None and r.stuck is None and r.exit_code == 3
    (rank,) = workers_seen(watch).ranks
    assert rank.state is OutcomeState.FAILED
    assert rank.error == "RuntimeError: Connection closed by peer"


def test_a_rank_that_failed_on_its_own_is_not_stuck_when_the_world_end_stops_its_node(tmp_path):
    # the same, beside a rank still waiting: the stop ends both, only the waiting one is stuck
    world = WorldEnd(store(), "nccldoctor/run")
    world.end(WorkersEnded("B", 3, "ddp", "exit code -9"))
    failing = start(tmp_path, "ddp", "beat", then="fail-then-linger", rank=1)
    waiting = start(tmp_path, "ddp", "beat", rank=0)
    watch = watch_ranks([waiting, failing], "A", Timeouts(ddp=60), "gloo", poll_s=0.2, world=world)
    w, f = watch.ranks
    assert w.stuck == "still in ddp when rank 3 on node B ended in ddp (exit code -9)"
    assert f.stuck is None and f.events[-1].detail == "RuntimeError: Connection closed by peer"


def test_a_rank_waiting_in_a_collective_for_the_one_that_ended_failed_because_of_it(tmp_path):
    world = WorldEnd(store(), "nccldoctor/run")
    world.end(WorkersEnded("B", 1, "init", "exit code 3"))
    rank_dir = tmp_path / "rank0"
    rank_dir.mkdir()
    log = rank_dir / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", IN_INIT, str(rank_dir), str(free_port())],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    launched = Launched(0, 0, rank_dir, proc, log)
    deadline = time.monotonic() + 60  # torch imported, the store up: init is next
    while not (rank_dir / "events.jsonl").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    watch = watch_ranks([launched], "A", Timeouts(init=120), "gloo", poll_s=0.2, world=world)
    (r,) = watch.ranks
    assert r.stuck is None and "torch/distributed/" in r.stacks
    (rank,) = workers_seen(watch).ranks
    assert rank.state is OutcomeState.FAILED and rank.phase_reached == "init"
    assert (
        rank.error
        == "stopped while it waited in init: rank 1 on node B ended in init (exit code 3)"
    )


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "text",
    [b"", b"[]", b"{}", b'{"node": "", "rank": 0, "phase": "init", "why": ""}',
     b'{"node": "A", "rank": -1, "phase": "init", "why": ""}',
     b'{"node": "A", "rank": true, "phase": "init", "why": ""}',
     b'{"node": "A", "rank": 0, "phase": "lunch", "why": ""}',
     b'{"node": "A", "rank": 0, "phase": "init", "why": 3}',
     b'{"node": "A", "rank": 0, "phase": "init", "why": "' + b"x" * 5000 + b'"}'],
)  # fmt: skip
def test_an_end_that_is_no_record_is_no_end(text):
    assert WorkersEnded.from_json(text) is None


def test_a_store_that_went_away_is_no_end_and_is_not_asked_again() -> None:
    import time

    from nccldoctor.meet import host_store

    port = free_port()
    server = host_store(port, 10)
    world = WorldEnd.connect("127.0.0.1", port, "nccldoctor/run")
    assert world is not None and world.ended() is None
    del server  # the master's agent is gone, and its store with it
    started = time.monotonic()
    world.end(WorkersEnded("A", 0, "barrier", "exit code 3"))
    assert world.ended() is None and world.ended() is None
    assert time.monotonic() - started < 2 * STORE_S
    assert WorldEnd.connect("127.0.0.1", port, "nccldoctor/run") is None
