"""Scale: 8 namespace nodes x 2 worker processes (16 ranks) with the real `nccldoctor check`.

Healthy, and with one rank of one node hanging in a collective. Each asserts the verdict, the exit
codes, every node's own report, a cluster report of 16 ranks on 8 nodes, and the deadlines. The
bandwidth sweep and the TCP probe are cut short with the CLI's own budgets: at 16 ranks on two
shared cores what matters is that every rank gets through, not how fast the veths are.
"""

from __future__ import annotations

import json

import pytest

from tests.cluster.test_check_netns import (
    FAST,
    PORT,
    STALL_S,
    assert_reports,
    lab_out,
    start_all,
    wait_all_ok,
)

pytestmark = [pytest.mark.netns, pytest.mark.slow]

NODES, PROCS = 8, 2
# 24 processes importing torch on two shared cores take many times what real nodes do: init gets
# room (it costs a healthy run nothing). Each node's TCP turn is FAST's short one.
LEAN = ["--procs-per-node", str(PROCS), "--phase-timeout", "init=45"]
# 16 gloo ranks on two cores need 10-20 s for the correctness phase's 40 allreduces, which share
# one collective deadline (--timeout 20): room for them in the healthy run.
ROOMY_COLLECTIVES = ["--phase-timeout", "collective=45"]
HEALTHY_DEADLINE = 180.0
HANG_NODE, HANG_RANK = 5, 11  # node ranks are pinned below, so node5 runs ranks 10 and 11


def assert_cluster_shape(cluster):
    assert cluster["cluster"]["world_size"] == NODES * PROCS
    nodes = cluster["cluster"]["nodes"]
    assert sorted(n["name"] for n in nodes) == sorted(f"node{i}" for i in range(NODES))
    assert all(len(n["ranks"]) == PROCS and n["report_path"] for n in nodes)
    assert sorted(r["rank"] for r in cluster["ranks"]) == list(range(NODES * PROCS))
    assert cluster["run"]["nodes_reported"] == NODES
    assert cluster["cluster"]["missing_nodes"] == []


def test_healthy_eight_nodes_sixteen_ranks(lab):
    lab = lab(NODES)
    runs = start_all(lab, NODES, extra=[*LEAN, *ROOMY_COLLECTIVES])
    wait_all_ok(lab, runs, HEALTHY_DEADLINE)
    cluster = runs[0].cluster_report()
    assert cluster["verdict"] in ("healthy", "warnings")  # no GPU on a CPU machine: a warning
    assert cluster["exit_code"] == 0 and cluster["completed"] is True
    assert cluster["hang"] is None
    assert_cluster_shape(cluster)
    assert {r["state"] for r in cluster["ranks"]} == {"ok"}
    assert {n["node"] for n in cluster["ranks"]} == {f"node{i}" for i in range(NODES)}
    assert set(cluster["bandwidth"]["tcp_wire_Gbitps"]) == {f"node{i}" for i in range(1, NODES)}
    assert cluster["bandwidth"]["rows"], "the bandwidth sweep left no table"
    assert cluster["mnist"]["params_identical"] is True
    assert "Check of 16 ranks on node" in runs[0].stdout  # the headline (nodes in join order)


def test_one_node_hangs_in_barrier(lab):
    """Rank 11 on node5 never enters the barrier (the earliest collective: the shortest run).

    The barrier's budget and the collective timeout are both STALL_S, so the ranks that wait
    get gloo's timeout before their own deadline: only rank 11 is stuck, as in life."""
    lab = lab(NODES)
    fault = {lab.hosts[HANG_NODE].name: {"NCCLDOCTOR_FAULT": f"hang:barrier:rank={HANG_RANK}"}}
    stall = ["--phase-timeout", f"barrier={STALL_S}", "--phase-timeout", f"collective={STALL_S}"]
    runs = [
        lab.start(host, [*args, *stall], out=lab_out(lab, host), env=fault.get(host.name))
        for host, args in zip(lab.hosts, pinned_args(lab), strict=True)
    ]
    lab.wait(runs, HEALTHY_DEADLINE)
    assert [run.rc for run in runs] == [1] * NODES, runs[0].stderr[-3000:]
    assert_reports(runs)
    cluster = runs[0].cluster_report()
    assert cluster["exit_code"] == 1 and cluster["verdict"] == "problems"
    assert_cluster_shape(cluster)
    hang = cluster["hang"]
    assert hang["phase"] == "barrier"
    assert hang["stuck"] == [{"node": "node5", "rank": HANG_RANK, "phase": "barrier",
                              "last_nccl_line": None}]  # fmt: skip
    assert hang["verdict"].startswith(f"rank {HANG_RANK} on node node5 never finished barrier; ")
    assert len(hang["verdict"]) < 1000  # the 15 others grouped, not one sentence each
    first = next(f for f in cluster["findings"] if f["id"].startswith("run.rank-"))
    assert (first["node"], first["rank"], first["severity"], first["category"]) == (
        "node5", HANG_RANK, "fail", "collective_timeout_hang"
    )  # fmt: skip
    assert all(r["state"] != "ok" for r in cluster["ranks"])  # nobody got past the barrier
    # From the hang to the cluster report: the barrier's budget, the worker's own grace, the
    # reports of 8 nodes; nothing that adds up per node.
    node_dir = lab_out(lab, lab.hosts[HANG_NODE]) / "node5" / "latest"
    events = node_dir / f"rank{HANG_RANK}" / "events.jsonl"
    hang_start = next(
        e["t"]
        for e in map(json.loads, events.read_text().splitlines())
        if e["phase"] == "barrier" and e["status"] == "start"
    )
    written = (runs[0].run_dir / "check-cluster.json").stat().st_mtime
    assert written - hang_start < STALL_S + 4 + 15


def pinned_args(lab):
    master = lab.hosts[0].address
    common = ["--master", master, "--nodes", str(NODES), "--port", PORT, *FAST, *LEAN]
    return [[*common, "--node-rank", str(i)] for i in range(NODES)]
