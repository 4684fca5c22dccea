"""`nccldoctor watch` over a real torchrun job (gloo, 2 ranks on this host)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.closed_pipe import run_reader_leaves
from tests.ports import free_port

EXAMPLE_JOB = Path(__file__).parent / "example_job.py"
REPO = Path(__file__).resolve().parents[2]


def run_dir(out: Path) -> Path:
    """The one run's folder under ``out``, ``OUT/<node>/<run>/`` (the node: this host)."""
    (latest,) = out.glob("*/latest")
    return latest.parent / os.readlink(latest)


def run_watch(tmp_path: Path, fault: str | None, hang_after: float = 6.0, extra: tuple = ()):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # py-spy
    env.pop("EXAMPLE_FAULT", None)
    if fault:
        env["EXAMPLE_FAULT"] = fault
    out = tmp_path / "watch"
    cmd = [
        sys.executable, "-m", "nccldoctor", "watch", "--out", str(out),
        "--hang-after", str(hang_after), *extra, "--",
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        "--master-addr", "127.0.0.1", "--master-port", str(free_port()), str(EXAMPLE_JOB),
    ]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    elapsed = time.monotonic() - started
    report = json.loads((run_dir(out) / "report.json").read_text())
    return proc, report, elapsed


def test_healthy_job_passes_through(tmp_path):
    proc, report, _ = run_watch(tmp_path, None)
    assert proc.returncode == 0, proc.stderr
    # the job's own output passes through unchanged
    assert "rank 0 step 7 loss" in proc.stdout and "rank 1 step 7 loss" in proc.stdout
    assert report["kind"] == "watch"
    assert report["watch"]["exit_code"] == 0 and not report["watch"]["hung"]
    assert report["findings"] == []
    assert sorted(r["rank"] for r in report["ranks"]) == [0, 1]
    # the page beside the JSON, its path the last line (stderr: stdout is the job's)
    page = run_dir(tmp_path / "watch") / "report.html"
    *_, verdict, last = proc.stderr.splitlines()
    assert last == f"Page: {page}"
    assert verdict.startswith("nccldoctor: The job finished successfully. Report: ")
    # only the current name of the Flight Recorder's size is set: torch warns on the old one
    assert "is deprecated" not in proc.stderr
    assert "nccldoctor watch report" in page.read_text()


def test_stalled_rank_is_named_with_its_step(tmp_path):
    # 3 s without progress: both ranks are past their start (imports, init) by step 3
    proc, report, elapsed = run_watch(tmp_path, "stall:1:3", hang_after=3.0)
    assert proc.returncode == 3, proc.stderr
    assert elapsed < 3.0 + 60  # the hang is reported and the job ended, not left running
    finding = next(f for f in report["findings"] if f["id"] == "watch.hang")
    assert finding["category"] == "collective_timeout_hang"
    assert finding["rank"] == 1
    verdict = report["watch"]["verdict"]
    assert "rank 1" in verdict and "is behind" in verdict
    assert "example_job.py" in verdict
    # the step comes from py-spy's locals when py-spy is installed (it is a test dependency)
    assert "step=3" in verdict
    behind = next(r for r in report["ranks"] if r["rank"] == 1)
    ahead = next(r for r in report["ranks"] if r["rank"] == 0)
    assert behind["last_collective_seq"] < ahead["last_collective_seq"]  # Flight Recorder
    assert report["hang"]["stuck"]
    # the ranks' dumps matched across them name the collective rank 1 never joined
    fr = next(f for f in report["findings"] if f["id"] == "flightrec.ranks-missing")
    assert fr["rank"] == 1
    assert f"never joined collective #{ahead['last_collective_seq']} (" in fr["title"]
    [group] = report["flight_recorder"]["groups"]
    assert group["divergences"][0]["missing"] == [1]


def test_raising_rank_is_the_cause_and_exit_code_passes_through(tmp_path):
    proc, report, _ = run_watch(tmp_path, "raise:0:2")
    assert proc.returncode == 1  # torchrun's own exit code for a failed worker
    assert report["watch"]["exit_code"] == 1
    finding = next(f for f in report["findings"] if f["id"] == "watch.rank-failed")
    assert finding["rank"] == 0
    assert "example failure on rank 0 at step 2" in finding["title"]
    assert "example_job.py" in finding["title"]


def test_plain_exit_code_passes_through(tmp_path):
    out = tmp_path / "w"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "nccldoctor", "watch", "--out", str(out), "--",
         sys.executable, "-c", "import sys; print('hi'); sys.exit(7)"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 7
    assert proc.stdout == "hi\n"
    assert json.loads((run_dir(out) / "report.json").read_text())["watch"]["exit_code"] == 7


