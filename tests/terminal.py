"""A pseudo-terminal for tests: run a command on one, and replay what it wrote as a screen.

The screen follows the few controls a live line uses (ECMA-48): CR, LF, BS, erase in line (CSI
K), cursor up (CSI A); other CSI sequences (colours, the cursor's visibility) change no cell.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from collections.abc import Mapping, Sequence

_CSI = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])")


def open_pty(width: int = 100) -> tuple[int, int]:
    """A pseudo-terminal of ``width`` columns: (master, slave) descriptors."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, width, 0, 0))
    return master, slave


def run_on_pty(
    argv: Sequence[str], env: Mapping[str, str], timeout_s: float, width: int = 100
) -> tuple[bytes, int]:
    """Everything ``argv`` wrote to a terminal of ``width`` columns as its stdin, stdout and
    stderr, and its exit code; killed after ``timeout_s``."""
    master, slave = open_pty(width)
    proc = subprocess.Popen(
        argv, stdin=slave, stdout=slave, stderr=slave, env=dict(env), start_new_session=True
    )
    os.close(slave)
    try:
        return read_pty(master, proc, time.monotonic() + timeout_s), proc.wait()
    finally:
        end(proc)
        os.close(master)


def read_pty(master: int, proc: subprocess.Popen, deadline: float, until: bytes = b"") -> bytes:
    """What ``proc`` writes to the pty ``master`` until it ends, the monotonic ``deadline``, or
    (given ``until``) the first time that appears."""
    data = b""
    while time.monotonic() < deadline and not (until and until in data):
        if select.select([master], [], [], 0.2)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer of the terminal has closed it
                break
            if not chunk:
                break
            data += chunk
        elif proc.poll() is not None:
            break
    return data


def end(proc: subprocess.Popen) -> None:
    """``proc``'s session killed if it still runs, and reaped."""
    if proc.poll() is None:
        os.killpg(proc.pid, 9)
    proc.wait()


def screen(data: bytes, width: int = 100) -> list[str]:
    """The rows ``data`` leaves on a terminal of ``width`` columns, without trailing blanks."""
    text = data.decode("utf-8", errors="replace")
    rows: list[list[str]] = [[]]
    row = col = i = 0
    while i < len(text):
        match = _CSI.match(text, i)
        if match:
            arg, op = match.groups()
            if op == "K":  # erase in line: 0 (or none) from the cursor on, 2 the whole row
                rows[row] = [" "] * col if arg == "2" else rows[row][:col]
            elif op == "A":
                row = max(0, row - int(arg or 1))
            i = match.end()
            continue
        ch = text[i]
        if ch == "\r":
            col = 0
        elif ch == "\n":
            row += 1
        elif ch == "\b":
            col = max(0, col - 1)
        elif ch >= " ":
            if col >= width:  # the terminal wraps
                row, col = row + 1, 0
            while len(rows) <= row:
                rows.append([])
            cells = rows[row]
            cells.extend(" " * (col + 1 - len(cells)))
            cells[col] = ch
            col += 1
        while len(rows) <= row:
            rows.append([])
        i += 1
    lines = ["".join(cells).rstrip() for cells in rows]
    while lines and not lines[-1]:
        lines.pop()
    return lines
