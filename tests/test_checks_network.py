"""Each network check fires on a captured host that has the problem and stays quiet otherwise."""

from __future__ import annotations

from pathlib import Path

from hostfacts import copy_host, findings, host_facts

from checks import run_node_checks
from nccldoctor.facts import NodeFacts
from nccldoctor.facts.network import Interface, NetworkFacts, Route
from nccldoctor.model import Severity

IB = "ib-two-hca"
MASTER = "198.18.10.12"  # gpu-ib-02, on eno1's subnet


def _one(check_id: str, facts: NodeFacts):
    (finding,) = findings(check_id, facts)
    return finding


def test_ifname_missing():
    hit = _one("socket.ifname-missing", host_facts(IB, {"NCCL_SOCKET_IFNAME": "eth9"}, MASTER))
    assert hit.severity is Severity.FAIL and "eth9" in hit.title
    assert "export NCCL_SOCKET_IFNAME==eno1" in hit.fix
    assert not findings("socket.ifname-missing", host_facts(IB, {"NCCL_SOCKET_IFNAME": "=eno1"}))
    # on the master itself the route is loopback: suggest the interface holding its address
    on_master = host_facts(IB, {"NCCL_SOCKET_IFNAME": "eth9"}, "198.18.10.11")
    assert "NCCL_SOCKET_IFNAME==eno1" in _one("socket.ifname-missing", on_master).fix


def test_ifname_unusable_down_or_loopback():
    down = _one("socket.ifname-unusable", host_facts(IB, {"NCCL_SOCKET_IFNAME": "ib1"}, MASTER))
    assert down.severity is Severity.FAIL and "none is running" in down.title
    lo = _one("socket.ifname-unusable", host_facts(IB, {"NCCL_SOCKET_IFNAME": "lo"}, MASTER))
    assert "loopback" in lo.title
    assert not findings("socket.ifname-unusable", host_facts(IB, {"NCCL_SOCKET_IFNAME": "lo"}))
    v6_only = {"NCCL_SOCKET_IFNAME": "eno1", "NCCL_SOCKET_FAMILY": "AF_INET6"}
    assert findings("socket.ifname-unusable", host_facts(IB, v6_only))  # eno1 has no IPv6
    assert not findings("socket.ifname-unusable", host_facts(IB, {"NCCL_SOCKET_IFNAME": "ib0"}))


def test_ifname_not_routed():
    hit = _one("socket.ifname-not-routed", host_facts(IB, {"NCCL_SOCKET_IFNAME": "=ib0"}, MASTER))
    assert "through eno1" in hit.title and "NCCL_SOCKET_IFNAME==eno1" in hit.fix
    env = {"NCCL_SOCKET_IFNAME": "=eno1"}
    assert not findings("socket.ifname-not-routed", host_facts(IB, env, MASTER))


def test_ifname_prefix_broad():
    (hit,) = findings("socket.ifname-prefix-broad", host_facts(IB, {"NCCL_SOCKET_IFNAME": "ib"}))
    assert "ib0, ib1" in hit.title and hit.severity is Severity.INFO
    assert not findings(
        "socket.ifname-prefix-broad", host_facts(IB, {"NCCL_SOCKET_IFNAME": "=ib0"})
    )
    assert not findings("socket.ifname-prefix-broad", host_facts(IB, {"NCCL_SOCKET_IFNAME": "eno"}))


def test_ephemeral_ports():
    (hit,) = findings("network.ephemeral-ports", host_facts(IB, {}, MASTER))
    assert "32768-60999" in hit.title and "--dport 32768:60999" in hit.fix
    assert not findings("network.ephemeral-ports", host_facts(IB))  # one node


def test_gloo_ifname_missing():
    hit = _one("gloo.ifname-missing", host_facts(IB, {"GLOO_SOCKET_IFNAME": "eth0"}, MASTER))
    assert hit.fix == "export GLOO_SOCKET_IFNAME=eno1"
    assert not findings("gloo.ifname-missing", host_facts(IB, {"GLOO_SOCKET_IFNAME": "eno1"}))


def test_gloo_ifname_syntax():
    hit = _one("gloo.ifname-syntax", host_facts(IB, {"GLOO_SOCKET_IFNAME": "^lo"}, MASTER))
    assert "Unable to find address for: ^lo" in hit.evidence[1]
    assert not findings("gloo.ifname-syntax", host_facts(IB, {"GLOO_SOCKET_IFNAME": "eno1"}))


