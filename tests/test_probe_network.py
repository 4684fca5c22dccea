"""The network probe on captured trees and on this machine."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import time
from pathlib import Path

import pytest
from hostfacts import HOSTS, copy_host

from nccldoctor.facts import NetworkFacts, NodeFacts, from_dict, to_dict
from nccldoctor.probes import network
from nccldoctor.probes.netpath import _getaddrinfo, _le_ip


def test_ib_host_interfaces_kinds_and_addresses():
    net = network.probe(HOSTS / "ib-two-hca", {}, None)
    by_name = {i.name: i for i in net.interfaces}
    assert [i.name for i in net.interfaces] == ["lo", "eno1", "ib0", "ib1"]  # ifindex order
    assert by_name["lo"].kind == "loopback" and by_name["eno1"].kind == "physical"
    assert by_name["eno1"].ipv4 == ["198.18.10.11/24"] and by_name["eno1"].speed_mbps == 10000
    assert by_name["ib0"].mtu == 4092 and by_name["ib0"].driver == "mlx5_core"
    assert by_name["ib1"].up and not by_name["ib1"].running  # UP but no carrier
    assert net.nccl_default_pick == "ib0"  # NCCL prefers ib* before anything else
    assert net.ip_local_port_range == [32768, 60999]
    assert not net.live and net.address_source.endswith("ip-addr.json")


def test_route_table_longest_prefix_and_gateway():
    root = HOSTS / "ib-two-hca"
    on_ib = network.probe(root, {}, "198.18.20.12").route_to_master
    assert (on_ib.interface, on_ib.gateway, on_ib.method) == ("ib0", None, "table")
    far = network.probe(root, {}, "198.18.99.1").route_to_master
    assert (far.interface, far.gateway, far.source) == ("eno1", "198.18.10.1", "198.18.10.11")
    own = network.probe(root, {}, "198.18.10.11").route_to_master
    assert own.interface == "lo"


def _hex6(address: str) -> str:
    return ipaddress.IPv6Address(address).exploded.replace(":", "")


def test_ipv6_route_table(tmp_path: Path):
    root = copy_host("ib-two-hca", tmp_path)

    def row(dest: str, plen: int, hop: str, metric: int, flags: int, dev: str) -> str:
        # net/ipv6/route.c ipv6_route_native_seq_show: "%pi6 %02x %pi6 %02x %pi6 %08x %08x %08x %08x %8s"
        zero = _hex6("::")
        return f"{_hex6(dest)} {plen:02x} {zero} 00 {_hex6(hop)} {metric:08x} 00000001 00000000 {flags:08x} {dev:>8}\n"

    (root / "proc/net/ipv6_route").write_text(
        row("fd00:18::", 64, "::", 256, 0x1, "eno1")
        + row("::", 0, "fd00:18::1", 1024, 0x3, "eno1")
        + row("::", 0, "::", 0xFFFFFFFF, 0x200, "lo")
    )
    near = network.probe(root, {}, "fd00:18::7").route_to_master
    assert (near.interface, near.gateway, near.error) == ("eno1", None, None)
    far = network.probe(root, {}, "fd00:99::1").route_to_master
    assert (far.interface, far.gateway) == ("eno1", "fd00:18::1")


def test_scoped_master_and_missing_ipv6_table():
    root = HOSTS / "ib-two-hca"
    assert network.probe(root, {}, "fe80::1%ib0").route_to_master.interface == "ib0"
    net = network.probe(root, {}, "fd00:18::7")  # the tree has no /proc/net/ipv6_route
    assert net.route_to_master is None and any("routing table" in e for e in net.read_errors)


def test_proc_net_route_hex_is_little_endian():
    assert _le_ip("010A12C6") == "198.18.10.1"


def test_hostname_from_hosts_file_127_0_1_1():
    net = network.probe(HOSTS / "hosts-loopback", {}, None)
    assert net.hostname == "trainer-02"
    assert net.hostname_addresses == ["127.0.1.1"]
    assert net.hosts_file_entries == ["127.0.1.1\ttrainer-02.example.internal\ttrainer-02"]
    assert net.fqdn == "trainer-02.example.internal"


def test_master_name_resolved_from_tree_hosts_file():
    net = network.probe(HOSTS / "ib-two-hca", {}, "gpu-ib-02")
    assert net.master_addresses == ["198.18.10.12"]
    assert net.route_to_master.interface == "eno1"


def test_unresolvable_master_in_tree_is_data():
    net = network.probe(HOSTS / "ib-two-hca", {}, "nowhere.invalid")
    assert net.master_addresses == [] and "nowhere.invalid" in net.master_resolve_error
    assert net.route_to_master is None


def test_forced_ifname_changes_nccl_pick():
    env = {"NCCL_SOCKET_IFNAME": "=eno1"}
    net = network.probe(HOSTS / "ib-two-hca", env, None)
    assert (net.nccl_default_pick, net.nccl_pick) == ("ib0", "eno1")
    assert (
        network.probe(HOSTS / "ib-two-hca", {"NCCL_SOCKET_IFNAME": "eth9"}, None).nccl_pick is None
    )


def test_missing_and_garbled_capture_is_recorded(tmp_path: Path):
    root = copy_host("hosts-loopback", tmp_path)
    (root / "run/nccldoctor/ip-addr.json").write_bytes(b"\x00\xff[not json")
    (root / "proc/net/route").write_text("garbage\n\x00\x01 1 2\n")
    net = network.probe(root, {}, "198.18.10.12")
    assert any("unreadable" in e for e in net.read_errors)
    assert net.route_to_master.error and not net.route_to_master.interface
    (root / "run/nccldoctor/ip-addr.json").unlink()
    assert any("missing" in e for e in network.probe(root, {}, None).read_errors)


@pytest.mark.parametrize(
    "junk",
    [
        '[{"ifname": 7, "addr_info": "x"}]',
        '{"a": 1}',
        "[1, 2]",
        '[{"ifname": "eth0", "addr_info": [{"family": "inet", "local": "x", "prefixlen": 9}]}]',
    ],
)
def test_wrong_shape_address_capture(tmp_path: Path, junk: str):
    root = copy_host("hosts-loopback", tmp_path)
    (root / "run/nccldoctor/ip-addr.json").write_text(junk)
    net = network.probe(root, {}, "198.18.10.12")
    assert any("unreadable" in e for e in net.read_errors)
    assert [i.name for i in net.interfaces] == ["lo", "eth0"]  # sysfs still names them


def test_link_kind_from_captured_linkinfo(tmp_path: Path):
    root = copy_host("hosts-loopback", tmp_path)
    captured = root / "run/nccldoctor/ip-addr.json"
    links = json.loads(captured.read_text())
    links[1]["linkinfo"] = {"info_kind": "veth"}  # what `ip -j -d addr` says in a container
    captured.write_text(json.dumps(links))
    kinds = {i.name: i.kind for i in network.probe(root, {}, None).interfaces}
    assert kinds == {"lo": "loopback", "eth0": "veth"}


def test_facts_round_trip():
    net = network.probe(HOSTS / "ib-two-hca", {}, "198.18.10.12")
    assert from_dict(NetworkFacts, json.loads(json.dumps(to_dict(net)))) == net


def test_facts_of_the_wrong_type_are_refused():
    # A garbled report (a node named [], an MTU that is a string) is refused, never half-read.
    good = to_dict(network.probe(HOSTS / "ib-two-hca", {}, "198.18.10.12"))
    for garbled in (
        dict(good, master=[]),
        dict(good, interfaces=[dict(good["interfaces"][0], mtu="9000")]),
        dict(good, interfaces=[dict(good["interfaces"][0], up="yes")]),
    ):
        with pytest.raises(TypeError):
            from_dict(NetworkFacts, garbled)
    with pytest.raises(TypeError):
        from_dict(NodeFacts, {"node": [], "multi_node": True})
    assert from_dict(NodeFacts, {"node": "n0", "local_ranks": 2}).local_ranks == 2


def test_live_machine_route_is_the_kernels():
    net = network.probe(Path("/"), {}, "127.0.0.1")
    assert net.live and net.address_source == "psutil"
    assert any(i.kind == "loopback" for i in net.interfaces)
    kernel = json.loads(
        subprocess.run(
            ["ip", "-j", "route", "get", "127.0.0.1"], capture_output=True, text=True
        ).stdout
    )[0]
    assert net.route_to_master.interface == kernel["dev"] and net.route_to_master.method == "kernel"


def test_resolution_has_a_deadline():
    started = time.monotonic()
    addresses, error = _getaddrinfo("nowhere.invalid", 0.5)
    assert addresses == [] and error
    assert time.monotonic() - started < 2.0
