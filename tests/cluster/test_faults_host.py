"""Host-level faults, reproduced for real in the netns hosts: a small /dev/shm, a hostname on
127.0.1.1, NCCL_* env that differs between nodes, and a master that dies after rendezvous.

Each scenario asserts the category, the evidence, the exit codes, the deadline, and the reports on
every surviving node.
"""

from __future__ import annotations

import pytest

from tests.cluster.test_check_netns import (
    FAST,
    HEALTHY_DEADLINE,
    PORT,
    WAIT,
    assert_reports,
    lab_out,
    start_all,
)

pytestmark = [pytest.mark.netns, pytest.mark.slow]


def found(report, finding_id, node=None):
    return [f for f in report["findings"] if f["id"] == finding_id and node in (None, f["node"])]


def test_small_dev_shm_with_two_local_ranks(lab):
    lab = lab(2)
    master = lab.hosts[0].address
    runs = []
    for host, shm in zip(lab.hosts, (None, "64m"), strict=True):
        args = ["--master", master, "--nodes", "2", "--port", PORT, "--procs-per-node", "2", *FAST]
        runs.append(lab.start(host, args, out=lab_out(lab, host), shm_size=shm))
    lab.wait(runs, HEALTHY_DEADLINE)
    assert [run.rc for run in runs] == [0, 0], runs[1].stderr[-3000:]
    assert all(run.elapsed < HEALTHY_DEADLINE for run in runs)
    assert_reports(runs)
    node1 = runs[1].node_report()
    (shm,) = found(node1, "container.shm-small")
    assert (shm["severity"], shm["category"], shm["node"]) == ("warn", "shm_docker", "node1")
    assert shm["title"] == "/dev/shm is only 64 MiB for 2 local ranks"
    assert "/dev/shm: 64 MiB (statvfs)" in shm["evidence"]
    assert any("64 MiB holds 6 of them" in e for e in shm["evidence"])
    assert any(e.startswith("no GPU here: the 2 local ranks run gloo") for e in shm["evidence"])
    assert "Error\nwhile creating shared memory segment" in shm["fix"]
    assert "--shm-size=1g" in shm["fix"]
    assert not found(runs[0].node_report(), "container.shm-small")  # the machine's own is large
    cluster = runs[0].cluster_report()
    assert cluster["verdict"] == "warnings" and cluster["exit_code"] == 0
    assert [r["state"] for r in cluster["ranks"]] == ["ok"] * 4  # gloo needs no /dev/shm
    assert found(cluster, "container.shm-small", "node1")


def test_nccl_env_differs_between_nodes(lab):
    lab = lab(2)
    runs = start_all(lab, 2, env_for={"node1": {"NCCL_ALGO": "Tree", "NCCL_IB_DISABLE": "1"}})
    lab.wait(runs, HEALTHY_DEADLINE)
    assert [run.rc for run in runs] == [0, 0], runs[1].stderr[-3000:]
    assert all(run.elapsed < HEALTHY_DEADLINE for run in runs)
    assert_reports(runs)
    cluster = runs[0].cluster_report()
    (differs,) = found(cluster, "cluster.nccl-env-differs")
    assert (differs["severity"], differs["category"]) == ("warn", "env_config")
    assert differs["title"] == "2 NCCL variable(s) differ between nodes"
    assert "NCCL_ALGO: node0=(unset), node1=Tree" in differs["evidence"]
    assert "NCCL_IB_DISABLE: node0=(unset), node1=1" in differs["evidence"]
    assert not found(runs[1].node_report(), "cluster.nccl-env-differs")  # the master compares


def test_master_name_on_127_0_1_1(lab):
    lab = lab(2)
    node0, node1 = lab.hosts
    name = f"{lab.tag}-master"
    node0.write_etc("hosts", f"127.0.0.1 localhost\n127.0.1.1 {name}\n")  # Debian's hostname line
    node1.write_etc("hosts", f"127.0.0.1 localhost\n{node0.address} {name}\n")
    runs = []
    for host, hostname in ((node0, name), (node1, None)):
        args = ["--master", name, "--nodes", "2", "--port", PORT, *FAST]
        runs.append(lab.start(host, args, out=lab_out(lab, host), hostname=hostname))
    lab.wait(runs, HEALTHY_DEADLINE + WAIT)
    assert [run.rc for run in runs] == [1, 1], runs[0].stderr[-3000:]
    assert all(run.elapsed < HEALTHY_DEADLINE for run in runs)
    assert_reports(runs)
    master = runs[0].node_report()
    assert master["run"]["reach"]["addresses"] == ["127.0.1.1"]
    assert master["run"]["reach"]["hosts_lines"] == [f"127.0.1.1 {name}"]
    (loop,) = found(master, "run.master-name-loopback")
    assert (loop["severity"], loop["category"], loop["node"]) == ("fail", "interface_selection",
                                                                  "node0")  # fmt: skip
    assert f"{name} -> 127.0.1.1 on node node0 (/etc/hosts: 127.0.1.1 {name})" in loop["evidence"]
    assert f"replace '127.0.1.1 {name}' with:\n{node0.address} {name}" in loop["fix"]
    assert f"--master {node0.address}" in loop["fix"]
    # what really goes wrong: node1 resolves the name right, joins, and its rank is sent to
    # the master's loopback address, which on node1 is its own
    node1 = runs[1].node_report()
    assert node1["run"]["reach"]["addresses"] == [node0.address]
    (failed,) = found(node1, "run.rank-failed")
    assert "remote=[127.0.0.1]" in failed["title"] and failed["node"] == "node1"
    cluster = runs[0].cluster_report()
    assert found(cluster, "run.master-name-loopback", "node0")
    (differs,) = found(cluster, "cluster.master-address-differs")
    assert differs["evidence"] == ["127.0.1.1: node0", f"{node0.address}: node1"]
    verdict = cluster["hang"]["verdict"]  # the master's rank waits for a peer sent to loopback
    assert verdict.startswith("rank 0 on node node0 ") and "remote=[127.0.0.1]" in verdict
