"""`nccldoctor check` launched by OpenMPI's mpirun across two network-namespace nodes, its remote
daemons started through the lab's rsh agent (nccldoctor/lab/mpirun.py). The assertions are on
mpirun's own exit status, then on the reports."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from nccldoctor.lab.mpirun import mpirun_argv, start_mpirun, write_rsh_agent
from nccldoctor.lab.start import check_env
from tests.cluster.test_check_netns import EXPIRE_S, FAST, HEALTHY_DEADLINE, PORT, WAIT
from tests.cluster.test_faults_net import rendezvous_only_firewall

pytestmark = [pytest.mark.netns, pytest.mark.slow]


@pytest.fixture
def mpi_lab(lab):
    if shutil.which("mpirun") is None:
        pytest.skip("needs OpenMPI's mpirun (openmpi-bin, scripts/setup-tests.sh)")
    lab = lab(2)
    hosts = "".join(f"{h.address} {h.name}\n" for h in lab.hosts) + "127.0.0.1 localhost\n"
    for host in lab.hosts:
        host.write_etc("hosts", hosts)
    return lab


def mpirun_check(lab, tmp_path, *extra, per_node=1):
    agent = write_rsh_agent(lab.net, tmp_path / "rsh-agent")
    out = tmp_path / "out"
    check = ["python", "-m", "nccldoctor", "check", "--out", str(out), "--port", PORT, *FAST,
             *extra]  # fmt: skip
    argv = mpirun_argv(lab.net, agent, per_node, check, export=["MASTER_ADDR"])
    env = check_env(os.environ, "", {"MASTER_ADDR": lab.hosts[0].address})
    del env["NCCLDOCTOR_NODE_NAME"]  # each process's hostname is its node's
    proc = start_mpirun(lab.net, argv, env, cwd=tmp_path, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=HEALTHY_DEADLINE + WAIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    found = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*/*/check-*.json"))}
    return proc.returncode, stdout + stderr, found


def test_mpirun_one_process_per_node_healthy(mpi_lab, tmp_path):
    rc, output, found = mpirun_check(mpi_lab, tmp_path)
    assert rc == 0, output[-3000:]
    assert sorted(found) == ["check-cluster", "check-node0", "check-node1"]
    # The node rank came from OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_LOCAL_SIZE on each node.
    assert [found[f"check-node{i}"]["nodes"][0]["node"] for i in (0, 1)] == ["node0", "node1"]
    assert found["check-cluster"]["exit_code"] == 0


def test_mpirun_two_processes_per_node_are_the_ranks(mpi_lab, tmp_path):
    rc, output, found = mpirun_check(mpi_lab, tmp_path, per_node=2)
    assert rc == 0, output[-3000:]
    assert sorted(found) == ["check-cluster", "check-node0", "check-node1"]
    # OMPI_COMM_WORLD_RANK is each process's rank; local rank 0 of each node ran its agent.
    ranks = [
        (r["rank"], r["node"], r["local_rank"], r["state"]) for r in found["check-cluster"]["ranks"]
    ]
    assert ranks == [(0, "node0", 0, "ok"), (1, "node0", 1, "ok"), (2, "node1", 0, "ok"),
                     (3, "node1", 1, "ok")]  # fmt: skip
    assert output.count("Report: ") == 4  # every process showed the verdict and exited 0


def test_mpirun_two_processes_per_node_with_a_firewalled_node_exit_1(mpi_lab, tmp_path):
    # The fault under mpirun once, with the processes per node that make the launch harder: one
    # process per node meets it the same way (its launch is the healthy test's)
    rendezvous_only_firewall(mpi_lab.hosts[1])
    # init waits in vain on the firewalled node's ports
    rc, output, found = mpirun_check(mpi_lab, tmp_path, "--phase-timeout", f"init={EXPIRE_S}",
                                     per_node=2)  # fmt: skip
    assert rc == 1, output[-3000:]  # mpirun's status is the check's: no process exited first
    blocked = [f["node"] for f in found["check-node1"]["findings"]
               if f["id"] == "run.ephemeral-port-blocked"]  # fmt: skip
    assert blocked == ["node1"]
    assert found["check-cluster"]["exit_code"] == 1
    assert output.count("Report: ") == 4
