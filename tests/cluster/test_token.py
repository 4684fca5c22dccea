"""The shared token: --token, else one derived from the launcher's job identity, which every node
of one job derives alike (cluster/launchers.py, docs/design.md#gate)."""

from __future__ import annotations

import time

import pytest

from nccldoctor.cluster.agent import gate, knock
from nccldoctor.cluster.config import config_from_args
from tests.ports import free_port

SRUN = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_JOB_NUM_NODES": "2",
        "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "198.18.0.1"}  # fmt: skip
TORCHRUN = {"TORCHELASTIC_RUN_ID": "job-17", "MASTER_ADDR": "198.18.0.1", "WORLD_SIZE": "2",
            "GROUP_RANK": "1"}  # fmt: skip
POD = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "MASTER_ADDR": "ddp-master-0", "WORLD_SIZE": "2",
       "RANK": "1"}  # fmt: skip


def config(env: dict, **flags):
    return config_from_args(env=env, **flags)


@pytest.mark.parametrize(
    ("env", "source"),
    [
        (SRUN, "SLURM_JOB_ID"),
        (TORCHRUN, "TORCHELASTIC_RUN_ID"),
        ({**POD, "JOB_NAME": "ddp"}, "JOB_NAME"),
        ({**POD, "JOBSET_NAME": "ddp", "JOB_NAME": "ddp-workers-0"}, "JOBSET_NAME"),
    ],
    ids=["slurm", "torchrun", "kubernetes-job", "jobset"],
)
def test_a_job_identity_is_the_default_token_alike_on_every_node(env, source):
    node1 = config(env)
    node0 = config({**env, "SLURM_NODEID": "0", "GROUP_RANK": "0", "RANK": "0"})
    assert node1.token_from == source and len(node1.token) == 32
    assert node0.token == node1.token  # every node of the job
    other_job = config({**env, source: env[source] + "0"})
    assert other_job.token != node1.token
    assert config(env, port=29500).token != node1.token  # another check in the same job
    assert env[source] not in node1.token


def test_a_given_token_wins_and_no_identity_means_no_token():
    assert (config(SRUN, token="s3").token, config(SRUN, token="s3").token_from) == (
        "s3",
        "--token",
    )
    given = config({**SRUN, "NCCLDOCTOR_TOKEN": "s4"})
    assert (given.token, given.token_from) == ("s4", "--token")
    alone = config({}, master="198.18.0.1")
    assert (alone.token, alone.token_from) == (None, "")


def test_what_is_no_job_identity():
    # torchrun's run id without --rdzv-id is "none" in every job
    assert config({**TORCHRUN, "TORCHELASTIC_RUN_ID": "none"}).token is None
    # a job name outside a pod (Jenkins sets JOB_NAME too) is not the launcher's
    assert config({"MASTER_ADDR": "198.18.0.1", "JOB_NAME": "nightly"}).token is None
    assert config(POD).token is None


def test_the_masters_report_says_where_its_token_came_from():
    master = config(SRUN, port=free_port())
    server = gate.Gate(free_port(), master.token, "run1", bind="127.0.0.1",
                       token_from=master.token_from)  # fmt: skip
    try:
        stray = knock.say_hello("127.0.0.1", server.port, "b", "", None, time.monotonic() + 5)
        assert stray.refused
        assert stray.error == "refused: wrong or missing token"  # no more to a stranger
        (seen,) = server.snapshot()
        assert seen.reason == "wrong or missing token (the master's: derived from SLURM_JOB_ID)"
        same_job = knock.say_hello("127.0.0.1", server.port, "c", "", master.token,
                                   time.monotonic() + 5)  # fmt: skip
        assert same_job.ok
    finally:
        server.close()
    assert gate.token_origin("") == "none: no --token and no job identity"


def test_check_help_says_the_master_trusts_its_network_without_a_token():
    from typer.testing import CliRunner

    from nccldoctor.cli.app import app

    result = CliRunner().invoke(app, ["check", "--help"], env={"COLUMNS": "200"})
    text = " ".join(result.output.replace("│", " ").split())
    assert "Default: derived from the job's id (SLURM_JOB_ID, TORCHELASTIC_RUN_ID" in text
    assert "Without either, the master trusts its network" in text
