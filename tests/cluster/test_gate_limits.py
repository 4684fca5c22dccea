"""The gate's bounds, over loopback: whatever a peer sends, the gate answers the real nodes."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from nccldoctor.cluster.agent import gate, knock, wire
from nccldoctor.cluster.agent.gate import Gate, GateLimits
from tests.ports import free_port


@pytest.fixture
def server():
    made = Gate(free_port(), "secret", "run1", bind="127.0.0.1", limits=GateLimits(expected=2))
    try:
        yield made
    finally:
        made.close()


def hello(server: Gate, node: str = "b", token: str = "secret", within: float = 5.0):
    return knock.say_hello("127.0.0.1", server.port, node, "127.0.0.1", token,
                           time.monotonic() + within)  # fmt: skip


def ask(server: Gate, message: object, source: str = "127.0.0.1") -> dict:
    with socket.create_connection(("127.0.0.1", server.port), 5, (source, 0)) as conn:
        conn.sendall(json.dumps(message).encode() + b"\n")
        return json.loads(wire.read_line(conn, time.monotonic() + 5) or b"{}")


def closed_within(conn: socket.socket, seconds: float) -> bool:
    """Whether the gate closed ``conn`` (EOF or reset) before ``seconds`` passed."""
    conn.settimeout(seconds)
    try:
        while conn.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def test_a_line_past_the_cap_is_dropped_before_it_is_read_whole(server):
    with socket.create_connection(("127.0.0.1", server.port)) as conn:
        conn.settimeout(5)
        with pytest.raises(OSError):  # the gate stops reading and closes (a reset, a pipe)
            for _ in range(4096):  # 64 MiB: more than the socket buffers take on their own
                conn.sendall(b"x" * wire.MAX_LINE)
        assert closed_within(conn, 3)
    assert hello(server).ok


def test_a_slow_client_is_dropped_at_the_whole_message_deadline(server, monkeypatch):
    monkeypatch.setattr(gate, "MESSAGE_S", 1.0)
    with socket.create_connection(("127.0.0.1", server.port)) as conn:
        start = time.monotonic()
        with pytest.raises(OSError):  # the gate closed the connection meanwhile
            for byte in b'{"op": "hello", "token": "secret"}':
                conn.send(bytes([byte]))  # a byte every 0.2 s: each in time, the line is not
                time.sleep(0.2)
        assert closed_within(conn, 2)
        assert time.monotonic() - start < 3.5
    assert hello(server).ok


def test_excess_connections_are_told_busy_at_once_and_the_clients_retry(server, monkeypatch):
    monkeypatch.setattr(gate, "MAX_CLIENTS", 4)
    monkeypatch.setattr(gate, "PER_PEER", 2)
    monkeypatch.setattr(gate, "MESSAGE_S", 2.0)
    held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(2)]
    held += [socket.create_connection(("127.0.0.1", server.port), 5, ("127.0.0.2", 0))
             for _ in range(2)]  # fmt: skip
    try:
        time.sleep(0.2)
        start = time.monotonic()
        assert ask(server, {"op": "whoami", "token": "secret"}, "127.0.0.3")["busy"] is True
        assert time.monotonic() - start < 1
        # the held connections time out (MESSAGE_S): a hello asking meanwhile gets in then
        reply = hello(server, within=6)
        assert reply.ok, reply.error
    finally:
        for conn in held:
            conn.close()


def test_one_address_holds_only_its_share_of_the_slots(server, monkeypatch):
    monkeypatch.setattr(gate, "PER_PEER", 2)
    held = [socket.create_connection(("127.0.0.1", server.port), 5, ("127.0.0.2", 0))
            for _ in range(2)]  # fmt: skip
    try:
        time.sleep(0.2)
        assert ask(server, {"op": "whoami", "token": "secret"}, "127.0.0.2")["busy"] is True
        assert ask(server, {"op": "whoami", "token": "secret"})["nonce"] == server.nonce
    finally:
        for conn in held:
            conn.close()


def test_a_flood_of_connections_leaves_the_accept_loop_and_the_threads_bounded(server):
    before = threading.active_count()
    conns = []
    try:
        for _ in range(600):
            try:
                conns.append(socket.create_connection(("127.0.0.1", server.port), timeout=2))
            except OSError:
                break  # the backlog is full: the kernel, not the gate, refuses now
        time.sleep(0.5)
        assert threading.active_count() - before <= gate.PER_PEER + 1
    finally:
        for conn in conns:
            conn.close()
    assert hello(server).ok


@pytest.mark.parametrize(
    "seconds",
    [600, 1e9, -1, 0, "2", True, None, float("nan"), float("inf"), 10**400],
    ids=["600", "1e9", "negative", "zero", "text", "bool", "none", "nan", "inf", "huge-int"],
)
def test_probe_durations_outside_the_budget_are_refused(server, seconds):
    tcp = ask(server, {"op": "tcp", "node": "b", "token": "secret", "seconds": seconds})
    assert tcp["ok"] is False and tcp["refused"] is True and "at most 2 s" in tcp["error"]
    dial = ask(server, {"op": "dial", "token": "secret", "port": 1, "seconds": seconds})
    assert dial["refused"] is True and "at most 3 s" in dial["error"]
    assert hello(server).ok


def test_a_dial_to_no_port_is_refused_and_a_probe_in_budget_runs(server):
    for port in (0, 70000, "22", True):
        assert ask(server, {"op": "dial", "token": "secret", "port": port, "seconds": 1})["refused"]
    gbps, error = knock.measure_tcp("127.0.0.1", server.port, "b", "secret", 0.3,
                                    time.monotonic() + 10)  # fmt: skip
    assert error == "" and gbps > 0


def test_close_stops_the_throughput_sink_it_started(server):
    before = _sinks()
    with socket.create_connection(("127.0.0.1", server.port)) as conn:
        conn.sendall(b'{"op": "tcp", "node": "b", "token": "secret", "seconds": 2}\n')
        assert json.loads(wire.read_line(conn, time.monotonic() + 15)) == {"go": True}
        started = _sinks() - before
        assert started, "the sink runs"
        server.close()
        deadline = time.monotonic() + 3
        while started & _sinks() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not started & _sinks()


def _sinks() -> set[int]:
    """This process's children running the throughput probe's sink."""
    found = set()
    for proc in Path("/proc").iterdir():
        try:
            parent = (proc / "stat").read_text().rsplit(")", 1)[1].split()[1]
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError):  # not a process, or it ended meanwhile
            continue
        if int(parent) == os.getpid() and b"sink" in cmdline and b"-m" in cmdline:
            found.add(int(proc.name))
    return found


def test_the_token_is_checked_before_the_request_is_acted_on(server):
    refused = ask(server, {"op": "note", "node": "b", "token": "nope", "error": "x"})
    assert refused == {"ok": False, "error": "refused: wrong or missing token"}
    for token in ("sécret", 7, None, ["secret"]):
        assert ask(server, {"op": "whoami", "token": token})["ok"] is False
    assert ask(server, {"op": "dial", "port": 1, "seconds": 1})["ok"] is False
    assert all(not h.accepted for h in server.snapshot())


def test_garbage_and_deep_nesting_are_ignored(server):
    for line in (b"[" * 10000, b"\xff\xfe", b"[1, 2]", b'"text"', b"1" * 5000):
        with socket.create_connection(("127.0.0.1", server.port)) as conn:
            conn.sendall(line + b"\n")
            assert closed_within(conn, 3)
    assert server.snapshot() == [] and hello(server).ok


def test_names_from_a_peer_are_printable_and_short(server):
    hello(server, node="\x1b]0;owned\x07" + "n" * 1000)
    (seen,) = server.snapshot()
    assert seen.node == "]0;owned" + "n" * (wire.NAME_CHARS - 10)


def test_knocks_past_the_expected_nodes_are_counted_not_kept(server):
    for i in range(30):
        hello(server, node=f"stranger{i}", token="nope")
    for i in range(40):
        hello(server, node=f"fake{i}")
    kept = server.snapshot()
    accepted = [h.node for h in kept if h.accepted]
    assert accepted == [f"fake{i}" for i in range(2 + gate.KNOCK_SLACK)]  # refused: no room taken
    assert len(kept) == len(accepted) + gate.REFUSED_KEPT
    flood = server.flood()
    assert (flood.count, flood.refused, flood.expected) == (70 - len(kept), 30 - 16, 2)
    assert flood.peers == ("127.0.0.1",) and flood.addresses == 1


def test_knocks_from_ever_more_addresses_are_counted_in_bounded_memory(server, monkeypatch):
    monkeypatch.setattr(gate, "FLOOD_ADDRESSES", 2)
    for source in ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"):
        for _ in range(gate.REFUSED_KEPT):
            ask(server, {"op": "hello", "node": "x", "token": "nope"}, source)
    flood = server.flood()
    assert (flood.count, flood.addresses) == (3 * gate.REFUSED_KEPT, 2)


def test_refused_knocks_are_kept_only_a_few(monkeypatch):
    server = Gate(free_port(), "secret", "run1", bind="127.0.0.1")  # node count unknown
    try:
        for i in range(gate.REFUSED_KEPT + 5):
            hello(server, node=f"stranger{i}", token="nope")
        assert len(server.snapshot()) == gate.REFUSED_KEPT
        assert (server.flood().count, server.flood().refused) == (5, 5)
        assert hello(server).ok and len(server.snapshot()) == gate.REFUSED_KEPT + 1
    finally:
        server.close()


def test_read_line_leaves_what_follows_the_newline_in_the_socket():
    left, right = socket.socketpair()
    with left, right:
        right.sendall(b'{"go": true}\nrest')
        assert wire.read_line(left, time.monotonic() + 1) == b'{"go": true}'
        assert left.recv(10) == b"rest"
        right.sendall(b"x" * 100)
        with pytest.raises(ValueError, match="longer than 10 bytes"):
            wire.read_line(left, time.monotonic() + 1, limit=10)
        with pytest.raises(TimeoutError):
            wire.read_line(left, time.monotonic() + 0.2)


def test_a_thread_that_cannot_start_turns_the_client_away_and_the_loop_goes_on(server, monkeypatch):
    """1500 dials once exhausted the threads and the accept loop died of it."""
    real = threading.Thread.start
    failed = []

    def start(thread: threading.Thread) -> None:
        if thread.name != "nccldoctor-gate" and not failed:
            failed.append(thread)
            raise RuntimeError("can't start new thread")
        real(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    assert ask(server, {"op": "whoami", "token": "secret"})["busy"] is True
    assert failed and hello(server).ok


@pytest.fixture
def stranger():
    """Something else listening where the gate should be: it answers every line with its own."""
    listener = socket.create_server(("127.0.0.1", 0))
    answers: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                wire.read_line(conn, time.monotonic() + 5)
                conn.sendall(answers[0] + b"\n")

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener.getsockname()[1], answers
    finally:
        listener.close()


@pytest.mark.parametrize(
    "answer",
    [b"[]", b'"go"', b"[" * 5000, b'{"go": "yes"}', b'{"ok": true, "run_id": 5, "t": 1.0}',
     b'{"ok": true, "run_id": "r1", "t": null}', b'{"busy": 1}', b'{"ok": true}'],
)  # fmt: skip
def test_an_answer_that_is_not_the_gates_is_no_answer_never_a_crash(stranger, answer):
    port, answers = stranger
    answers.append(answer)
    reply = knock.say_hello("127.0.0.1", port, "b", "127.0.0.1", "t", time.monotonic() + 0.5)
    assert not reply.ok and reply.error
    gbps, error = knock.measure_tcp("127.0.0.1", port, "b", "t", 0.1, time.monotonic() + 1)
    assert gbps is None and error
    try:  # an object of the answer's shape is read as what it says; anything else is no answer
        said: bool | None = wire.Answer.from_line(answer).ok
    except ValueError:
        said = None
    assert knock.probe_ports("127.0.0.1", port, port, "b", "t", 0.5).from_master_ok is said


def test_the_gates_answers_read_back_as_it_wrote_them():
    assert wire.Answer.from_line(json.dumps(wire_busy := gate.BUSY).encode()) == wire.Answer(
        busy=True, error=wire_busy["error"]
    )
    assert wire.Answer.from_line(b"") == wire.Answer()  # the peer closed: no answer
