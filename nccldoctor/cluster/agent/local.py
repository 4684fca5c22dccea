"""The local handshake between the processes a launcher started on one node
(docs/design.md#per-process).

With ``srun --ntasks-per-node=N``, ``torchrun --nproc-per-node N`` or ``mpirun -N N`` each
process is one rank of the check. Local rank 0 (the leader) also runs the node agent's phases;
the others (followers) wait for it on a Unix socket in the abstract namespace, named after the
check's port (abstract names are per network namespace: one per node, as the port is). Each
message is a record here, one JSON object on a line (its ``kind`` and its fields), read back
with every field's type checked; a line that is no message is none:

- follower → leader, on connecting: :class:`Joining` (its pid is the socket's SO_PEERCRED, not
  a claim);
- leader → follower, after the node's pre-worker phases: :class:`HandOver` (the worker spec);
- follower → leader, when its worker ends: :class:`Done`;
- leader → follower, once the node's report (the cluster's, on the master) is written:
  :class:`Verdict`.

A connection that closes is a process that ended: the leader then knows a follower is gone
without waiting for a deadline, and a follower knows the same of the leader. Every wait here has
a deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nccldoctor.facts.serde import from_dict
from nccldoctor.jsondoc import json_object

# SO_PEERCRED's struct ucred: pid, uid, gid
_UCRED = struct.Struct("3i")
# What a follower whose connection closed without a "done" exited with: unknown, it is not the
# leader's child. rank_row reads the sentence the leader writes into its log instead.
VANISHED = -1
MAX_LINE = 1 << 20  # a message is a few hundred bytes; a peer sending more is not ours


@dataclass(frozen=True)
class Joining:
    """Who a follower is, as the launcher started it."""

    rank: int
    local_rank: int


@dataclass(frozen=True)
class HandOver:
    """The worker spec to run (launcher.WorkerSpec.to_dict: the follower reads it with
    WorkerSpec.from_dict under its own timeouts)."""

    spec: dict[str, Any]


@dataclass(frozen=True)
class Done:
    """A follower's worker ended with ``exit_code``."""

    exit_code: int


@dataclass(frozen=True)
class Verdict:
    """The node's verdict (the check's exit code) and the report to show."""

    exit_code: int
    report: str


Message = Joining | HandOver | Done | Verdict
KINDS: Mapping[str, type[Message]] = {
    "joining": Joining, "hand-over": HandOver, "done": Done, "verdict": Verdict}  # fmt: skip
_KIND_OF = {cls: kind for kind, cls in KINDS.items()}


def encode(message: Message) -> bytes:
    return json.dumps({"kind": _KIND_OF[type(message)], **asdict(message)}).encode() + b"\n"


def decode(line: bytes) -> Message | None:
    """The message ``line`` holds, or None when it holds none (not JSON, an unknown kind, a
    field missing, null or of the wrong type)."""
    data = json_object(line)
    if data is None or not isinstance(data.get("kind"), str):
        return None
    kind = KINDS.get(data.pop("kind"))
    if kind is None:
        return None
    try:
        return from_dict(kind, data, strict=True)
    except TypeError:
        return None


class LocalError(Exception):
    """The handshake cannot go on; the message says what happened to whom."""


def address(port: int) -> str:
    """The abstract socket name of the check on ``port``."""
    return f"\0nccldoctor/check/{port}"


class _Lines:
    """Messages, a line each, from one stream socket, read without blocking past a deadline."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self._buffer, self.closed = sock, b"", False

    def send(self, message: Message) -> bool:
        try:
            self.sock.sendall(encode(message))
        except OSError:
            return False
        return True

    def read(self, timeout: float) -> Message | None:
        """The next message within ``timeout`` seconds; None when none came, or the line was
        none (``closed`` is set once the other side is gone)."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer and not self.closed:
            left = max(0.0, deadline - time.monotonic())  # 0: a poll still looks once
            if not select.select([self.sock], [], [], left)[0]:
                return None
            try:
                data = self.sock.recv(65536)
            except OSError:
                data = b""
            self.closed = not data
            self._buffer += data
            if len(self._buffer) > MAX_LINE:
                self.closed, self._buffer = True, b""
        line, sep, self._buffer = self._buffer.partition(b"\n")
        return decode(line) if sep else None


# -- the leader's side ---------------------------------------------------------------------------
@dataclass
class Follower:
    """A follower that said hello: who it is and its connection."""

    rank: int
    local_rank: int
    pid: int
    lines: _Lines


