"""`nccldoctor watch` told to stop (a scheduler's SIGTERM, a closed terminal's SIGHUP, SIGQUIT):
its job goes down with it and the report says so; a job that outlives its grace is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.watch.test_watch import REPO, run_dir


def _watch_stopped(
    tmp_path: Path, job: str, sig: int, *options: str
) -> tuple[int, dict, int, float]:
    """Watch ``job`` (sh; it writes its pid to $PIDFILE first), send watch ``sig`` once the
    job runs; watch's exit code, its report, the job's pid and the seconds from the signal to
    watch's exit."""
    out, pidfile = tmp_path / "watch", tmp_path / "job.pid"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PIDFILE": str(pidfile)}
    watch = subprocess.Popen(
        [sys.executable, "-m", "nccldoctor", "watch", "--out", str(out), *options, "--",
         "sh", "-c", job],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not pidfile.is_file() or not pidfile.read_text().strip():
            assert time.monotonic() < deadline and watch.poll() is None, "the job never started"
            time.sleep(0.05)
        watch.send_signal(sig)
        signalled = time.monotonic()
        watch.communicate(timeout=40)
        stopped_s = time.monotonic() - signalled
    finally:
        watch.kill()
    report = json.loads((run_dir(out) / "report.json").read_text())
    return watch.returncode, report, int(pidfile.read_text()), stopped_s


def _gone(pid: int) -> bool:
    """No process is left in the job's process group (it leads its own session), once the
    killed ones are reaped (their parent was the job, so by init, a moment later)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT])
def test_a_stopped_watch_stops_its_job_and_reports(tmp_path, sig):
    code, report, pid, _ = _watch_stopped(tmp_path, 'echo $$ > "$PIDFILE"; exec sleep 120', sig)
    assert code == 128 + signal.SIGTERM  # the job's own: it ended on the SIGTERM passed on
    assert _gone(pid)
    assert report["watch"]["stopped_by"] == signal.Signals(sig).name
    assert not report["watch"]["killed"] and report["completed"] is False
    (finding,) = report["findings"]
    assert finding["id"] == "watch.stopped" and finding["severity"] == "fail"
    assert finding["title"].startswith(f"nccldoctor watch got {signal.Signals(sig).name}")


def test_a_job_that_ignores_sigterm_is_killed_after_its_grace(tmp_path):
    job = 'trap "" TERM HUP QUIT; echo $$ > "$PIDFILE"; while :; do sleep 0.1; done'
    code, report, pid, stopped_s = _watch_stopped(tmp_path, job, signal.SIGTERM, "--grace", "2")
    assert code == 128 + signal.SIGKILL
    assert _gone(pid)
    assert 2 <= stopped_s < 30  # the grace it was given, not the default 10 s
    assert report["watch"]["killed"] and report["watch"]["stopped_by"] == "SIGTERM"
    assert "was killed (SIGKILL to its process group)" in report["watch"]["verdict"]
    log = (run_dir(tmp_path / "watch") / "watch.log").read_text()
    assert "the job outlived 2 s after SIGTERM: killing it" in log
