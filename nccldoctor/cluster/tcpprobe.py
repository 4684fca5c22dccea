"""Raw TCP throughput between a node and the master: what the wire gives without any library.

The report divides the largest allreduce's bus bandwidth by this, so the user sees which
fraction of the wire the collectives reach. Both loops are bounded in time.
"""

from __future__ import annotations

import socket
import time

_CHUNK = 1 << 20


def source(conn: socket.socket, seconds: float) -> int:
    """Send zeros for ``seconds``; the number of bytes sent."""
    block = memoryview(bytes(_CHUNK))
    sent = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sent += conn.send(block)
    return sent


def sink(conn: socket.socket, max_seconds: float) -> tuple[int, float]:
    """Receive until the peer closes its side (or ``max_seconds``); (bytes, seconds)."""
    buffer = bytearray(_CHUNK)
    received = 0
    start = time.monotonic()
    end = start + max_seconds
    while time.monotonic() < end:
        n = conn.recv_into(buffer)
        if n == 0:
            break
        received += n
    return received, max(time.monotonic() - start, 1e-9)


def gbps(nbytes: int, seconds: float) -> float:
    """Gigabits per second (1e9, as network links are rated)."""
    return nbytes * 8 / seconds / 1e9
