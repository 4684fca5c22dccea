"""The watcher's parts: the injected sitecustomize, stack dumps, liveness."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nccldoctor.cluster.diagnosis.verdict import rank_findings
from nccldoctor.debugenv import debug_env, torch_before_2_6
from nccldoctor.facts.ranks import OutcomeState, RankOutcome
from nccldoctor.forensics.ranks import RankEvidence, RankProcess, rank_state
from nccldoctor.forensics.stacks import main_thread_frames, traceback_frames, user_frame
from nccldoctor.watch.evidence import collect, known_processes
from nccldoctor.watch.liveness import LivenessTracker, Sample
from nccldoctor.watch.supervisor import job_env

SLEEPER = """
import time
def train_loop():
    step = 3
    time.sleep(60)
train_loop()
"""


def start_injected(tmp_path: Path, code: str, env_extra: dict | None = None) -> subprocess.Popen:
    env = job_env({**os.environ, "RANK": "5", "LOCAL_RANK": "1", **(env_extra or {})}, tmp_path)
    script = tmp_path / "job.py"
    script.write_text(code)
    return subprocess.Popen([sys.executable, str(script)], env=env)


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_injected_process_announces_itself_and_dumps_stacks_on_sigusr1(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no py-spy: the faulthandler path
    proc = start_injected(tmp_path, SLEEPER)
    try:
        assert wait_for(lambda: known_processes(tmp_path))
        (found,) = known_processes(tmp_path).values()
        assert (found.pid, found.rank, found.local_rank) == (proc.pid, 5, 1)
        time.sleep(0.5)  # let it reach the sleep
        (evidence,) = collect(tmp_path, [found], want_stacks=True)
        assert evidence.stacks_source == "faulthandler"
        frame = user_frame(main_thread_frames(evidence.stacks))
        assert frame.func == "train_loop" and frame.file.endswith("job.py") and frame.line == 5
        # no torch.distributed in this process: the Flight Recorder says why it has nothing
        assert evidence.flight_recorder is None
        assert evidence.flight_recorder_error
    finally:
        proc.kill()
        proc.wait()


def test_uncaught_exception_is_recorded(tmp_path):
    proc = start_injected(tmp_path, "def f():\n    raise ValueError('boom')\nf()\n")
    assert proc.wait(timeout=30) == 1
    (error_file,) = tmp_path.glob("error.*.txt")
    frames = traceback_frames(error_file.read_text())
    assert frames[0].func == "f" and "ValueError: boom" in error_file.read_text()


def test_users_own_sitecustomize_still_runs(tmp_path):
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = 'yes'\n")
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('USER_SITE_RAN'))"],
        env=job_env({**os.environ, "PYTHONPATH": str(own)}, tmp_path),
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert proc.stdout.strip() == "yes"


def test_user_settings_are_never_overridden(tmp_path):
    env = job_env({"NCCL_DEBUG": "WARN", "PYTHONPATH": "/x"}, tmp_path)
    assert env["NCCL_DEBUG"] == "WARN"
    assert env["NCCL_DEBUG_FILE"].startswith(str(tmp_path))
    assert env["PYTHONPATH"].endswith(os.pathsep + "/x")
    assert env["TORCH_FR_BUFFER_SIZE"] == "2000"


@pytest.mark.parametrize(("torch_version", "old_name"), [("2.5.1", "2000"), ("2.13.0", None)])
def test_a_torch_before_2_6_gets_the_flight_recorders_old_name(tmp_path, torch_version, old_name):
    """The job's own torch decides (found by its metadata, as the job's Python sees it): before 2.6
    the buffer size is read under its old name, after it the old name makes every rank warn."""
    site = tmp_path / "site"
    info = site / f"torch-{torch_version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: torch\nVersion: {torch_version}\n"
    )
    env = job_env({**os.environ, "PYTHONPATH": str(site)}, tmp_path)
    env.pop("TORCH_NCCL_TRACE_BUFFER_SIZE", None)
    shown = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('TORCH_NCCL_TRACE_BUFFER_SIZE'))"],
        env=env, capture_output=True, text=True, timeout=30,
    ).stdout.strip()  # fmt: skip
    assert shown == str(old_name)


@pytest.mark.parametrize(
    ("version", "before"),
    [
        ("2.5.1+cu124", True),
        ("2.2.0", True),
        ("2.6.0", False),
        ("2.13.0a0+git", False),
        ("10.1", False),
        ("nightly", False),
    ],
)
def test_torch_versions_before_2_6(version, before):
    assert torch_before_2_6(version) is before
    names = debug_env({}, "/logs", torch_version=version)
    assert ("TORCH_NCCL_TRACE_BUFFER_SIZE" in names) is before


def test_pyspy_dump_is_read_with_locals():
    dump = """Process 17825: python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 17825 (idle): "MainThread"
    main (/work/train.py:33)
        Locals:
            rank: 1
            step: 3
    <module> (/work/train.py:45)
Thread 17826 (idle): "nccldoctor-fr"
    run (/usr/lib/python3.11/threading.py:982)
"""
    frame = user_frame(main_thread_frames(dump))
    assert frame.describe() == "/work/train.py:33 in main (step=3)"


def test_check_and_watch_name_the_same_step_of_a_stuck_rank():
    dump = """Thread 17825 (idle): "MainThread"
    wait (/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py:2501)
    train (/work/train.py:33)
        Locals:
            step: 7
    <module> (/work/train.py:45)
"""
    stuck = RankOutcome(rank=1, node="A", state=OutcomeState.STUCK, phase_reached="ddp", exit_code=-9, stuck="still in ddp",
                        stacks=dump, log_path="rank1/worker.log")  # fmt: skip
    (finding,) = rank_findings([stuck])
    process = RankProcess(pid=1, rank=1, local_rank=1, host="A", argv=[])
    watched = rank_state(RankEvidence(process=process, stacks=dump))
    assert watched.where == "/work/train.py:33 in train (step=7)"
    assert f"main thread stopped at: {watched.where}" in finding.evidence


def test_liveness_idle_only_when_nothing_moves():
    tracker = LivenessTracker(start=0.0)
    tracker.observe(Sample(0.0, {1: 1.0}, {"a": 10}, 0))
    tracker.observe(Sample(1.0, {1: 1.5}, {"a": 10}, 0))  # CPU busy
    assert tracker.job_idle_for(1.0) == 0.0
    tracker.observe(Sample(2.0, {1: 1.501}, {"a": 10}, 0))  # waiting: 0.1% CPU
    tracker.observe(Sample(5.0, {1: 1.502}, {"a": 10}, 0))
    assert tracker.job_idle_for(5.0) == 4.0
    tracker.observe(Sample(6.0, {1: 1.502}, {"a": 11}, 0))  # the NCCL log grew
    assert tracker.job_idle_for(6.0) == 0.0
    tracker.observe(Sample(7.0, {1: 1.502}, {"a": 11}, 5))  # output moved
    assert tracker.job_idle_for(7.5) == 0.5


def test_vanished_process_yields_no_stacks(tmp_path):
    ghost = RankProcess(pid=2**22 + 12345, rank=0, local_rank=0, host="h", argv=[])
    (evidence,) = collect(tmp_path, [ghost], want_stacks=True)
    assert evidence.stacks is None
