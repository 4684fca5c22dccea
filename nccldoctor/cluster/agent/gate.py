"""The gate: nccldoctor's own small listener on the master, next to the store (``port + 1``).

It answers four questions the TCPStore cannot: is the node holding the shared token (a node
that is not gets no run id and is named in the report), which address does the master *see*
for the node (``getpeername``; different from the address the node advertises → NAT, the Docker
bridge case, failures.md F01), how fast is the raw TCP wire (see ``tcpprobe``), and do
connections to ephemeral ports get through in both directions (gloo and NCCL listen on ports
from ``ip_local_port_range``, not on ``--port``: a firewall that passes only the rendezvous
ports lets everything up to ``init_process_group`` work and then hangs it, failures.md F02).
Every node says hello here before it joins the store, so the master can name a node whose store
port is blocked. One JSON line each way; every socket has a timeout.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import select
import socket
import threading
import time
from dataclasses import dataclass

from nccldoctor.cluster.agent import tcpprobe
from nccldoctor.cluster.agent.reach import connect_once
from nccldoctor.facts.run import HelloReply, PortProbe

_IO_TIMEOUT = 5.0
# A node whose preflight ended first knocks before the master's gate is up (it opens when the
# master's preflight ends): a refused connect costs a round trip, a long pause every node's start.
HELLO_RETRY_S = 0.1


@dataclass
class Hello:
    """One node's hello as the master saw it."""

    node: str
    advertised: str
    seen: str  # getpeername() of the accepted connection
    accepted: bool
    reason: str = ""  # why it was refused
    t: float = 0.0


class Gate:
    """The master's listener; ``hellos`` and ``tcp_gbps`` fill in as nodes talk to it."""

    def __init__(self, port: int, token: str | None, run_id: str, bind: str = "0.0.0.0") -> None:
        self._token = token
        self._run_id = run_id
        self.nonce = secrets.token_hex(8)  # answers "whoami": is this listener the asker's own?
        self._lock = threading.Lock()
        self._tcp_turn = threading.Lock()  # one throughput stream at a time: they share the wire
        self.hellos: list[Hello] = []
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
        self._closed.set()
        os.write(self._wake_write, b"x")
        self._thread.join(timeout=2)
        for fd in (self._wake_read, self._wake_write):
            os.close(fd)
        self._sock.close()
        self._probe.close()

    @property
    def probe_port(self) -> int:
        return self._probe.getsockname()[1]

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                ready = select.select([self._sock, self._probe, self._wake_read], [], [])[0]
                for sock in ready:
                    if sock is self._wake_read:
                        return
                    conn, peer = sock.accept()
                    if sock is self._probe:  # connecting was the test: nothing to say
                        conn.close()
                        continue
                    threading.Thread(target=self._handle, args=(conn, peer[0]), daemon=True).start()
            except (OSError, ValueError):
                if self._closed.is_set():
                    return

    def _handle(self, conn: socket.socket, peer: str) -> None:
        with conn:
            try:
                conn.settimeout(_IO_TIMEOUT)
                request = json.loads(conn.makefile("rb").readline() or b"{}")
                if not isinstance(request, dict):
                    return
                if not self._token_ok(request.get("token")):
                    self._record(
                        Hello(
                            str(request.get("node", "?")),
                            "",
                            peer,
                            False,
                            "wrong or missing token",
                            time.time(),
                        )
                    )
                    _send(conn, {"ok": False, "error": "refused: wrong or missing token"})
                    return
                if request.get("op") == "hello":
                    self._record(
                        Hello(
                            str(request.get("node", "?")),
                            str(request.get("advertised", "")),
                            peer,
                            True,
                            "",
                            time.time(),
                        )
                    )
                    reply = {"ok": True, "run_id": self._run_id, "seen": peer, "t": time.time()}
                    _send(conn, {**reply, "probe_port": self.probe_port})
                elif request.get("op") == "whoami":
                    _send(conn, {"ok": True, "nonce": self.nonce})
                elif request.get("op") == "note":
                    self._note(str(request.get("node", "?")), peer, str(request.get("error", "")))
                elif request.get("op") == "dial":
                    ok, error = dial(peer, int(request["port"]), float(request["seconds"]))
                    _send(conn, {"ok": ok, "error": error, "address": peer})
                elif request.get("op") == "tcp":
                    self._tcp(conn, str(request.get("node", peer)), float(request["seconds"]))
            except (OSError, ValueError, KeyError, TypeError):
                return  # a bad or vanished client never takes the listener down

    def _tcp(self, conn: socket.socket, node: str, seconds: float) -> None:
        with self._tcp_turn:
            received, elapsed = tcpprobe.run_isolated(
                "sink", conn, seconds + _IO_TIMEOUT, started=lambda: _send(conn, {"go": True})
            )
            with self._lock:
                self.tcp_gbps[node] = tcpprobe.gbps(received, elapsed)
            _send(conn, {"bytes": received, "seconds": elapsed})

    @property
    def port(self) -> int:
        return self._sock.getsockname()[1]

    def _token_ok(self, offered: object) -> bool:
        if not self._token:
            return True
        return isinstance(offered, str) and hmac.compare_digest(offered, self._token)

    def _record(self, hello: Hello) -> None:
        with self._lock:
            self.hellos.append(hello)

    def _note(self, node: str, peer: str, error: str) -> None:
        """A node that said hello reports why it cannot go on (e.g. the store port is blocked)."""
        with self._lock:
            for hello in self.hellos:
                if (hello.node, hello.seen) == (node, peer):
                    hello.reason = error

    def snapshot(self) -> list[Hello]:
        with self._lock:
            return list(self.hellos)


