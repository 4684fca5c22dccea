"""The verdict names the root cause first, for every scenario of the fault matrix (the netns
tests: test_check_netns, test_faults_net, test_faults_host, test_docker_netns): scenario → the
check and category its first sentence carries, in the master's cluster report and in every
other node's own report. Each side is judged the way merge and node_report judge it: every
node's Facts, port probes and the ``world`` rules on the master, a node's own elsewhere
(docs/design.md#verdict)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hostfacts import host_facts

from checks import run_checks
from nccldoctor.cluster.diagnosis import causes
from nccldoctor.cluster.diagnosis.merge import NODE_LOST
from nccldoctor.cluster.diagnosis.node_report import MASTER_LOST
from nccldoctor.cluster.diagnosis.verdict import hang_section
from nccldoctor.facts import NodeFacts
from nccldoctor.facts.network import Interface, Route
from nccldoctor.facts.ranks import RankOutcome
from nccldoctor.facts.run import PortProbe
from nccldoctor.facts.world import WorldSeen, stalls

LAN = "198.18.30"
BRIDGE_ADDRESS = "198.18.17.2"  # each host's first container on docker0
REFUSED = "Gloo connectFullMesh failed with [pair.cc:152] timed out connecting: SO_ERROR: "
LOST_PEER = "Connection closed by peer [198.18.30.2]:5183"
# gloo's read of a connection the master's end reset (gloo/transport/tcp/pair.cc, Pair::read)
RESET = "Read error [198.18.30.1]:5183: Connection reset by peer. This is typically caused by"


def lan(name: str, i: int, mtu: int = 1500) -> NodeFacts:
    """A server on the LAN (host networking)."""
    facts = NodeFacts(node=name, multi_node=True)
    address = f"{LAN}.{i + 1}"
    facts.network.interfaces = [Interface("eth0", mtu=mtu, ipv4=[f"{address}/24"], kind="veth")]
    facts.network.route_to_master = Route(f"{LAN}.1", interface="eth0", source=address)
    facts.network.master_addresses = [f"{LAN}.1"]
    facts.network.ip_local_port_range = [32768, 60999]
    return facts


def container(name: str, i: int) -> NodeFacts:
    """A Docker container on the default bridge of host ``i`` (docs/docker.md#lab)."""
    facts = lan(name, i)
    facts.container.runtime, facts.container.network_mode = "docker", "bridge"
    facts.container.runtime_evidence = ["/.dockerenv exists", "/proc/self/cgroup: 0::/docker/0"]
    facts.network.interfaces = [Interface("eth0", ipv4=[f"{BRIDGE_ADDRESS}/24"], kind="veth")]
    facts.network.route_to_master = Route(f"{LAN}.1", interface="eth0", source=BRIDGE_ADDRESS,
                                          gateway="198.18.17.1")  # fmt: skip
    facts.network.seen_by_master = f"{LAN}.{i + 1}" if i else None
    return facts


def wrong_ifname(name: str) -> NodeFacts:
    facts = host_facts("ib-two-hca", {"NCCL_SOCKET_IFNAME": "eth9"}, "198.18.10.12")
    facts.node, facts.multi_node = name, True
    return facts


def rank(r: int, node: str, state: str = "failed", error: str = "timed out",
         phase: str = "init", in_flight: int | None = None) -> RankOutcome:  # fmt: skip
    sizes = {"phase": phase, "largest_passed_bytes": 4096 if in_flight else None,
             "in_flight_bytes": in_flight}  # fmt: skip
    return RankOutcome.from_dict(
        {"rank": r, "node": node, "state": state, "phase_reached": phase, "error": error,
         "ended_at": 100.0 + r, "exit_code": 3, "stuck": None, "last_nccl_lines": [],
         "log_path": "x", "message_sizes": sizes})  # fmt: skip


def probe(to_ok: bool = True, from_ok: bool = True) -> PortProbe:
    return PortProbe("198.18.0.1:41000", to_ok, "", "198.18.0.2:52000", from_ok, "", 3.0)


@dataclass
class Scenario:
    facts: list[NodeFacts]
    ranks: list[RankOutcome]
    probes: dict[str | None, PortProbe | None] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)  # the master's sentences for lost nodes
    master_lost: bool = False  # the other nodes outlived the master
    master: tuple[str, str] | None = None  # (check, category) on the master's cluster report
    nodes: dict[str, tuple[str, str] | None] = field(default_factory=dict)  # on the others


SHARED = ("cluster.advertised-address-shared", "docker_network")
BRIDGE = ("container.bridge-network", "docker_network")
PORTS = ("run.ephemeral-port-blocked", "firewall_or_port")
IFNAME = ("socket.ifname-missing", "interface_selection")