class Leader:
    """Local rank 0's listener: opened first thing, so the followers find it while the agent's
    phases run; it accepts their hellos in a thread of its own."""

    def __init__(self, port: int, local_world: int, world_size: int) -> None:
        self.local_world, self.world_size = local_world, world_size
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.bind(address(port))
        except OSError as exc:
            self._sock.close()
            raise LocalError(
                f"another nccldoctor check on port {port} holds this node's local socket ({exc})"
            ) from None
        self._sock.listen(local_world)
        self._lock = threading.Lock()
        self._joined = threading.Condition(self._lock)
        self.followers: dict[int, Follower] = {}  # by local rank
        self.refused: list[str] = []
        self._closing = False
        threading.Thread(target=self._accept, name="nccldoctor-local", daemon=True).start()

    def _accept(self) -> None:
        while not self._closing:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            try:
                self._hello(conn)
            except Exception as exc:  # a bad hello must not end the accept loop
                conn.close()
                with self._lock:
                    self.refused.append(f"{type(exc).__name__}: {exc}")

    def _hello(self, conn: socket.socket) -> None:
        pid, uid, _ = _UCRED.unpack(
            conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
        )
        lines = _Lines(conn)
        hello = lines.read(5.0)
        rank, local_rank = (
            (hello.rank, hello.local_rank) if isinstance(hello, Joining) else (None, None)
        )
        why = None
        if uid != os.geteuid():
            why = f"pid {pid} runs as uid {uid}, not as this check's"
        elif not isinstance(local_rank, int) or not 0 < local_rank < self.local_world:
            why = f"pid {pid}: local rank {local_rank!r} outside 1..{self.local_world - 1}"
        elif not isinstance(rank, int) or not 0 <= rank < self.world_size:
            why = f"pid {pid}: rank {rank!r} outside 0..{self.world_size - 1}"
        with self._lock:
            if why is None and local_rank in self.followers:
                why = f"pid {pid}: local rank {local_rank} joined twice"
            if why is not None:
                self.refused.append(why)
                conn.close()
                return
            self.followers[local_rank] = Follower(rank, local_rank, pid, lines)
            self._joined.notify_all()

    def wait_joined(self, deadline: float) -> list[Follower]:
        """Every follower that joined by ``deadline`` (the expected ones as soon as all came)."""
        with self._lock:
            while len(self.followers) < self.local_world - 1:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._joined.wait(left)
            return sorted(self.followers.values(), key=lambda f: f.local_rank)

    def missing(self) -> list[int]:
        with self._lock:
            return [n for n in range(1, self.local_world) if n not in self.followers]

    def announce(self, verdict: int, report: Path) -> None:
        """The node's verdict and report to every follower still connected (best effort)."""
        with self._lock:
            followers = list(self.followers.values())
        for follower in followers:
            follower.lines.send(Verdict(verdict, str(report)))

    def close(self) -> None:
        self._closing = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        with self._lock:
            for follower in self.followers.values():
                follower.lines.sock.close()


class FollowerProcess:
    """A follower as the watchdog sees a worker (``pid``, ``returncode``, ``poll``, ``wait``):
    it is done when it says so (``done``) or when its connection closes."""

    def __init__(self, follower: Follower, log_path: Path) -> None:
        self.follower, self.pid, self.log_path = follower, follower.pid, log_path
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self._read(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._read(timeout if timeout is not None else 1e9)
        if code is None:
            raise subprocess.TimeoutExpired(f"local rank pid {self.pid}", timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        """To the process only: a follower is the launcher's, its group too."""
        if self.returncode is None:
            with contextlib.suppress(OSError):
                os.kill(self.pid, sig)

    def _read(self, timeout: float) -> int | None:
        lines = self.follower.lines
        deadline = time.monotonic() + timeout
        while self.returncode is None:
            message = lines.read(max(0.0, deadline - time.monotonic()))
            if isinstance(message, Done):
                self.returncode = message.exit_code
            elif lines.closed:
                self.returncode = VANISHED
                with contextlib.suppress(OSError), open(self.log_path, "a") as log:
                    log.write(
                        f"local rank {self.follower.local_rank} (pid {self.pid}) ended without "
                        "saying how: its connection to local rank 0 closed\n"
                    )
            elif message is None:
                break
        return self.returncode


def stop_followers(procs: list[FollowerProcess], term_wait_s: float) -> None:
    """SIGTERM each live follower (its phase watch writes its result and says "done"), then
    SIGKILL what has not answered after ``term_wait_s``."""
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + term_wait_s
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(0.0, deadline - time.monotonic()))
    for proc in procs:
        proc.send_signal(signal.SIGKILL)


# -- a follower's side ---------------------------------------------------------------------------
@dataclass
class Handover:
    """What a follower heard from its leader: the spec to run (or None), the verdict and report
    path once known, and what went wrong when the leader could not be heard."""

    spec: Mapping[str, Any] | None = None
    verdict: int | None = None
    report: str | None = None
    lost: str | None = None


class Link:
    """A follower's connection to its node's local rank 0."""

    def __init__(self, lines: _Lines) -> None:
        self.lines = lines

    @classmethod
    def connect(cls, port: int, rank: int, local_rank: int, deadline: float) -> Link:
        """Connect (retrying: the leader opens its socket as it starts) and say hello.

        Raises:
            LocalError: nobody listened by ``deadline``.
        """
        error: OSError | None = None
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(address(port))
                break
            except OSError as exc:
                sock.close()
                error = exc
            if time.monotonic() >= deadline:
                raise LocalError(f"local rank 0 never opened this node's local socket ({error})")
            time.sleep(0.1)
        lines = _Lines(sock)
        lines.send(Joining(rank, local_rank))
        return cls(lines)

    def wait(self, deadline: float, stopped: Callable[[], str | None]) -> Handover:
        """The leader's next word (a spec or the verdict) by ``deadline``; ``stopped()``, asked
        between reads, names a stop signal that ends the wait."""
        heard = Handover()
        while True:
            message = self.lines.read(min(0.5, max(0.0, deadline - time.monotonic())))
            if isinstance(message, HandOver):
                heard.spec = message.spec
                return heard
            if isinstance(message, Verdict):
                heard.verdict, heard.report = message.exit_code, message.report
                return heard
            if message is not None:
                continue
            if self.lines.closed:
                heard.lost = "local rank 0 of this node ended (its connection closed)"
                return heard
            why = stopped()
            if why:
                heard.lost = f"stopped by {why} while waiting for local rank 0"
                return heard
            if time.monotonic() >= deadline:
                heard.lost = "local rank 0 of this node did not answer by its deadline"
                return heard

    def done(self, code: int) -> None:
        self.lines.send(Done(code))

    def close(self) -> None:
        self.lines.sock.close()
