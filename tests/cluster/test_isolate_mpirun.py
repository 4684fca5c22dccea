"""`mpirun` across four namespace nodes, two processes a node (local rank 0 of each runs the
node's agent, the other its rank and waits for the verdict), one node's link rate-limited, and
--isolate always (whether auto sees the slow link is the Slurm test's; on a loaded machine the
TCP probe of many processes' nodes is too noisy to hold to): the agents run the isolation rounds
while their other processes wait, and every process exits with the cluster's verdict naming the
slow node."""

from __future__ import annotations

import shutil

import pytest

from tests.cluster.test_mpirun import mpirun_check

pytestmark = [pytest.mark.netns, pytest.mark.slow]

NODES = 4


@pytest.fixture
def mpi_lab4(lab):
    if shutil.which("mpirun") is None:
        pytest.skip("needs OpenMPI's mpirun (openmpi-bin, scripts/setup-tests.sh)")
    lab = lab(NODES)
    hosts = "".join(f"{h.address} {h.name}\n" for h in lab.hosts) + "127.0.0.1 localhost\n"
    for host in lab.hosts:
        host.write_etc("hosts", hosts)
    return lab


def test_mpirun_two_processes_per_node_names_the_rate_limited_node(mpi_lab4, tmp_path):
    mpi_lab4.hosts[2].exec("tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "100mbit",
                           "burst", "256kb", "latency", "400ms")  # fmt: skip
    rc, output, found = mpirun_check(mpi_lab4, tmp_path, "--isolate", "always", "--phase-timeout",
                                     "isolate_group=6", per_node=2)  # fmt: skip
    assert rc == 1, output[-3000:]
    isolation = found["check-cluster"]["isolation"]
    assert {v["node"]: v["state"] for v in isolation["nodes"] if v["state"] != "ok"} == {
        "node2": "slow"
    }
    assert output.count("Report: ") == 2 * NODES  # every process showed the verdict
