"""Host-level faults, reproduced for real in the netns hosts: a small /dev/shm, a hostname on
127.0.1.1, NCCL_* env that differs between nodes, and a master that dies after rendezvous.

Each scenario asserts the category, the evidence, the exit codes, the deadline, and the reports on
every surviving node.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.cluster.netns import REPO
from tests.cluster.test_check_netns import (
    FAST,
    HEALTHY_DEADLINE,
    PORT,
    TWO_RANK_STALLED_INIT,
    WAIT,
    assert_reports,
    lab_out,
    start_all,
    wait_all_ok,
)

pytestmark = [pytest.mark.netns, pytest.mark.slow]


def found(report, finding_id, node=None):
    return [f for f in report["findings"] if f["id"] == finding_id and node in (None, f["node"])]


def test_small_dev_shm_and_nccl_env_that_differs_on_one_node(lab):
    """Two warnings of one healthy run, each judged on its own: node1 runs on a /dev/shm of
    64 MiB with two local ranks, and with NCCL variables the master does not have."""
    lab = lab(2)
    master = lab.hosts[0].address
    node1_env = {"NCCL_ALGO": "Tree", "NCCL_IB_DISABLE": "1"}
    runs = []
    for host, shm, env in zip(lab.hosts, (None, "64m"), (None, node1_env), strict=True):
        args = ["--master", master, "--nodes", "2", "--port", PORT, "--procs-per-node", "2", *FAST]
        runs.append(lab.start(host, args, out=lab_out(lab, host), env=env, shm_size=shm))
    wait_all_ok(lab, runs)
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
    assert not found(node1, "cluster.nccl-env-differs")  # the master compares
    cluster = runs[0].cluster_report()
    assert cluster["verdict"] == "warnings" and cluster["exit_code"] == 0
    assert [r["state"] for r in cluster["ranks"]] == ["ok"] * 4  # gloo needs no /dev/shm
    assert found(cluster, "container.shm-small", "node1")
    (differs,) = found(cluster, "cluster.nccl-env-differs")
    assert (differs["severity"], differs["category"]) == ("warn", "env_config")
    assert differs["title"] == "2 NCCL variable(s) differ between nodes"
    assert "NCCL_ALGO: node0=(unset), node1=Tree" in differs["evidence"]
    assert "NCCL_IB_DISABLE: node0=(unset), node1=1" in differs["evidence"]


def test_master_name_on_127_0_1_1(lab):
    lab = lab(2)
    node0, node1 = lab.hosts
    name = f"{lab.tag}-master"
    node0.write_etc("hosts", f"127.0.0.1 localhost\n127.0.1.1 {name}\n")  # Debian's hostname line
    node1.write_etc("hosts", f"127.0.0.1 localhost\n{node0.address} {name}\n")
    runs = []
    for host, hostname in ((node0, name), (node1, None)):
        # init stalls: the master's rank waits for a peer that was sent to loopback
        args = ["--master", name, "--nodes", "2", "--port", PORT, *FAST, *TWO_RANK_STALLED_INIT]
        runs.append(lab.start(host, args, out=lab_out(lab, host), hostname=hostname))
    lab.wait(runs, HEALTHY_DEADLINE + WAIT)
    assert [run.rc for run in runs] == [1, 1], runs[0].stderr[-3000:]
    assert all(run.elapsed < HEALTHY_DEADLINE for run in runs)
    assert_reports(runs)
    master = runs[0].node_report()
    assert master["run"]["reach"]["addresses"] == ["127.0.1.1"]
    assert master["run"]["reach"]["hosts_lines"] == [f"127.0.1.1 {name}"]
    # one failure, one finding: the master's name on loopback (the hostname's line is the same)
    (loop,) = found(master, "master.loopback")
    assert (loop["severity"], loop["node"]) == ("fail", "node0")
    assert loop["title"].startswith(f"the master {name} resolves to 127.0.1.1 (loopback)")
    assert f"{name} -> 127.0.1.1 on this node (/etc/hosts: 127.0.1.1 {name})" in loop["evidence"]
    assert f"replace '127.0.1.1 {name}' with:\n{node0.address} {name}" in loop["fix"]
    assert f"--master {node0.address}" in loop["fix"]
    assert not found(master, "host.hostname-loopback")
    # what really goes wrong: node1 resolves the name right, joins, and its rank is sent to
    # the master's loopback address, which on node1 is its own
    node1 = runs[1].node_report()
    assert node1["run"]["reach"]["addresses"] == [node0.address]
    (failed,) = found(node1, "run.rank-failed")
    assert "remote=[127.0.0.1]" in failed["title"] and failed["node"] == "node1"
    cluster = runs[0].cluster_report()
    assert found(cluster, "master.loopback", "node0")
    (differs,) = found(cluster, "cluster.master-address-differs")
    assert differs["evidence"] == ["127.0.1.1: node0", f"{node0.address}: node1"]
    # node1's rank, sent to loopback, fails first; the master's rank waited for it, then stopped
    cause, _, consequence = cluster["hang"]["verdict"].partition("; ")
    assert cause.startswith("rank 1 on node node1 failed in init_process_group: ")
    assert "remote=[127.0.0.1]" in cause
    assert consequence.startswith("rank 0 on node node0 failed in init_process_group: stopped ")


def test_master_dies_after_rendezvous(lab):
    lab = lab(3)
    # rank 0 holds the DDP step open, so the others wait on it when the master dies
    runs = start_all(lab, 3, env_for={"node0": {"NCCLDOCTOR_FAULT": "hang:ddp:rank=0"}})
    wait_for_phase(lab_out(lab, lab.hosts[1]) / "node1", "ddp", runs)  # node ranks come by arrival
    lab.kill_host(lab.hosts[0])
    killed_at = time.monotonic()
    survivors = runs[1:]
    lab.wait(survivors, WAIT + 60)
    master, address = lab.hosts[0].name, lab.hosts[0].address
    for run in survivors:
        assert run.rc == 1, run.stderr[-3000:]
        assert run.ended - killed_at < WAIT  # a closed peer is seen at once; no barrier waits
        node = run.node_report()
        assert node["kind"] == "check" and node["timeouts"]["reach"] == WAIT
        (lost,) = found(node, "run.master-lost")
        assert (lost["severity"], lost["category"], lost["node"]) == ("fail", "remote_peer_closed",
                                                                      master)  # fmt: skip
        assert lost["title"].startswith(f"the master {master} ({address}) was lost during node "
                                        f"{run.host.name}'s workers phase")  # fmt: skip
        assert lost["evidence"][0] == f"store: connect to {address}:{PORT}: Connection refused"
        peer = lost["evidence"][1]  # the rank's own error, at the master's address
        assert f"[{address}]" in peer and ("closed by peer" in peer or "reset by peer" in peer)
        assert "nccldoctor report merge" in lost["fix"]
        assert node["hang"]["verdict"].startswith(f"the master {master} (node rank 0) was lost")
        assert [f["severity"] for f in found(node, "run.rank-failed")] == ["warn"]  # consequence
    paths = [str(run.run_dir / f"check-{run.host.name}.json") for run in survivors]
    merged = subprocess.run(
        [sys.executable, "-m", "nccldoctor", "report", "merge", *paths, "--json"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert merged.returncode == 3, merged.stderr
    doc = json.loads(merged.stdout)
    assert doc["verdict"] == "incomplete" and doc["completed"] is False
    assert doc["cluster"]["missing_nodes"] == [master]
    assert {n["node"] for n in doc["nodes"]} == {"node1", "node2"}
    assert sorted(r["rank"] for r in doc["ranks"]) == [1, 2]
    note = doc["findings"][-1]
    assert note["id"] == "report.merged" and note["title"].endswith(f"; no report from {master}")
    assert {f["title"].split("'s")[0] for f in found(doc, "run.master-lost")} == {
        f"the master {master} ({address}) was lost during node node1",
        f"the master {master} ({address}) was lost during node node2",
    }


def wait_for_phase(node_dir, phase, runs):
    """Until a rank of the node in ``node_dir`` starts ``phase`` in its newest run (every run
    still going)."""
    deadline = time.monotonic() + HEALTHY_DEADLINE
    started = f'"phase": "{phase}", "status": "start"'
    while time.monotonic() < deadline and all(run.proc.poll() is None for run in runs):
        if any(started in e.read_text() for e in node_dir.glob("latest/rank*/events.jsonl")):
            return
        time.sleep(0.3)
    ended = [run for run in runs if run.proc.poll() is not None]
    detail = ended[0].proc.communicate()[1][-3000:] if ended else "all still running"
    pytest.fail(f"{node_dir.name} never reached {phase}: {detail}")
