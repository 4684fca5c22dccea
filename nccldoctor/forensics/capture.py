"""Ask a live rank process where it is: Python stacks, its last NCCL lines, its Flight Recorder.

One implementation for `check`'s agent watchdog and `watch` alike. Everything has a deadline and
tolerates a process, or a file, that vanished meanwhile: a missing answer is ``None``/``[]``.
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import signal
import subprocess
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path

from nccldoctor.forensics.flightrec import load_flight_recorder

STACK_WAIT_S = 2.0
PYSPY_TIMEOUT_S = 15.0
FLIGHT_RECORDER_WAIT_S = 5.0
# The last NCCL lines kept per rank. 20, not 5: the WARN that explains a hang is often followed
# by a few INFO lines (abort, teardown), and 20 bounded lines per rank cost little in a report.
LAST_NCCL_LINES = 20
_TAIL_BYTES = 64 * 1024


def python_stacks(pid: int, stacks_file: Path) -> tuple[str | None, str | None]:
    """(stacks, source): py-spy with locals when installed (the user's loop variables name the
    step), else faulthandler, which the process registered on SIGUSR1 to write ``stacks_file``."""
    py_spy = shutil.which("py-spy")
    if py_spy:
        try:
            out = subprocess.run(
                [py_spy, "dump", "--locals", "--full-filenames", "--pid", str(pid)],
                capture_output=True, text=True, timeout=PYSPY_TIMEOUT_S, check=False,
            )  # fmt: skip
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout, "py-spy"
        except (OSError, subprocess.TimeoutExpired):
            pass
    before = _size(stacks_file)
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError:
        return None, None
    deadline = time.monotonic() + STACK_WAIT_S
    while time.monotonic() < deadline and _size(stacks_file) == before:
        time.sleep(0.05)
    time.sleep(0.1)  # let faulthandler finish the other threads
    try:
        text = stacks_file.read_text(errors="replace")[before:]
    except OSError:
        return None, None
    return (text, "faulthandler") if text.strip() else (None, None)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def last_nccl_lines(paths: Iterable[Path], count: int = LAST_NCCL_LINES) -> list[str]:
    """The last ``count`` NCCL lines of a rank's NCCL debug files, oldest file first; a file
    that vanished or cannot be read contributes nothing."""
    dated = []
    for path in paths:
        try:
            dated.append((path.stat().st_mtime, path))
        except OSError:
            continue
    lines: deque[str] = deque(maxlen=count)
    for _, path in sorted(dated):
        try:
            with open(path, "rb") as f:
                start = max(0, f.seek(0, io.SEEK_END) - _TAIL_BYTES)
                f.seek(start)
                text = f.read().decode(errors="replace").splitlines()
        except OSError:
            continue
        lines.extend(ln for ln in (text[1:] if start else text) if "NCCL" in ln)  # 1st may be cut
    return list(lines)


def flight_recorder(trigger: Path, dump: Path) -> tuple[list[dict] | None, str | None]:
    """Ask the process for its Flight Recorder dump through the ``trigger`` fifo it reads, and
    load ``dump`` safely; (entries, None) or (None, why not)."""
    dump.unlink(missing_ok=True)
    try:
        fd = os.open(trigger, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        why = "no reader on the trigger" if exc.errno == errno.ENXIO else str(exc)
        return None, f"flight recorder not reachable: {why}"
    with os.fdopen(fd, "wb") as out:
        out.write(b"dump\n")
    deadline = time.monotonic() + FLIGHT_RECORDER_WAIT_S
    while time.monotonic() < deadline and not dump.exists():
        time.sleep(0.05)
    try:
        data = dump.read_bytes()
    except OSError:
        return None, "no flight recorder dump (process group not initialised, or busy)"
    if data.startswith(b"flight recorder unavailable"):
        return None, data.decode(errors="replace")
    return load_flight_recorder(data)
