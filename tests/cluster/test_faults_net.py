"""The harder network faults, reproduced for real across network namespaces.

An MTU black hole: small collectives pass, large ones stall. A firewall that passes the
rendezvous ports only: everything up to init_process_group works, then it hangs. Each scenario
asserts the category, the evidence, the exit codes, the deadline and every node's report.
"""

from __future__ import annotations

import pytest

from nccldoctor.units import format_bytes
from tests.cluster.test_check_netns import (
    HEALTHY_DEADLINE,
    PORT,
    STALL_S,
    TWO_RANK_STALL_S,
    WAIT,
    assert_reports,
    by_category,
    start_all,
)

pytestmark = [pytest.mark.netns, pytest.mark.slow]


def only(findings, id_):
    found = [f for f in findings if f["id"] == id_]
    assert len(found) == 1, [f["id"] for f in findings]
    return found[0]


def test_mtu_black_hole_stalls_large_collectives(lab):
    # "One side 9000, the other 1500" that really stalls: TCP endpoints with different MTUs agree
    # on the smaller MSS by themselves (nothing stalls), so the stall needs jumbo endpoints on a
    # path that silently drops big frames. node1 and node2 got jumbo frames, the switch (the
    # bridge and its veth ports) and node0 stayed at 1500: between node1 and node2 every frame
    # over 1500 B is dropped without an ICMP. The master is node0, so the rendezvous and the
    # gate (to and from the 1500 node) keep working and the workers' own traffic shows it.
    lab = lab(3)
    for host in lab.hosts[1:]:
        host.set_mtu(9000)
    runs = start_all(lab, 3, extra=["--phase-timeout", f"collective={STALL_S}"])
    lab.wait(runs, HEALTHY_DEADLINE + WAIT)
    assert [run.rc for run in runs] == [1, 1, 1], runs[0].stderr[-3000:]
    for run in runs:
        assert run.elapsed < HEALTHY_DEADLINE + WAIT
    assert_reports(runs)
    cluster = runs[0].cluster_report()
    differs = only(cluster["findings"], "cluster.mtu-differs")
    assert differs["evidence"][0] == "1500: node0"  # then the jumbo nodes, in join order
    assert sorted(differs["evidence"][1][len("9000: ") :].split(", ")) == ["node1", "node2"]
    stall = only(cluster["findings"], "run.mtu-stall")
    assert (stall["category"], stall["severity"]) == ("interface_selection", "fail")
    sizes = cluster["ranks"][0]["message_sizes"]
    passed, stalled = sizes["largest_passed_bytes"], sizes["in_flight_bytes"]
    assert passed > 0 and stalled > 1500  # small ones went through, a big one never did
    assert all(r["state"] != "ok" for r in cluster["ranks"])
    assert stall["title"] == (
        f"{sizes['phase']} stalled at {format_bytes(stalled)} ({format_bytes(passed)} passed): "
        "the MTU differs between "
        "nodes (9000 on node1, node2; 1500 on node0) and frames over 1500 B are dropped on the path"
    )
    assert stall["evidence"][0] == (
        "MTU of the interface towards the master: node0 eth0 1500, node1 eth0 9000, node2 eth0 9000"
    )
    assert any(e.startswith("raw TCP to the master: node1 ") for e in stall["evidence"])
    assert "ip link set dev eth0 mtu 1500   # on node1, node2" in stall["fix"]
    assert f"ping -M do -s 8972 -c 1 {lab.hosts[2].address}" in stall["fix"]
    assert cluster["hang"]["phase"] == sizes["phase"]
    assert cluster["hang"]["verdict"].startswith(stall["title"] + " (run.mtu-stall): rank ")


