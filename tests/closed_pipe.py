"""A reader that leaves early, as `| head -1` does: the command's stdout is a real pipe, read a
little (or not at all) and closed while the command still has more to write."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# One page, the smallest pipe Linux allows: a few KiB of output already outlast the reader.
PIPE_BYTES = 4096


@dataclass
class Run:
    returncode: int
    read: bytes  # what the reader took before it left: up to its first newline, and a little more
    stderr: str


def run_reader_leaves(
    argv: Sequence[str],
    env: Mapping[str, str],
    stderr_file: Path,
    read_bytes: int = 1,
    after_close: Callable[[], None] = lambda: None,
    timeout_s: float = 120,
) -> Run:
    """Run ``argv`` with its stdout on a one-page pipe; read until the first newline (or
    nothing, with ``read_bytes=0``), close the pipe, call ``after_close``, wait for the end.
    stderr goes to ``stderr_file`` (a pipe of its own could fill while nobody reads it)."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(read_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    taken = b""
    with open(stderr_file, "wb") as err:
        # a session of its own: a run past its time is ended with every process it started
        proc = subprocess.Popen(
            argv, env=dict(env), stdout=write_end, stderr=err, start_new_session=True
        )
    os.close(write_end)  # the command holds the only writer
    try:
        while read_bytes and b"\n" not in taken and (chunk := os.read(read_end, 256)):
            taken += chunk
    finally:
        os.close(read_end)
    try:
        after_close()
        proc.wait(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return Run(proc.returncode, taken, stderr_file.read_text(errors="replace"))
