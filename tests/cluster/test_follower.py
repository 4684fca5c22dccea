"""A launcher's process other than local rank 0 (nccldoctor/cluster/agent/follower.py), run as
the real CLI under torchrun's variables on loopback: when local rank 0 never comes or ends
before handing over, it writes its own report saying so and exits 3, by its deadline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from nccldoctor.cluster.agent.local import Leader
from nccldoctor.lab.start import check_env, free_port_pair


def start_follower(tmp_path, port: int, startup_s: str = "30") -> subprocess.Popen:
    torchrun = {"TORCHELASTIC_RUN_ID": "t", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1",
                "WORLD_SIZE": "2", "RANK": "1", "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "1",
                "GROUP_RANK": "0", "NCCLDOCTOR_TIMEOUT_STARTUP": startup_s}  # fmt: skip
    argv = [sys.executable, "-m", "nccldoctor", "check", "--out", str(tmp_path / "out"),
            "--port", str(port), "--no-html"]  # fmt: skip
    return subprocess.Popen(argv, env=check_env(os.environ, "n0", torchrun), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip


def own_report(tmp_path) -> dict:
    """In the follower's own run folder: it never heard local rank 0's."""
    (path,) = (tmp_path / "out" / "n0").glob("*.local1/check-n0-rank1.json")
    return json.loads(path.read_text())


def test_no_local_rank_0_by_the_startup_deadline(tmp_path):
    started = time.monotonic()
    proc = start_follower(tmp_path, free_port_pair(), startup_s="3")
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 3, output
    assert time.monotonic() - started < 30
    report = own_report(tmp_path)
    assert report["run"]["aborted"] == (
        "rank 1 (local rank 1 on n0): local rank 0 never opened this node's local socket "
        "([Errno 111] Connection refused) within 3 s"
    )
    assert "Report: " in output


def test_local_rank_0_ending_before_the_hand_over(tmp_path):
    port = free_port_pair()
    leader = Leader(port, local_world=2, world_size=2)
    proc = start_follower(tmp_path, port)
    try:
        joined = leader.wait_joined(time.monotonic() + 30)
        assert [(f.rank, f.local_rank, f.pid) for f in joined] == [(1, 1, proc.pid)]
    finally:
        leader.close()  # as its process ending would
    started = time.monotonic()
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 3, output
    assert time.monotonic() - started < 10  # heard at once, not at a deadline
    findings = own_report(tmp_path)["findings"]
    assert [f["title"] for f in findings if f["severity"] == "fail"] == [
        "the run stopped: rank 1 (local rank 1 on n0): local rank 0 of this node ended "
        "(its connection closed)"
    ]
