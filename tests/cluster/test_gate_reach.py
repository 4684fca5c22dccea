"""The gate and the reach phase over real loopback sockets."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from checks import get_check, run_checks
from nccldoctor.cluster.agent import gate, knock, tcpprobe
from nccldoctor.cluster.agent.reach import connect, locate
from nccldoctor.facts import NodeFacts
from nccldoctor.facts.run import ReachResult, RunObserved
from nccldoctor.meet import is_local
from nccldoctor.probes.network import probe as network_probe
from tests.ports import free_port


def test_hello_with_the_token_gets_the_run_id_and_the_seen_address():
    server = gate.Gate(free_port(), "secret", "run1", bind="127.0.0.1")
    port = server.port
    try:
        reply = knock.say_hello("127.0.0.1", port, "b", "127.0.0.1", "secret", time.monotonic() + 5)
        assert (reply.ok, reply.run_id, reply.seen) == (True, "run1", "127.0.0.1")
        assert abs(reply.skew_s) < 1 and reply.rtt_s < 1
        refused = knock.say_hello("127.0.0.1", port, "c", "127.0.0.1", "nope", time.monotonic() + 5)
        assert refused.refused and "wrong or missing token" in refused.error
        knock.send_note("127.0.0.1", port, "b", "secret", "store port timed out")
        time.sleep(0.3)
        seen = {(h.node, h.accepted): h.reason for h in server.snapshot()}
        assert seen == {("b", True): "store port timed out", ("c", False): "wrong or missing token"}
    finally:
        server.close()


def test_tcp_throughput_is_measured_by_the_receiver():
    server = gate.Gate(free_port(), None, "run1", bind="127.0.0.1")
    port = server.port
    try:
        gbps, error = knock.measure_tcp("127.0.0.1", port, "b", None, 0.3, time.monotonic() + 10)
        assert error == "" and gbps > 0.01
        assert server.tcp_gbps["b"] == gbps
    finally:
        server.close()


def test_tcp_throughput_is_not_the_agents_gil():
    """The agent imports torch in a thread while it probes; in-process loops measured that
    import (0.8 vs 28 Gbit/s here), the probe's own processes measure the wire."""

    def measure() -> float:
        server = gate.Gate(free_port(), None, "run1", bind="127.0.0.1")
        try:
            gbps, error = knock.measure_tcp(
                "127.0.0.1", server.port, "b", None, 0.5, time.monotonic() + 20
            )
            assert error == "", error
            return gbps
        finally:
            server.close()

    quiet = measure()
    stop = threading.Event()
    hog = threading.Thread(target=_hold_the_gil, args=(stop,))
    hog.start()
    try:
        busy = measure()
    finally:
        stop.set()
        hog.join()
    assert busy > 0.1 * quiet, (busy, quiet)  # the CPU is shared, the GIL is not


def _hold_the_gil(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def test_a_failed_probe_loop_is_an_error_with_its_reason():
    left, right = socket.socketpair()
    right.close()
    with pytest.raises(OSError, match=r"the TCP source failed: .*(Broken pipe|reset)"):
        tcpprobe.run_isolated("source", left, 0.2)
    left.close()


def test_hello_before_the_gate_opens_is_answered_soon_after_it_opens():
    """The other nodes knock while the master's preflight still runs; none may lose a retry
    pause's worth of its start (the pause was 0.5 s: at least 0.45 s lost in this timing)."""
    port, opened = free_port(), []

    def open_late() -> None:
        time.sleep(0.55)
        opened.append((gate.Gate(port, None, "run1", bind="127.0.0.1"), time.monotonic()))

    opener = threading.Thread(target=open_late)
    opener.start()
    try:
        reply = knock.say_hello("127.0.0.1", port, "b", "", None, time.monotonic() + 10)
        answered = time.monotonic()
        opener.join()
        assert reply.ok, reply.error
        assert answered - opened[0][1] < 0.35
    finally:
        opener.join()
        for server, _ in opened:
            server.close()


def test_hello_to_nobody_ends_at_its_deadline():
    start = time.monotonic()
    reply = knock.say_hello("127.0.0.1", free_port(), "b", "", None, start + 1.5)
    assert not reply.ok and not reply.refused and "Connection refused" in reply.error
    assert time.monotonic() - start < 3


def reach_findings(result: ReachResult, port: int, node: str) -> list:
    return run_checks("run", RunObserved(node, port, reach=result), node=node)


def test_reach_a_listening_port():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        result = locate(network_probe(Path("/"), {}, "127.0.0.1"))
        connect(result, listener.getsockname()[1], time.monotonic() + 5)
    assert result.connected and result.interface == "lo" and result.source == "127.0.0.1"
    assert reach_findings(result, 1, "a") == []


def test_reach_a_closed_port_is_refused_until_the_deadline():
    result = locate(network_probe(Path("/"), {}, "127.0.0.1"))
    start = time.monotonic()
    connect(result, free_port(), start + 1.2, retry_s=0.2)
    assert not result.connected and result.refused >= 2 and result.timed_out == 0
    assert 1.0 < time.monotonic() - start < 3
    (finding,) = reach_findings(result, 29400, "b")
    assert finding.id == "run.master-refused" and finding.node == "b"


def test_an_unresolvable_master():
    network = network_probe(Path("/"), {}, "no-such-host.invalid")
    result = locate(network)
    assert result.addresses == [] and result.resolve_error == network.master_resolve_error
    assert reach_findings(result, 29400, "b") == []  # one failure: master.unresolvable's
    facts = NodeFacts(node="b", network=network)
    (finding,) = get_check("master.unresolvable").run(facts, node="b")
    assert (finding.category, finding.node) == ("env_config", "b")


def test_is_local():
    assert is_local("127.0.0.1")
    assert not is_local("198.18.255.254")
