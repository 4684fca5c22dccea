"""The gate: nccldoctor's own small listener on the master, next to the store (``port + 1``).

It answers four questions the TCPStore cannot: is the node holding the shared token (a node
that is not gets no run id and is named in the report), which address does the master *see*
for the node (``getpeername``; different from the address the node advertises → NAT, the Docker
bridge case, failures.md F01), how fast is the raw TCP wire (see ``tcpprobe``), and do
connections to ephemeral ports get through in both directions (gloo and NCCL listen on ports
from ``ip_local_port_range``, not on ``--port``: a firewall that passes only the rendezvous
ports lets everything up to ``init_process_group`` work and then hangs it, failures.md F02).
Every node says hello here before it joins the store, so the master can name a node whose store
port is blocked. One JSON line each way.

Anyone who reaches the port can talk to it, so everything it does is bounded
(docs/design.md#gate): a request is one line of at most ``MAX_LINE`` bytes that must arrive
within ``MESSAGE_S``, its token is compared before anything else is read from it, at most
``MAX_CLIENTS`` connections are served at once (``PER_PEER`` from one address; the next one is
told "busy" and closed at once, and the clients here retry), a probe may last no longer than
the run's budget for it, the knocks beyond the expected nodes are counted rather than kept
(:class:`~nccldoctor.facts.world.HelloFlood`), and ``close`` kills the probe it runs.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import secrets
import select
import socket
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass

from nccldoctor.cluster.agent import tcpprobe
from nccldoctor.cluster.agent.reach import connect_once
from nccldoctor.cluster.agent.wire import (
    IO_TIMEOUT,
    MAX_LINE,
    Request,
    read_line,
    send,
)
from nccldoctor.cluster.config import CheckConfig
from nccldoctor.cluster.records import Hello
from nccldoctor.cluster.timeouts import MIN_TCP_TURN, Timeouts
from nccldoctor.facts.world import HelloFlood

MESSAGE_S = 5.0  # for the whole request line: a client sending a byte a second holds nothing
MAX_CLIENTS = 128  # connections served at once (a thread each)
PER_PEER = 16  # of them from one address: one host cannot take every slot
REFUSED_KEPT = 16  # refused knocks kept one by one (a finding each); the rest are counted
KNOCK_SLACK = 4  # knocks kept beyond the expected nodes: a second master, a retried hello
KNOCKS_UNKNOWN = 4096  # knocks kept when the node count is not known
FLOOD_PEERS = 8  # addresses of the excess knocks named
FLOOD_ADDRESSES = 1024  # addresses counted one by one; knocks from more are counted together
ACCEPT_PAUSE_S = 0.05  # after a failed accept (out of file descriptors): not a busy loop
REFUSED = "wrong or missing token"
BUSY = {"ok": False, "busy": True, "error": "busy: too many connections, retry"}


@dataclass(frozen=True)
class GateLimits:
    """What the gate grants its peers: how many knocks it keeps one by one, and the longest
    probes the run's budgets ask of it (the clients here ask no more: phases/tcp.py, ports.py)."""

    expected: int | None = None  # nodes, when known
    tcp_s: float = Timeouts().tcp_probe
    dial_s: float = Timeouts().port_probe
    turns_s: float = Timeouts().tcp_total + 6 * 64  # the longest wait for a throughput turn

    @classmethod
    def of(cls, config: CheckConfig) -> GateLimits:
        t, nodes = config.timeouts, config.nodes
        # the nodes' own deadline for their turns (phases/tcp.py): the turns, 6 s of setup each
        turns = t.tcp_total + 6 * (nodes or 64)
        return cls(nodes, max(MIN_TCP_TURN, t.tcp_probe), t.port_probe, turns)

    @property
    def knocks(self) -> int:
        return KNOCKS_UNKNOWN if self.expected is None else self.expected + KNOCK_SLACK