def say_hello(
    master: str, port: int, node: str, advertised: str, token: str | None, deadline: float
) -> HelloReply:
    """Hello to the master's gate, retrying connection errors until ``deadline`` (monotonic)."""
    last = "no attempt"
    while True:
        try:
            t0 = time.time()
            reply = _request(
                master,
                port,
                {"op": "hello", "node": node, "advertised": advertised, "token": token or ""},
                deadline,
            )
            t1 = time.time()
            if not reply.get("ok"):
                return HelloReply(False, error=str(reply.get("error")), refused=True)
            return HelloReply(
                True,
                run_id=str(reply["run_id"]),
                seen=str(reply.get("seen", "")),
                skew_s=float(reply["t"]) - (t0 + t1) / 2,
                rtt_s=t1 - t0,
                probe_port=int(reply.get("probe_port") or 0),
            )
        except (OSError, ValueError, KeyError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() + HELLO_RETRY_S >= deadline:
            return HelloReply(False, error=last)
        time.sleep(HELLO_RETRY_S)


def whose_gate(
    master: str, port: int, node: str, token: str | None, deadline: float
) -> tuple[str | None, str]:
    """The nonce of the listener answering at ``master``:``port`` ("" when it refused our token:
    not ours, then), or None and the last error once ``deadline`` (monotonic) passed."""
    last = "no attempt"
    while True:
        try:
            message = {"op": "whoami", "node": node, "token": token or ""}
            reply = _request(master, port, message, deadline)
            return (str(reply["nonce"]), "") if reply.get("ok") else ("", str(reply.get("error")))
        except (OSError, ValueError, KeyError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() + 0.5 >= deadline:
            return None, last
        time.sleep(0.5)


def send_note(master: str, port: int, node: str, token: str | None, error: str) -> None:
    """Best effort, a few seconds at most: tell the master why this node stops."""
    message = {"op": "note", "node": node, "token": token or "", "error": error}
    try:
        with socket.create_connection((master, port), timeout=3) as conn:
            _send(conn, message)
    except OSError:
        return


def dial(address: str, port: int, seconds: float) -> tuple[bool, str]:
    """One TCP connect with a deadline: (connected, the error)."""
    exc = connect_once(address, port, seconds)
    if exc is None:
        return True, ""
    return False, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def probe_ports(
    master: str, gate_port: int, probe_port: int, node: str, token: str | None, seconds: float
) -> PortProbe:
    """Dial the master's ephemeral listener, then have the master dial one of ours (each
    ``seconds`` at most): what gloo's and NCCL's connections will meet after the rendezvous."""
    ok, error = dial(master, probe_port, seconds)
    with socket.create_server(("0.0.0.0", 0)) as listener:  # the kernel's pick, as gloo's
        port = listener.getsockname()[1]
        message = {"op": "dial", "node": node, "token": token or "", "port": port,
                   "seconds": seconds}  # fmt: skip
        try:
            back = _request(master, gate_port, message, time.monotonic() + seconds + _IO_TIMEOUT)
            back_ok, back_error = bool(back.get("ok")), str(back.get("error") or "")
            seen = str(back.get("address") or "?")
        except (OSError, ValueError) as exc:
            back_ok, back_error, seen = None, f"{type(exc).__name__}: {exc}", "?"
    return PortProbe(f"{master}:{probe_port}", ok, error, f"{seen}:{port}", back_ok, back_error,
                     seconds)  # fmt: skip


def measure_tcp(
    master: str, port: int, node: str, token: str | None, seconds: float, deadline: float
) -> tuple[float | None, str]:
    """Stream to the master for ``seconds`` once it is our turn; (Gbit/s, error)."""
    try:
        with socket.create_connection((master, port), timeout=_left(deadline)) as conn:
            _send(conn, {"op": "tcp", "node": node, "token": token or "", "seconds": seconds})
            reader = conn.makefile("rb")
            conn.settimeout(_left(deadline))
            if not json.loads(reader.readline() or b"{}").get("go"):
                return None, "the master did not start the throughput probe"
            conn.settimeout(_IO_TIMEOUT)
            tcpprobe.run_isolated("source", conn, seconds)
            conn.shutdown(socket.SHUT_WR)
            result = json.loads(reader.readline() or b"{}")
            return tcpprobe.gbps(int(result["bytes"]), float(result["seconds"])), ""
    except (OSError, ValueError, KeyError) as exc:
        return None, f"{type(exc).__name__}: {exc}"


def _request(master: str, port: int, message: dict, deadline: float) -> dict:
    with socket.create_connection((master, port), timeout=min(_IO_TIMEOUT, _left(deadline))) as c:
        c.settimeout(_IO_TIMEOUT)
        _send(c, message)
        return json.loads(c.makefile("rb").readline() or b"{}")


def _send(conn: socket.socket, message: dict) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def _left(deadline: float) -> float:
    return max(0.1, deadline - time.monotonic())
