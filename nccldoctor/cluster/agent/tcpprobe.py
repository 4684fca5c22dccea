"""Raw TCP throughput between a node and the master: what the wire gives without any library.

The report holds the largest allreduce's bus bandwidth against this, so the user sees which
fraction of the wire the collectives reach; a probe that measured less than the busbw is a lower
bound of the link and is not compared (checks/linkrates.py). Both loops are bounded in time.

Each loop runs in a process of its own (:func:`run_isolated`, ``python -m
nccldoctor.cluster.agent.tcpprobe source|sink SECONDS`` on the connection as stdin): the agent imports
torch in another thread meanwhile, and a loop sharing that GIL waits up to the switch interval
(5 ms) after every send or receive, so it would measure the import, not the wire.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

_CHUNK = 1 << 20
WINDOW_S = 0.05
MIN_S = 0.25  # past the first burst into the empty socket buffers
SETTLE_WINDOWS = 4
SETTLE_SPREAD = 0.1
_START_S = 10.0  # a Python start, with the machine busy


def source(conn: socket.socket, seconds: float) -> tuple[int, float]:
    """Send zeros until the rate has settled (:func:`settled`), at most ``seconds``; (bytes sent,
    seconds)."""
    block = memoryview(bytes(_CHUNK))
    rates: list[float] = []  # bytes per second of each window
    sent = window_bytes = 0
    start = window_start = now = time.monotonic()
    while now < start + seconds:
        n = conn.send(block)
        sent += n
        window_bytes += n
        now = time.monotonic()
        if now - window_start >= WINDOW_S:
            rates.append(window_bytes / (now - window_start))
            window_bytes, window_start = 0, now
            if now - start >= MIN_S and settled(rates):
                break
    return sent, now - start


def settled(rates: list[float]) -> bool:
    """The last SETTLE_WINDOWS rates within SETTLE_SPREAD of their mean: more seconds would
    only repeat the number (TCP leaves slow start within a few round trips on a LAN)."""
    last = rates[-SETTLE_WINDOWS:]
    if len(last) < SETTLE_WINDOWS:
        return False
    mean = sum(last) / len(last)
    return max(last) - min(last) <= SETTLE_SPREAD * mean


def sink(conn: socket.socket, max_seconds: float) -> tuple[int, float]:
    """Receive until the peer closes its side (or ``max_seconds``); (bytes, seconds from the
    first byte, so the sender's own start is not counted)."""
    buffer = bytearray(_CHUNK)
    received = 0
    end = time.monotonic() + max_seconds
    first = None
    while time.monotonic() < end:
        n = conn.recv_into(buffer)
        if n == 0:
            break
        first = first or time.monotonic()
        received += n
    return received, max(time.monotonic() - (first or end), 1e-9)


LOOPS = {"source": source, "sink": sink}


def run_isolated(
    role: str,
    conn: socket.socket,
    seconds: float,
    started: Callable[[subprocess.Popen[Any]], None] = lambda child: None,
) -> tuple[int, float]:
    """:func:`source` or :func:`sink` on ``conn`` in a child process; (bytes, seconds).
    ``started`` gets the child once it exists (the master keeps it to stop it when it closes,
    then says "go": the sink is there first).

    Raises:
        OSError: the child failed (its stderr is the message) or ran past its bound.
    """
    argv = [sys.executable, "-m", "nccldoctor.cluster.agent.tcpprobe", role, f"{seconds:g}"]
    with subprocess.Popen(argv, stdin=conn.fileno(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as child:  # fmt: skip
        try:
            started(child)
            out, err = child.communicate(timeout=seconds + _START_S)
        except subprocess.TimeoutExpired:
            child.kill()
            raise OSError(f"the TCP {role} ran past {seconds + _START_S:g} s") from None
        except BaseException:
            child.kill()
            raise
    try:
        nbytes, elapsed = out.split()
        return int(nbytes), float(elapsed)
    except ValueError:
        lines = err.decode(errors="replace").strip().splitlines()
        raise OSError(
            f"the TCP {role} failed: {lines[-1] if lines else child.returncode}"
        ) from None


def gbps(nbytes: int, seconds: float) -> float:
    """Gigabits per second (1e9, as network links are rated)."""
    return nbytes * 8 / seconds / 1e9


def main(argv: list[str]) -> int:
    role, seconds = argv[0], float(argv[1])
    with socket.socket(fileno=0) as conn:
        conn.settimeout(_START_S)  # a silent peer ends the loop instead of holding it
        nbytes, elapsed = LOOPS[role](conn, seconds)
    print(nbytes, elapsed)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