def test_default_pick_differs_from_route():
    hit = _one("socket.default-pick-differs", host_facts(IB, {}, MASTER))
    assert "bootstrap on ib0" in hit.title and "NCCL_SOCKET_IFNAME==eno1" in hit.fix
    # a master on the IPoIB subnet is reached through ib0: NCCL's pick is right
    assert not findings("socket.default-pick-differs", host_facts(IB, {}, "198.18.20.12"))
    # on the master itself the kernel routes its own address over lo; eno1 holds it
    on_master = _one("socket.default-pick-differs", host_facts(IB, {}, "198.18.10.11"))
    assert "reached through eno1" in on_master.title


def _bridge_node() -> NodeFacts:
    bridge = Interface(
        "br0", index=2, up=True, running=True, ipv4=["198.18.50.1/24"], kind="bridge"
    )
    net = NetworkFacts(interfaces=[bridge], nccl_pick="br0", nccl_pick_address="198.18.50.1/24")
    return NodeFacts(node="n", network=net, multi_node=True)


def test_pick_virtual_quiet_on_a_veth_master():
    veth = Interface("eth0", index=2, up=True, running=True, ipv4=["198.18.9.1/24"], kind="veth")
    lo = Interface("lo", index=1, up=True, running=True, ipv4=["127.0.0.1/8"], kind="loopback")
    net = NetworkFacts(
        interfaces=[lo, veth],
        master="198.18.9.1",
        master_addresses=["198.18.9.1"],
        route_to_master=Route("198.18.9.1", interface="lo", source="198.18.9.1", method="table"),
        nccl_pick="eth0",
        nccl_pick_address="198.18.9.1/24",
    )
    assert not findings("socket.pick-virtual", NodeFacts(node="n", network=net, multi_node=True))


def test_pick_virtual_quiet_on_a_bridge_uplink_flags_a_bridge_off_the_route():
    """br0 with the NIC as its port carries the route to the master: NCCL's pick is right. A
    docker0-like bridge that NCCL picks while the route goes through eth0 is the trap."""
    lo = Interface("lo", index=1, up=True, running=True, ipv4=["127.0.0.1/8"], kind="loopback")
    br0 = Interface("br0", index=2, up=True, running=True, ipv4=["198.18.9.2/24"], kind="bridge")
    eth0 = Interface("eth0", index=3, up=True, running=True, ipv4=["198.18.8.2/24"], kind="veth")

    def picks_br0(master: str, route_dev: str) -> NodeFacts:
        net = NetworkFacts(
            interfaces=[lo, br0, eth0],
            master=master,
            master_addresses=[master],
            route_to_master=Route(master, interface=route_dev, method="table"),
            nccl_pick="br0",
            nccl_pick_address="198.18.9.2/24",
        )
        return NodeFacts(node="n", network=net, multi_node=True)

    assert not findings("socket.pick-virtual", picks_br0("198.18.9.1", "br0"))
    hit = _one("socket.pick-virtual", picks_br0("198.18.8.1", "eth0"))
    assert "br0 is a bridge" in hit.evidence[0]


def test_pick_virtual():
    hit = _one("socket.pick-virtual", _bridge_node())
    assert "br0 is a bridge" in hit.evidence[0]
    assert not findings("socket.pick-virtual", host_facts(IB, {}, MASTER))
    everything = {"NCCL_SOCKET_IFNAME": "^,=,"}  # matches every interface: lo comes first
    lo = findings("socket.pick-virtual", host_facts(IB, everything, MASTER))
    assert [f.severity for f in lo] == [Severity.FAIL] and "lo is loopback" in lo[0].evidence[0]


def test_hostname_loopback():
    hit = _one("host.hostname-loopback", host_facts("hosts-loopback", {}, MASTER))
    assert "127.0.1.1" in hit.title and "198.18.40.12 trainer-02" in hit.fix
    assert not findings("host.hostname-loopback", host_facts("hosts-loopback", {}))  # one node
    assert not findings("host.hostname-loopback", host_facts(IB, {}, MASTER))
    # the master given by that name: one failure, one finding (master.loopback's), whose fix
    # names eth0's address although the route to the master is loopback
    on_master = host_facts("hosts-loopback", {}, "trainer-02")
    assert not findings("host.hostname-loopback", on_master)
    (loop,) = findings("master.loopback", on_master)
    assert "\n198.18.40.12 trainer-02\n" in loop.fix and "--master 198.18.40.12" in loop.fix
    assert "trainer-02 -> 127.0.1.1 on this node (/etc/hosts: 127.0.1.1" in loop.evidence[0]


def test_master_unresolvable():
    hit = _one("master.unresolvable", host_facts(IB, {}, "nowhere.invalid"))
    assert hit.severity is Severity.FAIL
    assert not findings("master.unresolvable", host_facts(IB, {}, MASTER))


