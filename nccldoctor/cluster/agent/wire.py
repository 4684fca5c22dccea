"""The gate's wire: one JSON line each way, read within a length and a deadline.

The master's gate reads what anyone who reaches its port sends (docs/design.md#gate), and its
clients read the gate's answers, with the same bounds: a line of at most ``MAX_LINE`` bytes
that arrives whole before its deadline.
"""

from __future__ import annotations

import json
import socket
import time

MAX_LINE = 16 * 1024  # a hello is ~200 bytes; a note quotes one error, cut to gate.NOTE_CHARS
IO_TIMEOUT = 5.0
# A busy gate is asked again this soon; so is one not open yet: a node whose preflight ended
# first knocks before the master's gate is up (it opens when the master's preflight ends), and
# a refused connect costs a round trip, a long pause every node's start.
RETRY_S = 0.1


class GateBusy(OSError):
    """The gate served as many connections as it may; retrying soon will be answered."""


def read_line(conn: socket.socket, deadline: float, limit: int = MAX_LINE) -> bytes:
    """One line (without its newline) that arrives whole before ``deadline`` (monotonic) and
    holds at most ``limit`` bytes; what follows the newline stays in the socket (the throughput
    probe's bytes are read by its own process). b"" when the peer closed before a newline.

    Raises:
        TimeoutError: the line did not arrive in time.
        ValueError: the line is longer than ``limit``.
    """
    line = bytearray()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the message did not arrive in time")
        conn.settimeout(remaining)
        head = conn.recv(min(4096, limit + 1 - len(line)), socket.MSG_PEEK)
        if not head:
            return b""
        end = head.find(b"\n")
        line += conn.recv(end + 1 if end >= 0 else len(head))
        if end >= 0:
            return bytes(line[:-1])
        if len(line) > limit:
            raise ValueError(f"a message longer than {limit} bytes")


def request_line(line: bytes) -> dict | None:
    """The JSON object of a request line; None for anything else (garbage, nesting too deep)."""
    try:
        request = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return request if isinstance(request, dict) else None


def request(
    master: str, port: int, message: dict, deadline: float, retry_busy: bool = False
) -> dict:
    """One request and its answer.

    Raises:
        GateBusy: the gate turned us away (``retry_busy``: only once ``deadline`` has passed).
        OSError, ValueError: no answer, or not one JSON line.
    """
    while True:
        with socket.create_connection((master, port), timeout=min(IO_TIMEOUT, left(deadline))) as c:
            send(c, message)
            # a dial is answered once it has been tried: up to its deadline
            line = read_line(c, max(deadline, time.monotonic() + IO_TIMEOUT))
        if not line:
            raise ConnectionError("the gate closed the connection without an answer")
        reply = json.loads(line)
        if not isinstance(reply, dict):
            raise ValueError("the answer is not a JSON object")
        if not reply.get("busy"):
            return reply
        if not retry_busy or time.monotonic() + RETRY_S >= deadline:
            raise GateBusy(str(reply.get("error")))
        time.sleep(RETRY_S)


def send(conn: socket.socket, message: dict) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def left(deadline: float) -> float:
    return max(0.1, deadline - time.monotonic())
