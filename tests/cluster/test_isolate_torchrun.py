"""`torchrun -m nccldoctor check --isolate always` on six network-namespace nodes, one node's link
rate-limited (``tc … tbf``): torchrun's variables say the master, the node count and the ranks;
the master's agent schedules the rounds, every node's agent takes its place in them, the cluster
report names the slow node, and every node exits with the cluster's verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from nccldoctor.lab.start import check_env
from tests.cluster.test_check_netns import WAIT

pytestmark = [pytest.mark.netns, pytest.mark.slow]

NODES = 6
SLOW = 3
TORCHRUN_PORT = "29500"  # torchrun's own store; the check keeps --port
ARGS = ["--port", "29440", "--timeout", str(WAIT), "--phase-timeout", "bandwidth_budget=2",
        "--phase-timeout", "exit_barrier=40", "--phase-timeout", "settle=2",
        "--phase-timeout", "isolate_group=6", "--isolate", "always"]  # fmt: skip
DEADLINE = 300.0


def test_torchrun_on_six_nodes_names_the_rate_limited_node(lab, tmp_path):
    lab = lab(NODES)
    slow = lab.hosts[SLOW]
    slow.exec("tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "100mbit",
              "burst", "256kb", "latency", "400ms")  # fmt: skip
    master, out = lab.hosts[0].address, tmp_path / "out"
    procs = []
    for i, host in enumerate(lab.hosts):
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(NODES),
                "--nproc-per-node", "1", "--node-rank", str(i), "--master-addr", master,
                "--master-port", TORCHRUN_PORT, "-m", "nccldoctor", "check", "--out", str(out),
                *ARGS]  # fmt: skip
        env = check_env(os.environ, "", {"GLOO_SOCKET_IFNAME": "eth0"})
        del env["NCCLDOCTOR_NODE_NAME"]  # each process's hostname is its node's
        procs.append(lab.net.popen(host.lab_host, argv, env, hostname=host.name, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT))  # fmt: skip
    started, outputs = time.monotonic(), []
    for proc in procs:
        try:
            left = max(1, started + DEADLINE - time.monotonic())
            outputs.append(proc.communicate(timeout=left)[0])
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            outputs.append(proc.communicate()[0])
    print(f"torchrun, {NODES} nodes, --isolate always: {time.monotonic() - started:.1f} s")
    # torchrun fails every node whose process exits 1: a culprit found, on every node
    assert [p.returncode for p in procs] == [1] * NODES, outputs[0][-3000:]
    reports = {p.stem: json.loads(p.read_text()) for p in out.glob("*/*/check-*.json")}
    assert sorted(reports) == ["check-cluster"] + [f"check-node{i}" for i in range(NODES)]
    isolation = reports["check-cluster"]["isolation"]
    assert {v["node"]: v["state"] for v in isolation["nodes"] if v["state"] != "ok"} == {
        f"node{SLOW}": "slow"
    }
    (finding,) = [f for f in reports["check-cluster"]["findings"]
                  if f["id"] == "isolation.node-slow"]  # fmt: skip
    assert finding["node"] == f"node{SLOW}" and "check its link speed" in finding["title"]
    # every node took its place in the rounds
    for i in range(NODES):
        rows = [p for p in reports[f"check-node{i}"]["phases"] if p["phase"] == "isolate"]
        assert [r["status"] for r in rows if r["rank"] is None] == ["ok"], rows
    # every node's JSON says the code its process exited with, and that the cluster decided it
    for i, proc in enumerate(procs):
        node = reports[f"check-node{i}"]
        assert (node["exit_code"], node["exit_decided_by"]) == (proc.returncode, "cluster")
    # the master's node prints the cluster's verdict; the others print their own report (their
    # part went well), say under it that the cluster's verdict differs, and exit with its code
    assert f"node node{SLOW} is slow" in outputs[0], outputs[0][-3000:]
    quiet = [i for i in range(1, NODES) if reports[f"check-node{i}"]["verdict"] != "problems"]
    assert quiet  # the innocent nodes' own reports found nothing of their own
    said = "✗ The cluster's verdict: problems found (exit 1); this node's own report"
    for i in quiet:
        assert said in " ".join(outputs[i].split()), outputs[i][-3000:]