def rendezvous_only_firewall(host):
    """``host`` lets --port and the gate port (--port + 1) in, and the replies to what it opened
    itself; every other new TCP connection to it is dropped."""
    for rule in (["-i", "lo", "-j", "ACCEPT"],
                 ["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
                 ["-p", "tcp", "--dport", f"{PORT}:{int(PORT) + 1}", "-j", "ACCEPT"],
                 ["-p", "tcp", "--syn", "-j", "DROP"]):  # fmt: skip
        host.exec("iptables", "-A", "INPUT", *rule)


def test_firewall_passes_rendezvous_drops_ephemeral_ports(lab):
    lab = lab(2)
    master = lab.hosts[0]
    rendezvous_only_firewall(master)
    ranges = {h.name: h.exec("cat", "/proc/sys/net/ipv4/ip_local_port_range").stdout.split()
              for h in lab.hosts}  # fmt: skip
    runs = start_all(lab, 2, extra=["--phase-timeout", f"init={TWO_RANK_STALL_S}"])
    lab.wait(runs, HEALTHY_DEADLINE + WAIT)
    assert [run.rc for run in runs] == [1, 1], runs[1].stderr[-3000:]
    for run in runs:
        assert run.elapsed < HEALTHY_DEADLINE + WAIT
    assert_reports(runs)

    node = runs[1].node_report()
    blocked = only(node["findings"], "run.ephemeral-port-blocked")
    assert (blocked["category"], blocked["node"]) == ("firewall_or_port", "node1")
    probe = node["run"]["port_probe"]
    assert probe["to_master_ok"] is False and probe["from_master_ok"] is True
    assert probe["to_master"].startswith(f"{master.address}:")
    low, high = (int(p) for p in ranges["node0"])
    assert low <= int(probe["to_master"].rsplit(":", 1)[1]) <= high  # the master's kernel's pick
    assert blocked["evidence"][0].startswith(f"this node → {probe['to_master']}: ")
    subnet = f"198.18.{lab.subnet}.0/24"
    assert f"iptables -I INPUT -p tcp -s {subnet} -j ACCEPT" in blocked["fix"]
    assert "--dport {}:{}".format(*ranges["node1"]) in blocked["fix"]
    ports = next(p for p in node["phases"] if p["phase"] == "ports")
    assert ports["status"] == "fail"
    assert all(p["status"] == "ok" for p in node["phases"] if p["phase"] in ("rendezvous", "tcp"))
    assert node["hang"]["verdict"].startswith("connections to ephemeral ports on the master ")

    cluster = runs[0].cluster_report()
    fails = [f for f in by_category(cluster, "firewall_or_port") if f["severity"] == "fail"]
    assert [(f["id"], f["node"]) for f in fails] == [("run.ephemeral-port-blocked", "node1")]
    assert cluster["hang"]["phase"] == "init"
    assert cluster["hang"]["verdict"].startswith(
        "connections to ephemeral ports on node node0 ({}-{}) are dropped while the rendezvous "
        "ports pass".format(*ranges["node0"])
    )
    assert "never finished init_process_group" in cluster["hang"]["verdict"]


def test_firewall_on_a_node_is_found_by_the_masters_dial_back(lab):
    # The other way round: node1 drops new connections to its ephemeral ports. gloo's pair of
    # two ranks is dialled by one side only, so the workers may even pass on gloo; NCCL's rings
    # connect both ways and would not. The probe finds it either way.
    lab = lab(2)
    node1 = lab.hosts[1]
    rendezvous_only_firewall(node1)
    low, high = node1.exec("cat", "/proc/sys/net/ipv4/ip_local_port_range").stdout.split()
    runs = start_all(lab, 2, extra=["--phase-timeout", f"init={STALL_S}"])
    lab.wait(runs, HEALTHY_DEADLINE + WAIT)
    assert [run.rc for run in runs] == [1, 1], runs[1].stderr[-3000:]
    assert_reports(runs)
    probe = runs[1].node_report()["run"]["port_probe"]
    assert probe["to_master_ok"] is True and probe["from_master_ok"] is False
    assert probe["from_master"].startswith(f"{node1.address}:")
    assert int(low) <= int(probe["from_master"].rsplit(":", 1)[1]) <= int(high)
    cluster = runs[0].cluster_report()
    blocked = only(cluster["findings"], "run.ephemeral-port-blocked")
    assert blocked["title"].startswith("connections to ephemeral ports on node node1 are dropped")
    assert blocked["evidence"][:2] == [
        f"this node → {probe['to_master']}: connected",
        f"the master → {probe['from_master']}: TimeoutError: timed out (deadline 3 s)",
    ]
    assert blocked["fix"].startswith("# on node node1: allow TCP from the other nodes")
    hang = cluster["hang"]
    assert hang is None or hang["verdict"].startswith(
        f"connections to ephemeral ports on node node1 ({low}-{high}) are dropped"
    )