SCENARIOS = {
    # both containers advertise 198.18.17.2; the port probe fails too (a consequence of NAT)
    "docker-bridge": Scenario(
        [container("n0", 0), container("n1", 1)],
        [rank(0, "n0", "stuck"), rank(1, "n1", error=REFUSED + f"remote=[{BRIDGE_ADDRESS}]:1")],
        {"n0": None, "n1": probe(False, False)},
        master=SHARED,
        nodes={"n1": BRIDGE},
    ),
    "one node behind Docker NAT": Scenario(
        [lan("n0", 0), container("n1", 1)],
        [rank(0, "n0", "stuck"), rank(1, "n1")],
        {"n0": None, "n1": probe(True, False)},
        master=BRIDGE,
        nodes={"n1": BRIDGE},
    ),
    "firewall drops ephemeral ports on the master": Scenario(
        [lan("n0", 0), lan("n1", 1)],
        [rank(0, "n0", "stuck"), rank(1, "n1")],
        {"n0": None, "n1": probe(False, True)},
        master=PORTS,
        nodes={"n1": PORTS},
    ),
    "firewall on a node, found by the master's dial back": Scenario(
        [lan("n0", 0), lan("n1", 1)],
        [rank(0, "n0"), rank(1, "n1", "stuck")],
        {"n0": None, "n1": probe(True, False)},
        master=PORTS,
        nodes={"n1": PORTS},
    ),
    # one node's Facts cannot show another's MTU: only the master names it
    "MTU black hole": Scenario(
        [lan("n0", 0, 1500), lan("n1", 1, 9000)],
        [
            rank(r, f"n{r}", "stuck", phase="allreduce_correctness", in_flight=262148)
            for r in (0, 1)
        ],
        master=("run.mtu-stall", "interface_selection"),
        nodes={"n1": None},
    ),
    # the missing interface explains the bootstrap timeout and the failed port probe
    "wrong NCCL_SOCKET_IFNAME on one node": Scenario(
        [lan("n0", 0), wrong_ifname("n1")],
        [rank(0, "n0", "stuck"), rank(1, "n1", error="Unable to find address for: eth9")],
        {"n0": None, "n1": probe(False, False)},
        master=IFNAME,
        nodes={"n1": IFNAME},
    ),
    # the dead node explains its peers' errors; it leaves no report of its own
    "node killed mid-run": Scenario(
        [lan("n0", 0), lan("n1", 1)],
        [rank(0, "n0", error=LOST_PEER, phase="ddp")],
        lost=["node n1 (node rank 1) stopped reporting during its workers phase"],
        master=("run.node-lost", "remote_peer_closed"),
    ),
    # the master leaves no cluster report; the survivor names it
    "master dies after rendezvous": Scenario(
        [lan("n0", 0), lan("n1", 1)],
        [rank(1, "n1", error=RESET, phase="ddp")],
        master_lost=True,
        nodes={"n1": ("run.master-lost", "remote_peer_closed")},
    ),
}


def _first_sentence(hang: dict[str, Any] | None) -> tuple[str, str] | None:
    """(check, category) the verdict's first sentence carries, after checking it cites it."""
    if not hang or "cause" not in hang:
        return None
    cause = hang["cause"]
    first, cited, _ = hang["verdict"].partition(f" ({cause['check']})")
    assert cited and "; rank" not in first, hang["verdict"]  # cited before any rank's sentence
    return cause["check"], cause["category"]


def _on_master(s: Scenario) -> tuple[str, str] | None:
    found = run_checks("world", WorldSeen(s.facts, stalls(s.ranks)))  # as merge runs them
    cause = causes.judge(s.facts, s.ranks, s.probes, found, master=s.facts[0].node)
    return _first_sentence(hang_section(s.ranks, s.lost, *causes.verdict_args(cause),
                                        lost_of=NODE_LOST))  # fmt: skip


def _on_node(s: Scenario, name: str) -> tuple[str, str] | None:
    own = next(f for f in s.facts if f.node == name)
    ranks = [r for r in s.ranks if r.node == name]
    lost = ["the master n0 (node rank 0) was lost during the workers phase"] if (
        s.master_lost) else []  # fmt: skip
    cause = causes.judge([own], ranks, {name: s.probes.get(name)})
    return _first_sentence(hang_section(ranks, lost, *causes.verdict_args(cause),
                                        lost_of=MASTER_LOST))  # fmt: skip


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_verdict_leads_with_the_root_cause(name):
    s = SCENARIOS[name]
    if not s.master_lost:
        assert _on_master(s) == s.master
    for node, expected in s.nodes.items():
        assert _on_node(s, node) == expected, node
