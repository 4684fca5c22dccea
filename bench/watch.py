"""Benchmark: the watcher's overhead on a healthy job, and its own CPU while the job idles.

1. The example DDP job (tests/watch/example_job.py, torchrun, 2 ranks, gloo) with and without
   `nccldoctor watch`, alternated in one run; prints the wall-time ratio (target ≤ 1.05).
2. `nccldoctor watch -- sleep S`: the watcher's own CPU seconds (not its children's) over S
   seconds of wall time, as a share of one core (target < 1%).
Not part of the test suite; numbers are ratios measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "tests" / "watch" / "example_job.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job_cmd() -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
            "--master-addr", "127.0.0.1", "--master-port", str(free_port()), str(JOB)]  # fmt: skip


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def overhead(repeats: int, steps: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "EXAMPLE_STEPS": str(steps)}
    bare, watched = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeats):
            bare.append(timed(job_cmd(), env))
            out = Path(tmp) / f"w{i}"
            watch = [sys.executable, "-m", "nccldoctor", "watch", "--out", str(out), "--"]
            watched.append(timed(watch + job_cmd(), env))
    b, w = statistics.median(bare), statistics.median(watched)
    print(f"healthy job: bare {b:.2f} s, watched {w:.2f} s (median of {repeats})")
    print(f"watch overhead ratio: {w / b:.3f} (target <= 1.05)")


def idle_cpu(seconds: float) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "nccldoctor",
            "watch",
            "--out",
            tmp,
            "--",
            "sleep",
            str(seconds),
        ]
        proc = subprocess.Popen(cmd, env=env)
        watcher = psutil.Process(proc.pid)
        time.sleep(3)  # past start-up (imports)
        cpu0, t0 = sum(watcher.cpu_times()[:2]), time.perf_counter()
        time.sleep(seconds - 5)
        cpu1, t1 = sum(watcher.cpu_times()[:2]), time.perf_counter()
        proc.wait()
    share = (cpu1 - cpu0) / (t1 - t0)
    print(f"watcher CPU while the job idles: {100 * share:.2f}% of one core (target < 1%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    args = parser.parse_args()
    overhead(args.repeats, args.steps)
    idle_cpu(args.idle_seconds)


if __name__ == "__main__":
    main()
