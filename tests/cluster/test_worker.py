"""The worker as the node agent runs it: real processes, a real TCPStore, gloo on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nccldoctor.cluster.records import WORKER_PHASES, WorkerEvent
from nccldoctor.cluster.worker.workerwatch import GRACE_S, HEARTBEAT_S
from nccldoctor.facts.ranks import RankResult
from tests.cluster.idx import write_mnist
from tests.cluster.launcher import REPO, Ranks, launch, spawn, start_store

# Loaded two-core CI machines: generous, yet far below any default 10-minute timeout.
MARGIN_S = 4.0


@pytest.fixture(scope="module")
def store():
    return start_store()


def wait_for(predicate, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def assert_healthy(ranks: Ranks, n: int) -> RankResult:
    assert ranks.wait(120) == [0] * n, ranks.output(0)
    results = [ranks.result(r) for r in range(n)]
    for rank, result in enumerate(results):
        assert (result.rank, result.world_size, result.backend) == (rank, n, "gloo")
        assert (result.ok, result.error, result.exit_code) == (True, None, 0)
        assert result.phase_reached == "destroy"
        assert result.params_identical is True
        assert len({c.sha256 for c in result.checksums}) == 1
        assert [c.rank for c in result.checksums] == list(range(n))
        # The bandwidth table is combined across ranks, so every rank holds the same one.
        assert result.bandwidth == results[0].bandwidth
    first = results[0]
    checked = {(row.dtype, row.count) for row in first.correctness}
    assert all(row.ok and row.wrong == 0 for row in first.correctness)
    skipped = {s.dtype for s in first.correctness_skipped}
    for dtype in ("float32", "float64", "int32", "int64", "bfloat16"):
        assert dtype in skipped or {(dtype, c) for c in (1, 7, 1024, 65_537)} <= checked
    rows = first.bandwidth
    assert rows and [r.size_bytes for r in rows] == sorted(r.size_bytes for r in rows)
    for row in rows:
        assert row.wrong == 0 and row.time_combine == "max" and row.dtype == "float32"
        assert row.count * 4 == row.size_bytes
        seconds = row.time_us / 1e6
        assert row.algbw_GBps == pytest.approx(row.size_bytes / 1e9 / seconds)
        assert row.busbw_GBps == pytest.approx(row.algbw_GBps * 2 * (n - 1) / n)
    mnist = first.mnist
    assert mnist.steps == 3 and mnist.loss_after < mnist.loss_before
    assert mnist.param_checksum == first.checksums[0]
    for rank in range(n):
        assert_events_in_order(ranks.events(rank), rank)
    return first


def assert_events_in_order(events: list[WorkerEvent], rank: int) -> None:
    assert all(e.rank == rank for e in events)
    marks = [(e.phase, e.status) for e in events if e.status != "heartbeat"]
    assert marks == [(p, s) for p in WORKER_PHASES for s in ("start", "ok")]
    running, previous_t = None, events[0].t
    for event in events:
        running = event.phase if event.status == "start" else running
        if event.status == "heartbeat":
            assert event.phase == running
        if event.status in ("heartbeat", "ok"):  # while a phase runs, no silence over 2 s
            assert event.t - previous_t <= 2 * HEARTBEAT_S + 1.0  # + a loaded CI's jitter
        previous_t = event.t


def test_healthy_two_ranks_with_real_gz_mnist(tmp_path, store):
    images = write_mnist(tmp_path / "mnist" / "MNIST" / "raw", samples=300, gz=True)
    started = time.monotonic()
    ranks = launch(tmp_path / "run", store, 2, mnist_root=str(tmp_path / "mnist"))
    first = assert_healthy(ranks, 2)
    assert first.mnist.source == "real" and first.mnist.path == str(images)
    assert first.mnist.samples == 300
    largest = first.bandwidth[-1]
    print(
        f"\nloopback gloo n=2: {largest.size_bytes} B busbw {largest.busbw_GBps:.3f} GB/s"
        f" ({len(first.bandwidth)} sizes), run {time.monotonic() - started:.1f} s"
    )


def test_healthy_three_ranks_with_garbled_mnist_falls_back(tmp_path, store):
    (tmp_path / "mnist").mkdir()
    (tmp_path / "mnist" / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x04" + bytes(60))
    (tmp_path / "mnist" / "train-labels-idx1-ubyte").write_bytes(b"\x00\x00\x08\x01\x00")
    ranks = launch(tmp_path / "run", store, 3, mnist_root=str(tmp_path / "mnist"))
    first = assert_healthy(ranks, 3)
    assert first.mnist.source == "synthetic"
    assert "magic number 2052, expected 2051" in first.mnist.reason


def test_wrong_contribution_fails_the_exact_check(tmp_path, store):
    ranks = launch(
        tmp_path, store, 2, fault="wrong:allreduce_correctness:rank=1",
        bandwidth_sizes=[4, 4096], ddp_steps=1, dtypes=["float32", "int32"],
    )  # fmt: skip
    assert ranks.wait(120) == [1, 1]
    for rank in range(2):
        result = ranks.result(rank)
        assert result.ok is False and result.exit_code == 1
        assert result.error.startswith("allreduce_correctness: ")
        assert sum(row.wrong for row in result.correctness) > 0
        assert not any(row.ok for row in result.correctness)
        assert result.phase_reached == "destroy"  # a wrong result is a finding, not a crash
        assert all(row.wrong == 0 for row in result.bandwidth)


def test_crash_in_ddp_names_the_phase(tmp_path, store):
    ranks = launch(tmp_path, store, 2, fault="crash:ddp:rank=0", timeouts={"collective": 10})
    codes = ranks.wait(120)
    assert codes[0] == 3
    result = ranks.result(0)
    assert result.error == "ddp: RuntimeError: NCCLDOCTOR_FAULT: injected crash in phase ddp"
    assert result.phase_reached == "ddp" and result.ok is False
    assert ranks.events(0)[-1].phase == "ddp" and ranks.events(0)[-1].status == "fail"
    # The peer loses rank 0 in DDP's allreduce or the checksum: an error, reported, not a hang.
    assert codes[1] == 3 and ranks.result(1).phase_reached in ("ddp", "checksum")


def test_hang_in_barrier_ends_by_the_deadline_with_stacks(tmp_path, store):
    deadline = 3.0
    ranks = launch(
        tmp_path, store, 2, fault="hang:barrier:rank=1",
        timeouts={"barrier": deadline, "collective": deadline},
    )  # fmt: skip

    def barrier_started(rank: int) -> bool:
        return any(e.phase == "barrier" for e in ranks.events(rank))

    wait_for(lambda: barrier_started(0) and barrier_started(1), 60, "both ranks in barrier")
    # The agent's hang watch: SIGUSR1 to the stuck worker writes its Python stacks.
    ranks.procs[1].send_signal(signal.SIGUSR1)
    stacks = ranks.dirs[1] / "stacks.txt"
    wait_for(lambda: "hang_forever" in stacks.read_text(), 5, "stacks.txt naming the hang")
    assert "faults.py" in stacks.read_text()
    assert ranks.wait(60) == [3, 3]

    for rank, expected in ((0, "barrier: RuntimeError"), (1, "barrier: timed out after 3 s")):
        result = ranks.result(rank)
        assert result.phase_reached == "barrier" and result.error.startswith(expected)
        events = ranks.events(rank)
        start = next(e.t for e in events if (e.phase, e.status) == ("barrier", "start"))
        failed = events[-1]
        assert (failed.phase, failed.status) == ("barrier", "fail")
        # gloo's timeout (rank 0) or the worker's own deadline (rank 1): never much later.
        assert failed.t - start <= deadline + GRACE_S + MARGIN_S
    # While stuck for 3 s the worker kept beating (every second): alive but waiting, not dead.
    beats = [e for e in ranks.events(1) if (e.phase, e.status) == ("barrier", "heartbeat")]
    assert len(beats) >= 2
    # The worker's own deadline dumped the stacks again, headed with why.
    assert "# barrier outlived its 3 s deadline" in stacks.read_text()


def test_sigterm_while_stuck_still_writes_the_result(tmp_path, store):
    ranks = launch(tmp_path, store, 1, fault="hang:init:rank=0", timeouts={"init": 60})
    wait_for(lambda: ranks.events(0), 60, "init to start")
    time.sleep(0.3)
    ranks.procs[0].terminate()
    assert ranks.wait(20) == [3]
    result = ranks.result(0)
    assert result.error == "init: stopped by SIGTERM" and result.phase_reached == "init"
    assert ranks.events(0)[-1].status == "fail"


def test_malformed_fault_is_reported_not_ignored(tmp_path, store):
    ranks = launch(tmp_path, store, 1, fault="hang:barrier:rank=one")
    assert ranks.wait(60) == [3]
    result = ranks.result(0)
    assert result.phase_reached == "init"
    assert "NCCLDOCTOR_FAULT rank 'one' is not a non-negative integer" in result.error


def test_bad_config_exits_3_with_the_reason_on_stderr(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"run_id": "r", "backend": "mpi", "rank_dir": str(tmp_path)}))
    proc = subprocess.run(
        [sys.executable, "-m", "nccldoctor.cluster.worker.entry", "--config", str(config)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 3
    assert "backend must be one of" in proc.stderr


def test_descriptors_over_the_harness_on_three_ranks(tmp_path, store):
    script = str(Path(__file__).with_name("collectives_rank.py"))
    ranks = spawn(tmp_path, store, [[script, str(tmp_path / f"out{r}.json")] for r in range(3)])
    assert ranks.wait(120) == [0, 0, 0], ranks.output(0)
    outs = [json.loads((tmp_path / f"out{r}.json").read_text()) for r in range(3)]
    for out in outs:
        for name, (rows, skipped) in out["clean"].items():
            assert rows and skipped == [] and all(r["ok"] for r in rows), name
            assert len(rows) == 4 * 3  # 4 dtypes x 3 counts
        for name, (rows, _) in out["corrupt"].items():
            assert rows[0]["wrong"] > 0, f"{name}: a corrupted contribution went unnoticed"
        for row in out["allgather_sweep"]:
            assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * 2 / 3)
        sizes = [r["size_bytes"] for r in out["allgather_sweep"]]
        assert sizes and sizes == [12, 3072, 196608][: len(sizes)]  # a loaded CI may trim
        # The budget stopped the sweep before 64 MiB, at the same size on every rank.
        assert (1 << 26) in out["tight"]["not_run"]
        assert out["tight"] == outs[0]["tight"]
