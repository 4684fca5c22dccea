"""Which node, which link, in the lab: six namespace nodes running the real CLI (gloo), first
healthy, then with three faults at once, each named apart by the isolation rounds with the rounds
that show it. The master is the slow node, so that nothing in the rounds takes it for good.

- the master's link rate-limited (``tc qdisc … root tbf``);
- one pair blocked both ways (iptables), while each end reaches the others;
- one node behind an MTU trap: every node but the master has jumbo frames, and so has every
  switch port but that node's, which drops bigger frames without a word. Its frames to the
  master (1500) are small and pass; to anyone else they vanish.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.cluster.test_check_netns import WAIT, lab_out

pytestmark = [pytest.mark.netns, pytest.mark.slow]

NODES = 6
GROUP_S = 6  # a group's deadline: a blocked pair or a trapped node's pairs wait it out
ARGS = ["--timeout", str(WAIT), "--phase-timeout", "bandwidth_budget=2",
        "--phase-timeout", "exit_barrier=40", "--phase-timeout", "settle=2",
        "--phase-timeout", "collective=8", "--phase-timeout", f"isolate_group={GROUP_S}",
        "--isolate", "auto"]  # fmt: skip
DEADLINE = 400.0


def start(lab, port):
    master = lab.hosts[0].address
    args = ["--master", master, "--nodes", str(NODES), "--port", str(port), *ARGS]
    return [lab.start(host, args, out=lab_out(lab, host)) for host in lab.hosts]


def elapsed(runs):
    return max(run.ended for run in runs) - min(run.started for run in runs)


def isolate_rows(report):
    return [p for p in report["phases"] if p["phase"] == "isolate" and p["rank"] is None]


def mtu_trap(lab, trapped):
    """Jumbo frames on every node but the master and on every switch port but ``trapped``'s."""
    for i, host in enumerate(lab.hosts):
        if i == 0:
            continue
        host.set_mtu(9000)
        if host is not trapped:
            subprocess.run(["ip", "link", "set", f"{lab.tag}h{i}", "mtu", "9000"], check=True)


def test_a_slow_master_a_blocked_pair_and_an_mtu_trap_are_named_apart(lab):
    lab = lab(NODES)
    healthy = start(lab, 29420)
    lab.wait(healthy, DEADLINE)
    assert [run.rc for run in healthy] == [0] * NODES, healthy[0].stderr[-3000:]
    report = healthy[0].cluster_report()
    assert report.get("isolation") is None  # auto: the all-node run passed, no round ran
    rows = isolate_rows(report)
    assert len(rows) == NODES
    assert {(r["status"], r["detail"]) for r in rows} == {
        ("skipped", "the all-node run passed on every node")
    }

    master, blocked, trapped = lab.hosts[0], (lab.hosts[1], lab.hosts[4]), lab.hosts[5]
    master.exec("tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "100mbit",
                "burst", "256kb", "latency", "400ms")  # fmt: skip
    a, b = blocked
    a.exec("iptables", "-A", "INPUT", "-s", b.address, "-j", "DROP")
    b.exec("iptables", "-A", "INPUT", "-s", a.address, "-j", "DROP")
    mtu_trap(lab, trapped)
    faulty = start(lab, 29430)
    lab.wait(faulty, DEADLINE)
    print(f"healthy check {elapsed(healthy):.1f} s, with isolation {elapsed(faulty):.1f} s: "
          f"{elapsed(faulty) / elapsed(healthy):.1f}x")  # fmt: skip
    assert [run.rc for run in faulty] == [1] * NODES, faulty[0].stderr[-3000:]
    report = faulty[0].cluster_report()
    isolation = report["isolation"]
    states = {v["node"]: v["state"] for v in isolation["nodes"] if v["state"] != "ok"}
    assert states == {"node0": "slow", "node5": "faulty"}, isolation["nodes"]
    assert [(v["nodes"], v["state"]) for v in isolation["links"]] == [
        (["node1", "node4"], "faulty")
    ]
    assert isolation["undecided"] == [] and isolation["network_wide"] is None

    by_id = {f["id"]: f for f in report["findings"] if f["id"].startswith("isolation.")}
    slow = by_id["isolation.node-slow"]
    assert slow["node"] == "node0" and slow["title"].startswith("node node0 is slow: eth0 carries ")
    assert "ethtool eth0 | grep" in slow["fix"]
    assert "check its link speed and cable" in slow["title"] and "tc qdisc show" in slow["fix"]
    # every round named in the evidence holds the node, and the numbers are there
    assert any(line.startswith("round 1: node0 + ") and "MB/s at 8 MiB" in line
               for line in slow["evidence"])  # fmt: skip
    trap = by_id["isolation.node-faulty"]
    assert trap["node"] == "node5" and trap["title"].startswith("node node5 fails with ")
    assert trap["evidence"][0].endswith("partners that passed with others")
    link = by_id["isolation.link-faulty"]
    assert link["title"] == (
        "the link between node1 and node4 fails, while each passes with other partners"
    )
    # the matrix the views draw: the blocked pair failed, the master's pairs are slow
    matrix = isolation["matrix"]
    at = {n: i for i, n in enumerate(matrix["nodes"])}
    assert matrix["cells"][at["node1"]][at["node4"]] in ("error", "timeout")
    # the lead of the report is one of the three, with its fix
    assert (
        report["headline"]["line"]
        .split(": ", 1)[1]
        .startswith(("the link between node1 and node4", "node node0 is slow", "node node5 fails"))
    )
    # every node waited for the rounds and exited with the cluster's verdict
    for run in faulty:
        assert [r["status"] for r in isolate_rows(run.node_report())] == ["ok"]


def test_auto_runs_the_rounds_when_the_all_node_busbw_ran_at_one_node_s_wire(lab):
    """Under gloo no link rating holds the busbw (it stays far below a NIC's): auto holds it to
    the TCP probes, over the default 10 s sweep, whose large sizes reach what gloo carries.
    Healthy, no round runs. node3 rate-limited to 100 Mbit/s: the all-node run passes, its busbw
    runs at node3's probe while the others' carry far more, so auto runs the rounds and they
    name node3 slow."""
    lab = lab(NODES)
    budget = ARGS.index("bandwidth_budget=2")
    args = ARGS[: budget - 1] + ARGS[budget + 1 :]  # the default sweep
    master = lab.hosts[0].address

    def run_all(port):
        runs = [lab.start(host, ["--master", master, "--nodes", str(NODES), "--port", str(port),
                                 *args], out=lab_out(lab, host))
                for host in lab.hosts]  # fmt: skip
        lab.wait(runs, DEADLINE)
        return runs

    healthy = run_all(29450)
    assert [run.rc for run in healthy] == [0] * NODES, healthy[0].stderr[-3000:]
    report = healthy[0].cluster_report()
    assert report.get("isolation") is None, isolate_rows(report)
    lab.hosts[3].exec("tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "100mbit",
                      "burst", "256kb", "latency", "400ms")  # fmt: skip
    limited = run_all(29460)
    assert [run.rc for run in limited] == [1] * NODES, limited[0].stderr[-3000:]
    isolation = limited[0].cluster_report()["isolation"]
    assert "ran at node3's TCP rate to the master" in isolation["why"], isolation["why"]
    states = {v["node"]: v["state"] for v in isolation["nodes"] if v["state"] != "ok"}
    assert states == {"node3": "slow"}, isolation["nodes"]
