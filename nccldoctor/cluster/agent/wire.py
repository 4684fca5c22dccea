"""The gate's wire: one JSON line each way, read within a length and a deadline.

The master's gate reads what anyone who reaches its port sends (docs/design.md#gate), and its
clients read the gate's answers, with the same bounds: a line of at most ``MAX_LINE`` bytes
that arrives whole before its deadline. The gate reads a request as a :class:`Request`, each
field for what it may be (a field of another type is no value: the gate refuses what it cannot
serve rather than failing on it); a client reads an answer as an :class:`Answer`, every field of
its type, or not at all.
"""

from __future__ import annotations

import json
import math
import socket
import time
from dataclasses import dataclass

from nccldoctor.facts.serde import from_dict
from nccldoctor.jsondoc import json_object

MAX_LINE = 16 * 1024  # a hello is ~200 bytes; a note quotes one error, cut to NOTE_CHARS
NAME_CHARS = 255  # a host name's limit
NOTE_CHARS = 2000
IO_TIMEOUT = 5.0
# A busy gate is asked again this soon; so is one not open yet: a node whose preflight ended
# first knocks before the master's gate is up (it opens when the master's preflight ends), and
# a refused connect costs a round trip, a long pause every node's start.
RETRY_S = 0.1


class GateBusy(OSError):
    """The gate served as many connections as it may; retrying soon will be answered."""


@dataclass(frozen=True)
class Request:
    """One request to the gate as a peer sent it (knock.py sends them)."""

    op: str = ""  # hello | whoami | note | dial | tcp
    node: str = "?"  # printable text of a host name's length
    token: str | None = None  # None: not text, which no token is
    advertised: str = "?"  # hello: the address the node says it has
    error: str = ""  # note: why the node stops, printable, cut
    port: int | None = None  # dial: the node's port to dial back, when it is a TCP port
    seconds: float | None = None  # dial, tcp: how long, when a number (a huge integer: inf)

    @classmethod
    def from_line(cls, line: bytes) -> Request | None:
        """The request ``line`` holds; None for anything but a JSON object (garbage, nesting
        too deep)."""
        data = json_object(line)
        if data is None:
            return None
        op, token, port = data.get("op"), data.get("token"), data.get("port")
        return cls(
            op=op if isinstance(op, str) else "",
            node=_name(data.get("node")),
            token=token if isinstance(token, str) else None,
            advertised=_name(data.get("advertised")),
            error=_text(data["error"], NOTE_CHARS) if "error" in data else "",
            port=port if _is_int(port) and 0 < port < 65536 else None,
            seconds=_number(data.get("seconds")),
        )


def _name(value: object) -> str:
    """A name a peer gave (its node, its address): printable text of a host name's length."""
    if not isinstance(value, str):
        return "?"
    return _text(value, NAME_CHARS) or "?"


def _text(value: object, limit: int) -> str:
    return "".join(ch for ch in str(value)[:limit] if ch.isprintable())


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):  # one past float's exact range is longer than any budget
        return float(value) if abs(value) < 2**53 else math.inf
    return value if isinstance(value, float) else None


@dataclass(frozen=True)
class Answer:
    """One answer of the gate (gate.py writes them); each request's answer sets its own fields,
    the others keep their defaults."""

    ok: bool = False
    busy: bool = False  # every slot is taken: ask again soon
    refused: bool = False  # the request asked more than the run's budget allows
    go: bool = False  # a throughput probe may start streaming
    error: str = ""
    run_id: str = ""  # hello: the run this node joins
    seen: str = ""  # hello: the address the master sees this node at
    t: float | None = None  # hello: the master's clock
    probe_port: int = 0  # hello: the master's listener on an ephemeral port
    nonce: str = ""  # whoami: which gate answered
    address: str = ""  # dial: the address the master dialled back
    bytes: int | None = None  # tcp: what the sink received
    seconds: float | None = None  # tcp: in how long

    @classmethod
    def from_line(cls, line: bytes) -> Answer:
        """The answer ``line`` holds (an empty line: none, all defaults).

        Raises:
            ValueError: not JSON, not an object, or a field null or of the wrong type.
        """
        try:
            data = json.loads(line or b"{}")
        except RecursionError:
            raise ValueError("the answer nests too deep") from None
        if not isinstance(data, dict):
            raise ValueError("the answer is not a JSON object")
        try:
            return from_dict(cls, data, strict=True)
        except TypeError as exc:
            raise ValueError(f"not an answer of the gate: {exc}") from None


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


def request(
    master: str, port: int, message: dict, deadline: float, retry_busy: bool = False
) -> Answer:
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
        reply = Answer.from_line(line)
        if not reply.busy:
            return reply
        if not retry_busy or time.monotonic() + RETRY_S >= deadline:
            raise GateBusy(reply.error)
        time.sleep(RETRY_S)


def send(conn: socket.socket, message: dict) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def left(deadline: float) -> float:
    return max(0.1, deadline - time.monotonic())