def test_a_rerun_in_the_same_folder_reads_nothing_of_the_run_before(tmp_path):
    """A job that failed with a rank's error in its log, then the fixed job in the same --out:
    the second report reads only its own run's files (it read every nccl.*.log in --out)."""
    out, env = tmp_path / "w", {**os.environ, "PYTHONPATH": str(REPO)}
    failing = ("import os, sys; open(os.environ['NCCLDOCTOR_WATCH_DIR'] + '/error.4242.txt', 'w')"
               ".write('RuntimeError: first run boom'); sys.exit(7)")  # fmt: skip
    reports = []
    for job, code in ((failing, 7), ("print('fixed')", 0)):
        proc = subprocess.run(
            [sys.executable, "-m", "nccldoctor", "watch", "--out", str(out), "--",
             sys.executable, "-c", job],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert proc.returncode == code, proc.stderr
        reports.append(run_dir(out) / "report.json")
    assert reports[0].parent != reports[1].parent and reports[0].is_file()
    assert "first run boom" in reports[0].read_text()
    assert "first run boom" not in reports[1].read_text()
    assert json.loads(reports[1].read_text())["watch"]["exit_code"] == 0


def test_an_out_that_cannot_be_written_is_one_line_before_the_job_starts(tmp_path):
    (tmp_path / "out").write_text("")
    proc = subprocess.run(
        [sys.executable, "-m", "nccldoctor", "watch", "--out", str(tmp_path / "out"), "--",
         sys.executable, "-c", "open('started', 'w')"],
        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60,
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert f"--out {tmp_path / 'out'}: {tmp_path / 'out'} is a file" in proc.stderr
    assert not (tmp_path / "started").exists()


def test_missing_command_is_a_usage_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "nccldoctor", "watch", "--out", str(tmp_path), "--", "no-such-cmd-x"],
        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "no-such-cmd-x" in proc.stderr


@pytest.mark.parametrize(("option", "value"), [("--hang-after", "0"), ("--hang-after", "-5"),
                                               ("--grace", "-1")])  # fmt: skip
def test_bad_hang_after_or_grace(tmp_path, option, value):
    proc = subprocess.run(
        [sys.executable, "-m", "nccldoctor", "watch", option, value, "--", "true"],
        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60,
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    assert f"{option} must be" in proc.stderr


def test_a_log_deleted_mid_run_does_not_end_the_watch_as_crashed(tmp_path):
    out = tmp_path / "w"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    job = (
        "import os, pathlib, sys, time\n"
        "log = pathlib.Path(os.environ['NCCLDOCTOR_WATCH_DIR']) / f'nccl.h.{os.getpid()}.log'\n"
        "log.write_text('h:1:1 [0] NCCL INFO Bootstrap: Using eth0:198.18.0.2<0>\\n')\n"
        "time.sleep(1.5)\n"  # the watcher samples the log while it exists
        "log.unlink()\n"
        "sys.exit(5)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "nccldoctor", "watch", "--out", str(out), "--",
         sys.executable, "-c", job],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 5, proc.stderr
    report = json.loads((run_dir(out) / "report.json").read_text())
    assert report["watch"]["exit_code"] == 5
    assert [f["id"] for f in report["findings"]] == ["watch.exit-nonzero"]


def test_a_reader_that_leaves_early_leaves_the_job_running_and_watched(tmp_path):
    """`nccldoctor watch -- CMD | head -1`: the job writes 1 MiB more after the reader left; the
    watcher drains it (a job blocked on a full pipe would look hung), the report keeps its last
    lines, and the exit code is still the job's."""
    out, closed = tmp_path / "w", tmp_path / "closed"
    job = (
        "import pathlib, sys, time\n"
        "print('first line', flush=True)\n"
        f"while not pathlib.Path({str(closed)!r}).exists(): time.sleep(0.05)\n"
        "for i in range(16384): print(f'line {i:05d} ' + 'x' * 50)\n"
        "print('job done', flush=True)\n"
        "sys.exit(4)\n"
    )
    run = run_reader_leaves(
        [sys.executable, "-m", "nccldoctor", "watch", "--out", str(out), "--hang-after", "5",
         "--", sys.executable, "-c", job],
        {**os.environ, "PYTHONPATH": str(REPO)}, tmp_path / "stderr",
        after_close=closed.touch, timeout_s=90,
    )  # fmt: skip
    assert run.read == b"first line\n"
    assert run.returncode == 4, run.stderr
    assert "Traceback" not in run.stderr and "Exception" not in run.stderr, run.stderr
    report = json.loads((run_dir(out) / "report.json").read_text())
    assert not report["watch"]["hung"] and report["watch"]["exit_code"] == 4
    assert report["watch"]["output_tail"][-2:] == ["line 16383 " + "x" * 50, "job done"]
    assert run.stderr.splitlines()[-1] == f"Page: {run_dir(out) / 'report.html'}"
