"""End process groups: SIGTERM each live one, then SIGKILL what is left after a grace period."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence


def stop_groups(procs: Sequence[subprocess.Popen], term_wait_s: float) -> None:
    """Each process leads its own session (``start_new_session``): its whole group is ended."""
    for proc in procs:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + term_wait_s
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.1)
    for proc in procs:
        _signal_group(proc, signal.SIGKILL)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            continue


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except OSError:
        return
