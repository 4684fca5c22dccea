"""The local handshake between a node's processes (nccldoctor/cluster/agent/local.py), on real
abstract Unix sockets: hello, hand-over, done, verdict, and every way the other side goes away."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nccldoctor.cluster.agent.launcher import WorkerSpec
from nccldoctor.cluster.agent.local import (
    VANISHED,
    Done,
    FollowerProcess,
    HandOver,
    Joining,
    Leader,
    Link,
    LocalError,
    Verdict,
    address,
    decode,
    encode,
)
from nccldoctor.cluster.timeouts import Timeouts
from nccldoctor.lab.start import free_port_pair


@pytest.fixture
def port() -> int:
    return free_port_pair()


def never_stopped() -> None:
    return None


def test_hello_spec_done_verdict(port, tmp_path):
    leader = Leader(port, local_world=3, world_size=6)
    try:
        links = [Link.connect(port, rank, local, time.monotonic() + 5) for rank, local in
                 ((4, 1), (5, 2))]  # fmt: skip
        followers = leader.wait_joined(time.monotonic() + 5)
        assert [(f.rank, f.local_rank, f.pid) for f in followers] == [
            (4, 1, os.getpid()), (5, 2, os.getpid())]  # fmt: skip
        procs = [FollowerProcess(f, tmp_path / f"{f.rank}.log") for f in followers]
        for f in followers:
            f.lines.send(HandOver({"rank": f.rank}))
        assert links[0].wait(time.monotonic() + 5, never_stopped).spec == {"rank": 4}
        assert procs[0].poll() is None
        links[0].done(1)
        assert procs[0].wait(5) == 1 and procs[0].returncode == 1
        leader.announce(1, tmp_path / "check-cluster.json")
        heard = links[0].wait(time.monotonic() + 5, never_stopped)
        assert (heard.verdict, heard.report) == (1, str(tmp_path / "check-cluster.json"))
        links[1].close()  # the second one dies before saying it is done
        assert procs[1].wait(5) == VANISHED
        assert "its connection to local rank 0 closed" in (tmp_path / "5.log").read_text()
    finally:
        leader.close()


def test_a_second_leader_on_the_same_port_is_refused(port):
    leader = Leader(port, 2, 2)
    try:
        with pytest.raises(LocalError, match=f"another nccldoctor check on port {port}"):
            Leader(port, 2, 2)
    finally:
        leader.close()


def test_bad_and_duplicate_hellos_are_refused_and_named(port):
    leader = Leader(port, local_world=2, world_size=4)
    try:
        Link.connect(port, 1, 1, time.monotonic() + 5)
        Link.connect(port, 1, 1, time.monotonic() + 5)  # the same local rank again
        Link.connect(port, 9, 1, time.monotonic() + 5)  # a rank outside the world
        raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        raw.connect(address(port))
        raw.sendall(b"\xff" * 100 + b"\n")  # not JSON
        deadline = time.monotonic() + 5
        while len(leader.refused) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [f.local_rank for f in leader.wait_joined(time.monotonic())] == [1]
        assert any("local rank 1 joined twice" in why for why in leader.refused)
        assert any("rank 9 outside 0..3" in why for why in leader.refused)
        assert any("local rank None outside 1..1" in why for why in leader.refused)
        raw.close()
    finally:
        leader.close()


def test_missing_followers_are_named_after_the_deadline(port):
    leader = Leader(port, local_world=4, world_size=8)
    try:
        Link.connect(port, 2, 2, time.monotonic() + 5)
        started = time.monotonic()
        assert [f.local_rank for f in leader.wait_joined(started + 0.5)] == [2]
        assert 0.4 < time.monotonic() - started < 3
        assert leader.missing() == [1, 3]
    finally:
        leader.close()


def test_no_leader_is_an_error_by_the_deadline(port):
    started = time.monotonic()
    with pytest.raises(LocalError, match="local rank 0 never opened this node's local socket"):
        Link.connect(port, 1, 1, started + 0.5)
    assert time.monotonic() - started < 3


def test_a_leader_that_dies_is_heard_at_once(port, tmp_path):
    # The leader in a process of its own, killed: its follower learns it from the closed
    # connection, long before its deadline.
    script = tmp_path / "leader.py"
    script.write_text(
        "import sys, time\nfrom nccldoctor.cluster.agent.local import Leader\n"
        f"leader = Leader({port}, 2, 2)\nprint('up', flush=True)\ntime.sleep(60)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, env=env)
    try:
        assert proc.stdout.readline() == b"up\n"
        link = Link.connect(port, 1, 1, time.monotonic() + 5)
        proc.kill()
        started = time.monotonic()
        heard = link.wait(started + 30, never_stopped)
        assert heard.spec is None and heard.verdict is None
        assert heard.lost == "local rank 0 of this node ended (its connection closed)"
        assert time.monotonic() - started < 5
    finally:
        proc.kill()
        proc.wait()


def test_a_silent_leader_ends_the_wait_at_its_deadline_or_at_a_stop_signal(port):
    leader = Leader(port, 2, 2)
    try:
        link = Link.connect(port, 1, 1, time.monotonic() + 5)
        started = time.monotonic()
        heard = link.wait(started + 0.6, never_stopped)
        assert heard.lost == "local rank 0 of this node did not answer by its deadline"
        assert 0.5 < time.monotonic() - started < 3
        heard = link.wait(time.monotonic() + 30, lambda: "SIGTERM")
        assert heard.lost == "stopped by SIGTERM while waiting for local rank 0"
    finally:
        leader.close()


SPEC = WorkerSpec(
    run_id="5ca1ab1e0000", backend="nccl", master="198.18.0.1", port=29400, node_rank=1,
    rank_offset=8, local_world=8, world_size=16, interface="eth1", timeouts=Timeouts(barrier=4),
    mnist_root=None, node="gpu-b", out=Path("/var/tmp/check/gpu-b/5ca1ab1e0000"),
)  # fmt: skip


def test_the_worker_spec_reads_back_as_handed_over():
    assert WorkerSpec.from_dict(json.loads(json.dumps(SPEC.to_dict())), SPEC.timeouts) == SPEC


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("world_size", "16", "expected int, got str"),
        ("port", True, "expected int, got bool"),
        ("node", None, "expected str, got null"),
        ("interface", 1, "expected str, got int"),
        ("out", ["/tmp"], "expected a path, got list"),
        ("timeouts", {}, "keys"),  # the follower's own, never handed over
    ],
)
def test_a_bad_worker_spec_is_refused_with_why(key, value, why):
    """A spec that is not what local rank 0 writes never reaches the launcher."""
    with pytest.raises(ValueError, match=why):
        WorkerSpec.from_dict({**SPEC.to_dict(), key: value}, SPEC.timeouts)


@pytest.mark.parametrize(
    "message",
    [Joining(5, 1), HandOver(SPEC.to_dict()), Done(-9), Verdict(1, "/runs/check-cluster.json")],
)
def test_each_message_reads_back_as_sent(message):
    assert decode(encode(message).rstrip(b"\n")) == message


@pytest.mark.parametrize(
    "line",
    [b"\xff" * 100, b"[1]", b'{"rank": 1, "local_rank": 1}', b'{"kind": "hello"}',
     b'{"kind": 7, "exit_code": 0}', b'{"kind": "done", "exit_code": "0"}',
     b'{"kind": "done", "exit_code": true}', b'{"kind": "verdict", "exit_code": 1}',
     b'{"kind": "joining", "rank": null, "local_rank": 1}', b'{"kind": "hand-over", "spec": []}',
     b"[" * 100_000],
)  # fmt: skip
def test_a_line_that_is_no_message_is_none(line):
    assert decode(line) is None
