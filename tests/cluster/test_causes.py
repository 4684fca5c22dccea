"""Network causes of a hang (MTU, blocked ephemeral ports) and the port probe behind one."""

from __future__ import annotations

import time

from checks import run_checks
from nccldoctor.cluster.agent import gate, knock
from nccldoctor.cluster.diagnosis import causes
from nccldoctor.cluster.diagnosis.verdict import hang_section
from nccldoctor.facts import NodeFacts
from nccldoctor.facts.network import Interface, Route
from nccldoctor.facts.ranks import RankOutcome, outcomes
from nccldoctor.facts.run import PortProbe, RunObserved
from nccldoctor.facts.world import WorldSeen, stalls
from tests.ports import free_port


def node(name, mtu, address, ports=(32768, 60999)):
    facts = NodeFacts(node=name)
    facts.network.interfaces = [Interface("eth0", mtu=mtu, ipv4=[f"{address}/24"])]
    facts.network.route_to_master = Route("198.18.0.1", interface="eth0", source=address)
    facts.network.ip_local_port_range = list(ports)
    return facts


def rank(r, name, state="failed", in_flight=None, passed=None, phase="allreduce_correctness"):
    sizes = {"phase": phase, "largest_passed_bytes": passed, "last_passed_bytes": passed,
             "in_flight_bytes": in_flight}  # fmt: skip
    return RankOutcome.from_dict(
        {"rank": r, "node": name, "state": state, "phase_reached": phase, "error": "timed out",
         "ended_at": 100.0 + r, "exit_code": 3, "stuck": None, "last_nccl_lines": [],
         "log_path": "x", "message_sizes": sizes})  # fmt: skip


NODES = [node("n0", 1500, "198.18.0.1"), node("n1", 9000, "198.18.0.2"),
         node("n2", 9000, "198.18.0.3")]  # fmt: skip


def mtu_findings(facts, ranks, tcp_gbps=None):
    """The ``world`` rules over every node's Facts and the ranks' ends, as the master runs them."""
    return run_checks("world", WorldSeen(facts, stalls(ranks), tcp_gbps or {}))


def test_mtu_stall_names_the_mtus_the_sizes_and_the_fix():
    ranks = [rank(0, "n0", in_flight=262148, passed=4096), rank(1, "n1", in_flight=262148,
             passed=4096), rank(2, "n2", state="ok")]  # fmt: skip
    found = mtu_findings(NODES, ranks, {"n1": 0.9, "n2": 0.7})
    cause = causes.mtu_stall(found)
    assert cause.findings == found
    (f,) = cause.findings
    assert (f.id, f.category, f.severity.value) == ("run.mtu-stall", "interface_selection", "fail")
    assert f.title == (
        "allreduce_correctness stalled at 256.0 KiB (4 KiB passed): the MTU differs between "
        "nodes (9000 on n1, n2; 1500 on n0) and frames over 1500 B are dropped on the path"
    )
    assert f.evidence == [
        "MTU of the interface towards the master: n0 eth0 1500, n1 eth0 9000, n2 eth0 9000",
        "allreduce_correctness: every rank got through 4096 B; ranks 0, 1 stopped with "
        "262148 B in flight",
        "frames over 1500 B: sent by n1, n2 (MTU 9000), dropped by a hop at 1500",
        "raw TCP to the master: n1 112 MB/s, n2 87.5 MB/s",
    ]
    assert "ip link set dev eth0 mtu 1500   # on n1, n2" in f.fix
    assert "ping -M do -s 8972 -c 1 198.18.0.3" in f.fix  # from n1 to the other jumbo node
    assert cause.sentence == f"{f.title} (run.mtu-stall)"
    assert (cause.check, cause.category) == ("run.mtu-stall", "interface_selection")


def test_mtu_stall_needs_differing_mtus_and_a_stall_above_the_smaller_one():
    big = [rank(1, "n1", in_flight=262148, passed=4096)]
    same = [node("n0", 9000, "198.18.0.1"), node("n1", 9000, "198.18.0.2")]
    assert mtu_findings(same, big) == []  # one MTU: something else
    small = [rank(1, "n1", in_flight=1024, passed=28)]
    assert mtu_findings(NODES, small) == []  # fits in a 1500 frame
    elsewhere = [rank(1, "n1", in_flight=None, passed=262148, phase="ddp")]
    assert mtu_findings(NODES, elsewhere) == []  # stopped outside a sized collective
    unknown = [node("n0", None, "198.18.0.1"), node("n1", 9000, "198.18.0.2")]
    assert mtu_findings(unknown, big) == []  # an unknown MTU is never guessed
    assert mtu_findings(NODES, [rank(1, "n1", "ok", in_flight=262148)]) == []  # it finished
    assert causes.mtu_stall([]) is None


