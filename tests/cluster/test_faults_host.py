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