class Gate:
    """The master's listener; ``hellos`` and ``tcp_gbps`` fill in as nodes talk to it."""

    def __init__(
        self,
        port: int,
        token: str | None,
        run_id: str,
        bind: str = "0.0.0.0",
        limits: GateLimits | None = None,
        token_from: str = "",
    ) -> None:
        self._token = token.encode() if token else None
        # the reason in the report, for an operator whose node was started outside the job; the
        # refused peer is told no more than REFUSED (not that the token comes from a job id)
        self._refused = (
            f"{REFUSED} (the master's: {token_origin(token_from)})" if token_from else REFUSED
        )
        self._run_id = run_id
        self._limits = limits or GateLimits()
        self.nonce = secrets.token_hex(8)  # answers "whoami": is this listener the asker's own?
        self._lock = threading.Lock()
        self._tcp_turn = threading.Lock()  # one throughput stream at a time: they share the wire
        self._sink: subprocess.Popen | None = None  # the throughput probe running, to stop
        self._serving: Counter[str] = Counter()  # connections being served, by peer address
        self.hellos: list[Hello] = []
        self._excess: Counter[str] = Counter()  # knocks past the kept ones, by peer address
        self._excess_refused = 0
        self._excess_elsewhere = 0  # from addresses past FLOOD_ADDRESSES
        self.tcp_gbps: dict[str, float] = {}
        self._sock = socket.create_server((bind, port), reuse_port=False)
        # Port 0: the kernel picks from ip_local_port_range, as for gloo's and NCCL's listeners.
        self._probe = socket.create_server((bind, 0), backlog=socket.SOMAXCONN)
        for sock in (self._sock, self._probe):
            sock.setblocking(False)  # select says when; a vanished client never blocks accept
        self._closed = threading.Event()
        self._wake_read, self._wake_write = os.pipe()  # close() wakes the select at once
        self._thread = threading.Thread(target=self._serve, name="nccldoctor-gate", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop listening and stop the probe under way (its process would outlive ours)."""
        if self._closed.is_set():
            return
        self._closed.set()
        os.write(self._wake_write, b"x")
        self._thread.join(timeout=2)
        for fd in (self._wake_read, self._wake_write):
            os.close(fd)
        self._sock.close()
        self._probe.close()
        with self._lock:
            if self._sink is not None:
                self._sink.kill()

    @property
    def probe_port(self) -> int:
        return self._probe.getsockname()[1]

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                ready = select.select([self._sock, self._probe, self._wake_read], [], [])[0]
            except (OSError, ValueError):
                if self._closed.is_set():
                    return
                time.sleep(ACCEPT_PAUSE_S)
                continue
            for sock in ready:
                if sock is self._wake_read:
                    return
                try:
                    conn, peer = sock.accept()
                except OSError:  # out of file descriptors, or the client gave up: next round
                    time.sleep(ACCEPT_PAUSE_S)
                    continue
                if sock is self._probe:  # connecting was the test: nothing to say
                    conn.close()
                    continue
                self._admit(conn, peer[0])

    def _admit(self, conn: socket.socket, peer: str) -> None:
        """Serve ``conn`` in a thread of its own, or tell it "busy" when the slots are taken."""
        with self._lock:
            busy = sum(self._serving.values()) >= MAX_CLIENTS or self._serving[peer] >= PER_PEER
            if not busy:
                self._serving[peer] += 1
        if not busy:
            try:
                threading.Thread(target=self._handle, args=(conn, peer), daemon=True).start()
                return
            except RuntimeError:  # the process may start no more threads
                self._release(peer)
        _turn_away(conn)

    def _release(self, peer: str) -> None:
        with self._lock:
            self._serving[peer] -= 1
            if self._serving[peer] <= 0:
                del self._serving[peer]

    def _handle(self, conn: socket.socket, peer: str) -> None:
        try:
            with conn:
                self._answer(conn, peer)
        except Exception:  # a bad or vanished client never takes the listener down
            return
        finally:
            self._release(peer)

    def _answer(self, conn: socket.socket, peer: str) -> None:
        request = Request.from_line(read_line(conn, time.monotonic() + MESSAGE_S))
        if request is None:
            return
        node = request.node
        if not self._token_ok(request.token):
            self._record(Hello(node, "", peer, False, self._refused, time.time()))
            send(conn, {"ok": False, "error": f"refused: {REFUSED}"})
            return
        op = request.op
        if op == "hello":
            self._record(Hello(node, request.advertised, peer, True, "", time.time()))
            reply = {"ok": True, "run_id": self._run_id, "seen": peer, "t": time.time()}
            send(conn, {**reply, "probe_port": self.probe_port})
        elif op == "whoami":
            send(conn, {"ok": True, "nonce": self.nonce})
        elif op == "note":
            self._note(node, peer, request.error)
        elif op == "dial":
            seconds = _within(request.seconds, self._limits.dial_s)
            if seconds is None or request.port is None:
                send(conn, _beyond("a dial", self._limits.dial_s))
                return
            ok, error = dial(peer, request.port, seconds)
            send(conn, {"ok": ok, "error": error, "address": peer})
        elif op == "tcp":
            seconds = _within(request.seconds, self._limits.tcp_s)
            if seconds is None:
                send(conn, _beyond("a throughput probe", self._limits.tcp_s))
                return
            self._tcp(conn, node, seconds)

    def _tcp(self, conn: socket.socket, node: str, seconds: float) -> None:
        if not self._tcp_turn.acquire(timeout=self._limits.turns_s):
            return  # the node's own deadline for its turn has passed too
        try:
            if self._closed.is_set():
                return
            received, elapsed = tcpprobe.run_isolated(
                "sink", conn, seconds + IO_TIMEOUT, started=lambda child: self._go(conn, child)
            )
            with self._lock:
                if node in self.tcp_gbps or len(self.tcp_gbps) < self._limits.knocks:
                    self.tcp_gbps[node] = tcpprobe.gbps(received, elapsed)
            send(conn, {"bytes": received, "seconds": elapsed})
        finally:
            with self._lock:
                self._sink = None
            self._tcp_turn.release()

    def _go(self, conn: socket.socket, sink: subprocess.Popen) -> None:
        """The sink runs: kept for ``close`` to stop, then the node may start streaming."""
        with self._lock:
            self._sink = sink
            if self._closed.is_set():  # close() ran before it was kept: stop it here
                sink.kill()
                return
        send(conn, {"go": True})

    @property
    def port(self) -> int:
        return self._sock.getsockname()[1]

    def _token_ok(self, offered: str | None) -> bool:
        if not self._token:
            return True
        # compared as bytes: compare_digest refuses str that is not ASCII
        return offered is not None and hmac.compare_digest(offered.encode(), self._token)

    def _record(self, hello: Hello) -> None:
        """Keep ``hello``, or count it: the accepted ones up to the expected nodes (and a few),
        the refused ones up to REFUSED_KEPT, each on its own, so strangers never crowd out a
        node."""
        with self._lock:
            kept = sum(h.accepted == hello.accepted for h in self.hellos)
            if kept < (self._limits.knocks if hello.accepted else REFUSED_KEPT):
                self.hellos.append(hello)
                return
            if hello.seen in self._excess or len(self._excess) < FLOOD_ADDRESSES:
                self._excess[hello.seen] += 1
            else:
                self._excess_elsewhere += 1
            self._excess_refused += not hello.accepted

    def _note(self, node: str, peer: str, error: str) -> None:
        """A node that said hello reports why it cannot go on (e.g. the store port is blocked)."""
        with self._lock:
            for hello in self.hellos:
                if (hello.node, hello.seen) == (node, peer):
                    hello.reason = error

    def snapshot(self) -> list[Hello]:
        with self._lock:
            return list(self.hellos)

    def flood(self) -> HelloFlood | None:
        """The knocks past those kept (beyond the expected nodes), or None when there were none."""
        with self._lock:
            if not self._excess:
                return None
            peers = tuple(peer for peer, _ in self._excess.most_common(FLOOD_PEERS))
            count = sum(self._excess.values()) + self._excess_elsewhere
            return HelloFlood(count, self._excess_refused, peers, len(self._excess),
                              self._limits.expected)  # fmt: skip


def open_gate(config: CheckConfig, run_id: str) -> Gate:
    """The master's gate for this run: its token, its node count and its probes' budgets."""
    return Gate(config.gate_port, config.token, run_id, limits=GateLimits.of(config),
                token_from=config.token_from)  # fmt: skip


def token_origin(token_from: str) -> str:
    """Where a node's token came from, in words (launchers.shared_token)."""
    if not token_from:
        return "none: no --token and no job identity"
    return token_from if token_from == "--token" else f"derived from {token_from}"


def _within(seconds: float | None, limit: float) -> float | None:
    """A probe's duration when it is within (0, ``limit``] (NaN is not), else None."""
    return seconds if seconds is not None and 0 < seconds <= limit else None


def _beyond(what: str, limit: float) -> dict:
    return {"ok": False, "refused": True,
            "error": f"refused: {what} lasts at most {limit:g} s in this run"}  # fmt: skip


def _turn_away(conn: socket.socket) -> None:
    """Say "busy" without waiting on the client, then close. What it sent is read first, when
    it is there: closing over unread bytes resets the connection before the answer is read."""
    with conn:
        conn.setblocking(False)
        with contextlib.suppress(OSError):
            conn.recv(MAX_LINE)
        with contextlib.suppress(OSError):
            conn.send(json.dumps(BUSY).encode() + b"\n")


def dial(address: str, port: int, seconds: float) -> tuple[bool, str]:
    """One TCP connect with a deadline: (connected, the error)."""
    exc = connect_once(address, port, seconds)
    if exc is None:
        return True, ""
    return False, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