def test_mtu_stall_reads_bad_rank_rows_without_crashing():
    rows = [{"rank": 1, "state": "stuck", "message_sizes": "garbage"}, {"rank": "x"}, {},
            {"rank": 2, "node": "n1", "state": "failed", "message_sizes": {"in_flight_bytes": "9"}}]  # fmt: skip
    assert outcomes(rows) is None  # not every row is a rank's outcome: no verdict judged anew
    typed = outcomes([rows[0], rows[3]])
    assert [s.in_flight_bytes for s in stalls(typed)] == [0, 0]
    assert mtu_findings(NODES, typed) == []


def probe(to_ok=True, from_ok=True):
    to_error = "" if to_ok else "TimeoutError: timed out"
    from_error = "" if from_ok else "timed out"
    return PortProbe("198.18.0.1:41000", to_ok, to_error, "198.18.0.2:52000", from_ok,
                          from_error, 3.0)  # fmt: skip


def port_findings(probe: PortProbe, node: str, facts: NodeFacts | None) -> list:
    observed = RunObserved(node, 29400, network=facts.network if facts else None, port_probe=probe)
    return run_checks("run", observed, node=node)


def test_port_findings_name_the_blocking_side_the_range_and_the_rule():
    assert port_findings(probe(), "n1", NODES[1]) == []
    (f,) = port_findings(probe(to_ok=False), "n1", NODES[1])
    assert (f.id, f.category, f.node) == ("run.ephemeral-port-blocked", "firewall_or_port", "n1")
    assert f.title.startswith("connections to ephemeral ports on the master are dropped")
    assert f.evidence[:2] == [
        "this node → 198.18.0.1:41000: TimeoutError: timed out (deadline 3 s)",
        "the master → 198.18.0.2:52000: connected",
    ]
    assert any("ip_local_port_range on node n1: 32768-60999" in e for e in f.evidence)
    assert "iptables -I INPUT -p tcp -s 198.18.0.0/24 -j ACCEPT" in f.fix
    assert "--dport 32768:60999" in f.fix and "ufw allow from 198.18.0.0/24" in f.fix
    (both,) = port_findings(probe(to_ok=False, from_ok=False), "n1", None)
    assert "on the master and node n1" in both.title and "<the nodes' subnet>" in both.fix


def test_ports_blocked_leads_the_hang_verdict():
    ranks = [rank(0, "n0", phase="init"), rank(1, "n1", phase="init")]
    probes = {"n0": None, "n1": probe(to_ok=False)}
    cause = causes.judge(NODES, ranks, probes, master="n0")
    assert cause.sentence.startswith(
        "connections to ephemeral ports on node n0 (32768-60999) are dropped while the "
        "rendezvous ports pass"
    )
    hang = hang_section(ranks, cause=cause.sentence)
    assert hang["verdict"].startswith(cause.sentence + ": rank 0 on node n0 failed in init")
    assert causes.judge(NODES, ranks, {"n1": probe()}) is None
    healthy = [rank(0, "n0", state="ok"), rank(1, "n1", state="ok")]
    assert causes.judge(NODES, healthy, probes) is None  # nothing to explain


def test_port_probe_both_ways_over_loopback():
    server = gate.Gate(free_port(), "secret", "run1", bind="127.0.0.1")
    try:
        reply = knock.say_hello("127.0.0.1", server.port, "b", "127.0.0.1", "secret",
                               time.monotonic() + 5)  # fmt: skip
        assert reply.probe_port == server.probe_port != server.port
        result = knock.probe_ports("127.0.0.1", server.port, reply.probe_port, "b", "secret", 2.0)
        assert (result.to_master_ok, result.from_master_ok) == (True, True)
        assert result.from_master.startswith("127.0.0.1:")
        closed = knock.probe_ports("127.0.0.1", server.port, free_port(), "b", "secret", 2.0)
        assert closed.to_master_ok is False and "refused" in closed.to_master_error.lower()
    finally:
        server.close()
