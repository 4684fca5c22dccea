"""A node's requests to the master's gate (gate.py): its hello, whose gate answers, a note of
why it stops, the port probe both ways and its turn at the throughput probe. A busy gate
(gate.MAX_CLIENTS) is asked again until the request's deadline."""

from __future__ import annotations

import socket
import time

from nccldoctor.cluster.agent import tcpprobe
from nccldoctor.cluster.agent.gate import dial
from nccldoctor.cluster.agent.wire import (
    IO_TIMEOUT,
    RETRY_S,
    Answer,
    left,
    read_line,
    request,
    send,
)
from nccldoctor.facts.run import HelloReply, PortProbe


def say_hello(
    master: str, port: int, node: str, advertised: str, token: str | None, deadline: float
) -> HelloReply:
    """Hello to the master's gate, retrying connection errors until ``deadline`` (monotonic)."""
    last = "no attempt"
    while True:
        try:
            t0 = time.time()
            reply = request(
                master,
                port,
                {"op": "hello", "node": node, "advertised": advertised, "token": token or ""},
                deadline,
            )
            t1 = time.time()
            if not reply.ok:
                return HelloReply(False, advertised, error=reply.error, refused=True)
            if not reply.run_id or reply.t is None:
                raise ValueError("the gate's hello answer holds no run id or no clock")
            return HelloReply(
                True,
                advertised,
                run_id=reply.run_id,
                seen=reply.seen,
                skew_s=reply.t - (t0 + t1) / 2,
                rtt_s=t1 - t0,
                probe_port=reply.probe_port,
            )
        except (OSError, ValueError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() + RETRY_S >= deadline:
            return HelloReply(False, advertised, error=last)
        time.sleep(RETRY_S)


def whose_gate(
    master: str, port: int, node: str, token: str | None, deadline: float
) -> tuple[str | None, str]:
    """The nonce of the listener answering at ``master``:``port`` ("" when it refused our token:
    not ours, then), or None and the last error once ``deadline`` (monotonic) passed."""
    last = "no attempt"
    while True:
        try:
            message = {"op": "whoami", "node": node, "token": token or ""}
            reply = request(master, port, message, deadline)
            return (reply.nonce, "") if reply.ok else ("", reply.error)
        except (OSError, ValueError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() + 0.5 >= deadline:
            return None, last
        time.sleep(0.5)


def send_note(master: str, port: int, node: str, token: str | None, error: str) -> None:
    """Best effort, a few seconds at most: tell the master why this node stops."""
    message = {"op": "note", "node": node, "token": token or "", "error": error}
    try:
        with socket.create_connection((master, port), timeout=3) as conn:
            send(conn, message)
    except OSError:
        return


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
        deadline = time.monotonic() + seconds + IO_TIMEOUT
        back_ok: bool | None
        try:
            back = request(master, gate_port, message, deadline, retry_busy=True)
            back_ok = None if back.refused else back.ok
            back_error, seen = back.error, back.address or "?"
        except (OSError, ValueError) as exc:
            back_ok, back_error, seen = None, f"{type(exc).__name__}: {exc}", "?"
    return PortProbe(f"{master}:{probe_port}", ok, error, f"{seen}:{port}", back_ok, back_error,
                     seconds)  # fmt: skip


def measure_tcp(
    master: str, port: int, node: str, token: str | None, seconds: float, deadline: float
) -> tuple[float | None, str]:
    """Stream to the master for ``seconds`` once it is our turn; (Gbit/s, error)."""
    message = {"op": "tcp", "node": node, "token": token or "", "seconds": seconds}
    try:
        while True:
            with socket.create_connection((master, port), timeout=left(deadline)) as conn:
                send(conn, message)
                answer = Answer.from_line(read_line(conn, deadline))
                if answer.busy and time.monotonic() + RETRY_S < deadline:
                    time.sleep(RETRY_S)
                    continue
                if not answer.go:
                    why = answer.error or "no answer"
                    return None, f"the master did not start the throughput probe: {why}"
                conn.settimeout(IO_TIMEOUT)
                tcpprobe.run_isolated("source", conn, seconds)
                conn.shutdown(socket.SHUT_WR)
                result = Answer.from_line(read_line(conn, time.monotonic() + IO_TIMEOUT))
                if result.bytes is None or result.seconds is None:
                    raise ValueError("the gate's answer holds no measure")
                return tcpprobe.gbps(result.bytes, result.seconds), ""
    except (OSError, ValueError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
