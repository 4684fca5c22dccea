"""`srun -N8 nccldoctor check` on the lab's real Slurm, one node's ephemeral ports dropped: the
task that hosts the master schedules the isolation rounds, every task takes its place in them,
srun exits with the cluster's verdict, and that node alone is blamed. No flag tells the check the
master, the node count or the ranks: Slurm's variables do. --isolate always: auto's TCP trigger
is unit-tested (test_isolate_rounds.py); here 8 nodes' probes on a loaded 2-core machine are too
noisy to hold a test to it. A rate-limited node named slow by the rounds is the torchrun (six
nodes) and mpirun (four) tests': the launcher adds nothing to that judgement that this run does
not prove."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nccldoctor.lab.slurm import SlurmLab, slurm_possible
from tests.cluster.test_check_netns import EXPIRE_S, PORT, WAIT

pytestmark = [pytest.mark.netns, pytest.mark.slow]

NODES = 8
ARGS = ["--timeout", str(WAIT), "--phase-timeout", "bandwidth_budget=2",
        "--phase-timeout", "exit_barrier=40", "--phase-timeout", "isolate_group=6",
        "--isolate", "always"]  # fmt: skip


@pytest.fixture
def slurm8(tmp_path: Path) -> Iterator[SlurmLab]:
    if not slurm_possible():
        pytest.skip("needs root, ip netns and slurm-wlm + munge (scripts/setup-tests.sh)")
    lab = SlurmLab(NODES, tmp_path / "slurm", prefix=f"198.18.{20 + secrets.randbelow(200)}")
    try:
        yield lab.build()
    finally:
        lab.close()


def test_srun_n8_blames_the_node_whose_ephemeral_ports_drop_and_no_node_that_waited_on_it(
    slurm8, tmp_path
):
    """node3 lets in Slurm, the rendezvous ports and replies, and drops every other new TCP
    connection: gloo's init hangs or fails wherever a rank connects to node3. The cause is
    node3's; a rank stuck elsewhere only waited on it (a run once gave innocent node4's rank the
    run.rank-stuck failure for ending first). Every node's JSON says the exit code it exits with."""
    faulty, lab = slurm8.compute[3], slurm8.net
    for rule in (["-i", "lo", "-j", "ACCEPT"], ["-s", slurm8.controller.address, "-j", "ACCEPT"],
                 ["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
                 ["-p", "tcp", "--dport", f"{PORT}:{int(PORT) + 1}", "-j", "ACCEPT"],
                 ["-p", "tcp", "--syn", "-j", "DROP"]):  # fmt: skip
        lab.exec(faulty, "iptables", "-A", "INPUT", *rule)
    out = tmp_path / "out"
    argv = ["srun", f"-N{NODES}", "--label", "python", "-m", "nccldoctor", "check",
            "--out", str(out), *ARGS, "--phase-timeout", f"init={EXPIRE_S}"]  # fmt: skip
    proc = slurm8.popen(argv, slurm8.env(os.environ), cwd=tmp_path, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        _, err = proc.communicate(timeout=400)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    assert proc.returncode == 1, err[-3000:]
    reports = {p.stem: json.loads(p.read_text()) for p in out.glob("*/*/check-*.json")
               if p.parent.name != "latest"}  # fmt: skip
    cluster = reports["check-cluster"]
    assert cluster["hang"]["verdict"].startswith("connections to ephemeral ports on node node3")
    isolation = cluster["isolation"]["nodes"]
    assert {v["node"] for v in isolation if v["state"] != "ok"} == {"node3"}, isolation
    failing = {(f["id"], f["node"]) for f in cluster["findings"] if f["severity"] == "fail"}
    assert {node for _, node in failing} - {None} == {"node3"}, failing
    for finding in cluster["findings"]:
        if finding["id"] == "run.rank-stuck" and finding["node"] != "node3":
            assert finding["title"].startswith(f"rank {finding['rank']} waited in ")
            assert finding["title"].endswith(" on node node3"), finding["title"]
    for i in range(NODES):
        node = reports[f"check-node{i}"]
        assert (node["exit_code"], node["exit_decided_by"]) == (1, "cluster"), i
