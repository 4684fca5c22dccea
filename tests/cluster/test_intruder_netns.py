"""A stranger on the lab's network attacks a running check (tests/cluster/intruder.py): the
real nodes finish healthy and the master's cluster report names the intruder
(docs/design.md#gate)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.cluster.netns import REPO
from tests.cluster.test_check_netns import FAST, HEALTHY_DEADLINE, PORT, lab_out

pytestmark = [pytest.mark.netns, pytest.mark.slow]

# The forged entry is written before the second node starts: the master's join window meets
# it first, whatever the machine's load.
ARGS = ["--nodes", "2", "--port", PORT, *FAST, "--phase-timeout", "rendezvous=90"]


def start_intruder(lab, host, *args: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "tests.cluster.intruder", *args]
    return lab.net.popen(host.lab_host, argv, os.environ, cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)  # fmt: skip


def stop(proc: subprocess.Popen) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.communicate()


def assert_healthy_ranks(cluster: dict) -> None:
    assert cluster["completed"] is True
    assert [r["state"] for r in cluster["ranks"]] == ["ok", "ok"]
    assert {n["name"] for n in cluster["cluster"]["nodes"]} == {"node0", "node1"}
    assert cluster["cluster"]["world_size"] == 2 and cluster["mnist"]["params_identical"] is True


def test_a_forged_node_and_bad_results_leave_the_real_nodes_healthy(lab):
    """No token: the master trusts its network, so the intruder gets the run id; its entry,
    nested 100 deep, is left out of the world, and its three results in node1's name do not
    hide node1's own."""
    lab = lab(3)
    node0, node1, stranger = lab.hosts
    args = ["--master", node0.address, *ARGS]
    intruder = start_intruder(lab, stranger, "forge", node0.address, PORT)
    try:
        runs = [lab.start(node0, args, out=lab_out(lab, node0))]
        assert intruder.stdout.readline().strip() == "entry", stop(intruder)
        runs.append(lab.start(node1, args, out=lab_out(lab, node1)))
        lab.wait(runs, HEALTHY_DEADLINE)
    finally:
        out, err = stop(intruder)
    assert out.split() == ["results"], err[-2000:]  # after "entry", read above
    cluster = runs[0].cluster_report()
    assert_healthy_ranks(cluster)
    assert cluster["run"]["nodes_reported"] == 2  # node1's own result, merged
    rejected = [(f["node"], f["title"]) for f in cluster["findings"]
                if f["id"] == "run.store-rejected"]  # fmt: skip
    assert rejected[0] == ("intruder", "a node entry written as intruder was left out of the "
                                       "world: nested more than 48 deep")  # fmt: skip
    assert [node for node, _ in rejected[1:]] == ["node1"] * 3
    assert "nested too deep to parse" in rejected[1][1]
    assert "Exceeds the limit (4300 digits)" in rejected[2][1]
    assert "findings is a string, not array" in rejected[3][1]
    knocked = [f for f in cluster["findings"] if f["id"] == "run.node-never-joined"]
    assert [(f["node"], stranger.address in f["title"]) for f in knocked] == [("intruder", True)]
    # the verdict of every node is the cluster's: healthy ranks, problems found
    assert [run.rc for run in runs] == [1, 1], [run.stderr[-2000:] for run in runs]


def test_a_flood_of_hellos_and_long_lines_leaves_the_real_nodes_healthy(lab):
    """With a token: thousands of refused hellos, lines of 64 MiB, clients sending a byte a
    second and probes of 600 s while the check runs; the real nodes get through, and the
    report has a few refused knocks and one finding for the rest."""
    lab = lab(3)
    node0, node1, stranger = lab.hosts
    args = ["--master", node0.address, *ARGS]
    token = {"NCCLDOCTOR_TOKEN": "tok-Q4r8s"}
    flood = start_intruder(lab, stranger, "flood", node0.address, str(int(PORT) + 1), "25")
    try:
        runs = [lab.start(host, args, out=lab_out(lab, host), env=token) for host in (node0, node1)]
        lab.wait(runs, HEALTHY_DEADLINE)
    finally:
        out, err = stop(flood)
    sent = json.loads(out.splitlines()[-1])
    assert sent["hellos"] >= 500 and sent["long"] == 2 and sent["slow"] == 6, (sent, err[-2000:])
    cluster = runs[0].cluster_report()
    assert_healthy_ranks(cluster)
    assert cluster["bandwidth"]["tcp_wire_Gbitps"]["node1"] > 0  # its turn at the gate came
    (flood_finding,) = [f for f in cluster["findings"] if f["id"] == "run.hello-flood"]
    assert flood_finding["evidence"] == [f"from {stranger.address}"]
    refused = [f for f in cluster["findings"] if f["id"] == "run.node-refused"]
    assert 1 <= len(refused) <= 16
    # the hellos, and the probes that gave no name
    assert {(f["node"], stranger.address in f["title"]) for f in refused} <= {
        ("intruder", True),
        ("?", True),
    }
    assert len(cluster["findings"]) < 60
    assert [run.rc for run in runs] == [1, 1], [run.stderr[-2000:] for run in runs]
