"""Workers forked from a process that holds torch (the agent), and the fresh-process fallback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid

import pytest

from nccldoctor.cluster.agent import launcher, watchdog
from nccldoctor.cluster.timeouts import Timeouts
from nccldoctor.facts.ranks import RankResult
from tests.cluster.launcher import REPO, start_store


@pytest.fixture(scope="module")
def store():
    return start_store()  # imports torch here, as the agent does before it forks


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "NCCLDOCTOR_FAULT"}
    return {**env, "PYTHONPATH": str(REPO)}


def spec_for(out, store, local_world: int, **timeouts: float) -> launcher.WorkerSpec:
    """A run of its own on the shared store (a run_id each: gloo's keys must not mix)."""
    return launcher.WorkerSpec(
        run_id=uuid.uuid4().hex[:12], backend="gloo", master="127.0.0.1", port=store.port,
        node_rank=0, rank_offset=0, local_world=local_world, world_size=local_world, interface="lo",
        timeouts=Timeouts(bandwidth_budget=1.0, collective=20, **timeouts), mnist_root=None,
        node="n0", out=out,
    )  # fmt: skip


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "fresh"])
def test_workers_run_every_phase_with_their_rank(tmp_path, store, fork):
    launched = launcher.launch(spec_for(tmp_path, store, 2), base_env(), fork=fork)

    kind = launcher.ForkedWorker if fork else subprocess.Popen
    assert all(isinstance(item.proc, kind) for item in launched)
    end = time.monotonic() + 120
    codes = [item.proc.wait(max(1, end - time.monotonic())) for item in launched]
    for item in launched:
        log = item.log_path.read_text(errors="replace")
        result = RankResult.from_json((item.rank_dir / "result.json").read_text())
        # RANK and WORLD_SIZE exist only in the env the launcher made for the rank.
        assert (result.rank, result.world_size, result.ok) == (item.rank, 2, True), log
        assert result.pid == item.proc.pid
        assert result.phase_reached == "destroy" and result.params_identical is True
        assert "Traceback" not in log
    assert codes == [0, 0]


def test_a_forked_worker_holds_none_of_the_agents_descriptors_and_stops_like_a_fresh_one(
    tmp_path, store
):
    listener = socket.create_server(("127.0.0.1", 0))  # like the store's and the gate's
    inode = os.fstat(listener.fileno()).st_ino
    env = {**base_env(), "NCCLDOCTOR_FAULT": "hang:init:rank=0"}
    (item,) = launcher.launch(spec_for(tmp_path, store, 1, init=60), env, fork=True)
    events = item.rank_dir / "events.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and '"init"' not in _text(events):  # hangs in init now
        time.sleep(0.05)
    assert '"init"' in _text(events), item.log_path.read_text(errors="replace")

    targets = [os.readlink(fd.path) for fd in os.scandir(f"/proc/{item.proc.pid}/fd")]
    assert f"socket:[{inode}]" not in targets
    assert os.getsid(item.proc.pid) == item.proc.pid  # its own session: a Ctrl-C is the agent's
    with pytest.raises(subprocess.TimeoutExpired):
        item.proc.wait(0.2)

    watchdog.stop([item])  # SIGTERM to its session, as the agent does
    assert item.proc.poll() == 3
    result = RankResult.from_json((item.rank_dir / "result.json").read_text())
    assert result.error == "init: stopped by SIGTERM"
    listener.close()


def test_only_a_process_holding_torch_forks_its_workers(store):
    assert launcher.forkable()  # torch here (the store fixture), CUDA usable by a child
    without = subprocess.run(
        [sys.executable, "-c", "from nccldoctor.cluster.agent import launcher; print(launcher.forkable())"],
        env=base_env(), capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert without.stdout.strip() == "False"  # nothing to save: each rank starts on its own


def test_a_forked_worker_with_a_bad_config_exits_3_and_never_returns_here(tmp_path):
    started = launcher.ForkedWorker.start(tmp_path / "missing.json", base_env(), tmp_path / "log")
    assert started.wait(60) == 3  # had the child returned, this test would run twice
    assert "bad config" in (tmp_path / "log").read_text()


def _text(path) -> str:
    return path.read_text() if path.exists() else ""