def test_master_loopback():
    hit = _one("master.loopback", host_facts(IB, {}, "localhost"))
    assert hit.severity is Severity.FAIL and "127.0.0.1" in hit.evidence[0]
    single = {"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "8"}
    assert not findings("master.loopback", host_facts(IB, single, "127.0.0.1"))
    assert not findings("master.loopback", host_facts(IB, {}, MASTER))
    # by name, on the node whose /etc/hosts maps it to 127.0.1.1: the others may resolve it well
    named = _one("master.loopback", host_facts("hosts-loopback", {}, "trainer-02"))
    assert named.title.startswith("the master trainer-02 resolves to 127.0.1.1 (loopback) on this")
    assert hit.title == "the master localhost is a loopback address: other nodes cannot reach it"


def test_master_no_route(tmp_path: Path):
    root = copy_host("hosts-loopback", tmp_path)
    route = root / "proc/net/route"
    route.write_text(
        "".join(line for line in route.read_text().splitlines(True) if "00000000\t01" not in line)
    )
    hit = _one("master.no-route", host_facts(root, {}, "198.18.99.1"))
    assert "unreachable" in hit.evidence[0]
    assert not findings("master.no-route", host_facts("hosts-loopback", {}, "198.18.99.1"))


def _nat_node(source: str) -> NodeFacts:
    eth0 = Interface("eth0", index=12, up=True, running=True, ipv4=[f"{source}/16"], kind="veth")
    route = Route("198.18.0.2", interface="eth0", source=source, gateway="172.17.0.1")
    return NodeFacts(node="n", network=NetworkFacts(interfaces=[eth0], route_to_master=route))


def test_master_nat_bridge():
    hit = _one("master.nat-bridge", _nat_node("172.17.0.3"))
    assert "--network host" in hit.fix and hit.category == "docker_network"
    # A recognised bridge container: container.bridge-network alone says it, once.
    bridged = host_facts("docker-bridge", {}, MASTER)
    assert not findings("master.nat-bridge", bridged)
    assert findings("container.bridge-network", bridged)
    assert not findings("master.nat-bridge", host_facts(IB, {}, "198.18.99.1"))  # gateway, no NAT


def test_mtu_info():
    hit = _one("network.mtu", host_facts("roce-gid", {}, "198.18.30.12"))
    assert hit.severity is Severity.INFO and "MTU 9000" in hit.title
    assert not findings("network.mtu", host_facts("hosts-loopback", {}, MASTER))
    assert "MTU 9000" in _one("network.mtu", host_facts("roce-gid", {}, "198.18.30.11")).title


def test_one_character_socket_ifname_is_ignored_as_nccl_does():
    """NCCL ignores NCCL_SOCKET_IFNAME=e (one character) and picks by itself: one answer, no
    prefix match of eno1/eth*, and the user told why (nccl/rules.py parse_if_list)."""
    facts = host_facts(IB, {"NCCL_SOCKET_IFNAME": "e"}, MASTER)
    assert facts.network.nccl_pick == facts.network.nccl_default_pick
    ids = {f.id for f in run_node_checks(facts)}
    assert "env.socket-ifname-ignored" in ids
    assert not {i for i in ids if i.startswith("socket.ifname-")}


def test_gloo_ifname_without_an_address_is_missing_too():
    ib1 = host_facts(IB, {"GLOO_SOCKET_IFNAME": "ib1"}, MASTER)  # down, no address
    assert [i.ipv4 + i.ipv6 for i in ib1.network.interfaces if i.name == "ib1"] == [[]]
    hit = _one("gloo.ifname-missing", ib1)
    assert hit.title.startswith("GLOO_SOCKET_IFNAME=ib1 names ib1")


def test_measured_pick_supersedes_the_prediction():
    """In a check run libnccl's own bootstrap answer replaces NCCL's order: one finding, failing,
    whose evidence says it was measured."""
    facts = host_facts(IB, {}, MASTER)
    predicted = _one("socket.default-pick-differs", facts)
    assert predicted.severity is Severity.WARN and "NCCL's order" in predicted.evidence[0]
    facts.network.nccl_pick_measured = True
    measured = _one("socket.default-pick-differs", facts)
    assert measured.severity is Severity.FAIL and measured.evidence[0].startswith("measured:")
    assert measured.title.startswith("NCCL bootstraps on ib0")


def test_nat_measured_by_the_master():
    facts = host_facts(IB, {}, MASTER)
    assert not findings("master.nat-bridge", facts)
    facts.network.seen_by_master = "198.18.99.7"
    hit = _one("master.nat-bridge", facts)
    assert "the master sees 198.18.99.7" in hit.title and "--network host" in hit.fix
    facts.network.seen_by_master = facts.network.route_to_master.source
    assert not findings("master.nat-bridge", facts)
