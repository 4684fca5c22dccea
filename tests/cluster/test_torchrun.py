"""`torchrun --nproc-per-node 2 -m nccldoctor check` on two network-namespace nodes: each of
torchrun's processes is one rank of the check, local rank 0 of each node its node agent too.
Static rendezvous (``--master-addr``) and c10d (``--rdzv-backend c10d``), healthy and with a
rank that hangs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from nccldoctor.lab.start import check_env
from tests.cluster.test_check_netns import EXPIRE_S, FAST, HEALTHY_DEADLINE, PORT, WAIT

pytestmark = [pytest.mark.netns, pytest.mark.slow]

TORCHRUN_PORT = "29500"  # torchrun's own store; the check keeps --port


@pytest.fixture
def two_nodes(lab):
    lab = lab(2)
    hosts = "".join(f"{h.address} {h.name}\n" for h in lab.hosts) + "127.0.0.1 localhost\n"
    for host in lab.hosts:
        host.write_etc("hosts", hosts)  # c10d names its master by hostname
    return lab


def torchrun(lab, tmp_path, rendezvous: str, fault: str | None = None, stall=()):
    """torchrun on both nodes at once: (exit status per node, output per node, reports)."""
    master = lab.hosts[0].address
    out = tmp_path / "out"
    procs = []
    for i, host in enumerate(lab.hosts):
        if rendezvous == "static":
            how = ["--node-rank", str(i), "--master-addr", master, "--master-port", TORCHRUN_PORT]
        else:
            how = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"{master}:{TORCHRUN_PORT}",
                   "--rdzv-id", "lab"]  # fmt: skip
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                "--nproc-per-node", "2", *how, "-m", "nccldoctor", "check", "--out", str(out),
                "--port", PORT, *FAST, *stall]  # fmt: skip
        extra = {"GLOO_SOCKET_IFNAME": "eth0", **({"NCCLDOCTOR_FAULT": fault} if fault else {})}
        env = check_env(os.environ, "", extra)
        del env["NCCLDOCTOR_NODE_NAME"]  # each process's hostname is its node's
        procs.append(lab.net.popen(host.lab_host, argv, env, hostname=host.name, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT))  # fmt: skip
    deadline = time.monotonic() + HEALTHY_DEADLINE + WAIT
    outputs = []
    for proc in procs:
        try:
            outputs.append(proc.communicate(timeout=max(1, deadline - time.monotonic()))[0])
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            outputs.append(proc.communicate()[0])
    found = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*/*/check-*.json"))}
    return [p.returncode for p in procs], outputs, found


def rank_states(report: dict) -> list[tuple]:
    return [(r["rank"], r["node"], r["local_rank"], r["state"]) for r in report["ranks"]]


@pytest.mark.parametrize("rendezvous", ["static", "c10d"])
def test_torchrun_two_procs_per_node_healthy(two_nodes, tmp_path, rendezvous):
    started = time.monotonic()
    codes, outputs, found = torchrun(two_nodes, tmp_path, rendezvous)
    assert codes == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    assert sorted(found) == ["check-cluster", "check-node0", "check-node1"]
    states = rank_states(found["check-cluster"])
    assert sorted(r[3] for r in states) == ["ok"] * 4
    # torchrun's RANK on every process, LOCAL_RANK 0 and 1 on each node
    assert sorted((r[1], r[2]) for r in states) == [("node0", 0), ("node0", 1), ("node1", 0),
                                                    ("node1", 1)]  # fmt: skip
    assert [output.count("Report: ") for output in outputs] == [2, 2]
    assert time.monotonic() - started < HEALTHY_DEADLINE


def test_torchrun_with_a_rank_that_hangs(two_nodes, tmp_path):
    # One rendezvous backend: the ranks and nodes torchrun makes of either are the healthy
    # test's; from there the hang is the check's own, and static pins rank 3 to node1. The
    # others' DDP step waits for rank 3 from its first broadcast on, in vain: it ends at
    # EXPIRE_S, gloo's timeout first as before.
    started = time.monotonic()
    stall = ["--phase-timeout", f"ddp={EXPIRE_S}", "--phase-timeout", f"collective={EXPIRE_S}"]
    codes, outputs, found = torchrun(two_nodes, tmp_path, "static", "hang:ddp:rank=3", stall)
    cluster = found["check-cluster"]
    assert cluster["exit_code"] == 1, outputs[0][-3000:]
    assert codes == [1, 1]  # torchrun fails the node whose processes exit 1, both here
    stuck = next(r for r in cluster["ranks"] if r["rank"] == 3)
    assert (stuck["state"], stuck["phase_reached"]) == ("stuck", "ddp")
    assert cluster["hang"]["verdict"].startswith("rank 3 on node node1 "), cluster["hang"]
    assert [output.count("Report: ") for output in outputs] == [2, 2]
    assert time.monotonic() - started < HEALTHY_DEADLINE
