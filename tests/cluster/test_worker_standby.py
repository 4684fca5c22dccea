"""Workers started on standby (before their rank is known) and handed their rank by the launcher."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from nccldoctor.cluster import launcher
from nccldoctor.cluster.demo import _free_port_pair
from nccldoctor.cluster.timeouts import Timeouts
from tests.cluster.launcher import REPO, start_store


@pytest.fixture(scope="module")
def store():
    return start_store()


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "NCCLDOCTOR_FAULT"}
    return {**env, "PYTHONPATH": str(REPO)}


def test_standbys_take_their_rank_at_the_handoff_and_a_dead_one_is_replaced(tmp_path, store):
    out = tmp_path / "node"
    spec = launcher.WorkerSpec(
        run_id="standby", backend="gloo", master="127.0.0.1", port=store.port, node_rank=0,
        rank_offset=0, local_world=2, world_size=2, interface="lo",
        timeouts=Timeouts(bandwidth_budget=1.0, collective=20), mnist_root=None, out=out,
    )  # fmt: skip
    standbys = launcher.standby(range(3), base_env(), out / "standby", 120)
    os.killpg(standbys[1].proc.pid, signal.SIGKILL)  # gone before its handoff: started afresh
    standbys[1].proc.wait(10)
    launched = launcher.launch(spec, base_env(), standbys)

    assert launched[0].proc is standbys[0].proc and launched[1].proc is not standbys[1].proc
    assert standbys[2].proc.poll() is not None  # not needed: ended at once
    assert not (out / "standby").exists()  # logs moved or removed, nothing left behind
    end = time.monotonic() + 120
    codes = [item.proc.wait(max(1, end - time.monotonic())) for item in launched]
    for item in launched:
        log = item.log_path.read_text(errors="replace")
        assert item.log_path == item.rank_dir / "worker.log"
        result = json.loads((item.rank_dir / "result.json").read_text())
        # RANK and WORLD_SIZE came with the handoff (the standby was started without them).
        assert (result["rank"], result["world_size"], result["ok"]) == (item.rank, 2, True), log
        assert result["phase_reached"] == "destroy" and result["params_identical"] is True
    assert codes == [0, 0]


def test_a_standby_ends_by_itself_when_the_agent_lets_go(tmp_path):
    (item,) = launcher.standby([0], base_env(), tmp_path, 120)
    item.proc.stdin.close()  # what the agent's death does to the pipe
    assert item.proc.wait(60) == 0
    assert "Traceback" not in item.log_path.read_text(errors="replace")


def marked_standbys(mark: str) -> list[int]:
    """Live standby workers whose environment carries ``mark`` (so other runs never count)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if b"--standby" in cmdline and mark.encode() in environ:
            found.append(int(proc.name))
    return found


def test_a_run_that_ends_before_its_workers_leaves_no_standby_behind(tmp_path):
    mark = f"NCCLDOCTOR_STANDBY_TEST={uuid.uuid4().hex}"
    env = {**base_env(), mark.split("=")[0]: mark.split("=")[1]}
    argv = [sys.executable, "-m", "nccldoctor", "check", "--master", "127.0.0.1", "--nodes", "2",
            "--node-rank", "1", "--port", str(_free_port_pair()), "--out", str(tmp_path),
            "--backend", "gloo", "--phase-timeout", "reach=3"]  # fmt: skip
    agent = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen = False
    while agent.poll() is None:  # no master: reach fails after 3 s
        seen = seen or bool(marked_standbys(mark))
        time.sleep(0.1)
    assert agent.returncode == 3
    assert seen  # the standby was there while the agent ran
    assert marked_standbys(mark) == []
