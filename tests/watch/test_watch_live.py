"""`nccldoctor watch`'s live line: on a terminal the job's state on one line with the job's own
output passing above it intact; in a pipe plain lines, and the job's stdout byte for byte."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.terminal import run_on_pty, screen

REPO = Path(__file__).resolve().parents[2]
# A rank (RANK is set) that prints, goes quiet, leaves a line unfinished, then ends it.
# Seconds apart: the job's stdout and stderr reach the watcher through two pipes.
JOB = (
    "import sys, time\n"
    "print('step 1 loss 0.9', flush=True)\n"
    "time.sleep(0.5)\n"
    "print('a warning', file=sys.stderr, flush=True)\n"
    "time.sleep(3)\n"
    "sys.stdout.write('step 2 '); sys.stdout.flush()\n"
    "time.sleep(1.5)\n"
    "print('loss 0.8', flush=True)\n"
)


def _watch(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    argv = [sys.executable, "-m", "nccldoctor", "watch", "--out", str(tmp_path / "watch"),
            "--no-html", "--hang-after", "30", "--", sys.executable, "-c", JOB]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "RANK": "0", "TERM": "xterm"}
    env.pop("NO_COLOR", None)
    return argv, env


def test_on_a_terminal_the_line_shows_the_job_and_its_output_passes_above(tmp_path: Path) -> None:
    argv, env = _watch(tmp_path)
    data, code = run_on_pty(argv, env, timeout_s=120, width=100)
    assert code == 0, data.decode(errors="replace")[-2000:]
    text = data.decode()
    assert "job running" in text and "1 rank" in text  # the live line, drawn
    assert "no progress for 2 s of 30 s" in text  # the quiet seconds against --hang-after
    # every line of the job on a row of its own, none cut by the line; the line gone at the end
    rows = screen(data, 100)
    assert rows[:3] == ["step 1 loss 0.9", "a warning", "step 2 loss 0.8"]
    # the watcher's verdict closes a healthy job too (its report's path wraps on 100 columns)
    assert "".join(rows[3:]).startswith("nccldoctor: The job finished successfully. Report: ")


def test_in_a_pipe_the_job_keeps_stdout_and_the_watcher_says_plain_lines(tmp_path: Path) -> None:
    argv, env = _watch(tmp_path)
    proc = subprocess.run(argv, env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    assert proc.stdout == b"step 1 loss 0.9\nstep 2 loss 0.8\n"
    lines = proc.stderr.decode().splitlines()
    assert b"\x1b" not in proc.stderr
    assert lines.count("a warning") == 1
    *ours, verdict = [line for line in lines if line != "a warning"]
    assert verdict.startswith("nccldoctor: The job finished successfully. Report: ")
    assert ours and all(line.startswith("nccldoctor: job running ") for line in ours), lines
    assert any(line.endswith("· 1 rank") for line in ours), lines  # said when the rank came
    assert len(ours) <= 2  # a line when something changed, not one a second
