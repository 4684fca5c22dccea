"""config_from_args: flags and the launchers' env to one CheckConfig (pure, no machine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nccldoctor.cluster.config import ConfigError, config_from_args, first_slurm_host
from nccldoctor.cluster.timeouts import Timeouts, TimeoutsError, timeouts_from


def make(env=None, **flags):
    return config_from_args(env=env or {}, **flags)


def test_standalone_flags():
    c = make(master="198.18.0.1", nodes=2, node_rank=1, port=29500, token="s", node_name="b")
    assert (c.master, c.nodes, c.node_rank, c.port, c.gate_port) == (
        "198.18.0.1",
        2,
        1,
        29500,
        29501,
    )
    assert (c.launcher, c.token, c.node_name, c.backend) == ("standalone", "s", "b", "auto")
    assert c.out == Path("nccldoctor-check")


def test_no_master_is_a_usage_error():
    with pytest.raises(ConfigError, match="no master"):
        make()


def test_torchrun_env_uses_its_node_count_and_group_rank_but_not_its_port():
    env = {"TORCHELASTIC_RUN_ID": "x", "MASTER_ADDR": "198.18.0.1", "MASTER_PORT": "29500",
           "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "3", "LOCAL_RANK": "0",
           "RANK": "3"}  # fmt: skip
    c = make(env)
    assert (c.launcher, c.master, c.nodes, c.node_rank, c.port) == (
        "torchrun",
        "198.18.0.1",
        4,
        3,
        29400,
    )


def test_torchrun_with_several_procs_per_node_refuses_the_extra_agents():
    env = {"TORCHELASTIC_RUN_ID": "x", "MASTER_ADDR": "h", "WORLD_SIZE": "8",
           "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1", "LOCAL_RANK": "1"}  # fmt: skip
    with pytest.raises(ConfigError, match="local rank 1"):
        make(env)


def test_slurm_env():
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "3", "SLURM_NODEID": "0",
           "SLURM_LOCALID": "0", "SLURM_JOB_NODELIST": "gpu[03-05]"}  # fmt: skip
    c = make(env)
    assert (c.launcher, c.master, c.nodes, c.node_rank) == ("slurm", "gpu03", 3, 0)


def test_kubernetes_pytorchjob_env_with_rank_zero():
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "MASTER_ADDR": "job-master-0",
           "MASTER_PORT": "23456", "WORLD_SIZE": "2", "RANK": "0"}  # fmt: skip
    c = make(env)
    assert (c.launcher, c.master, c.port, c.nodes, c.node_rank) == (
        "kubernetes",
        "job-master-0",
        23456,
        2,
        0,
    )


def test_plain_env_of_the_two_container_setup():
    c = make({"MASTER_ADDR": "198.18.0.1", "WORLD_SIZE": "2", "RANK": "1"})
    assert (c.launcher, c.nodes, c.node_rank, c.port) == ("env", 2, 1, 29400)


def test_flags_win_over_env():
    c = make({"MASTER_ADDR": "a", "WORLD_SIZE": "2", "RANK": "1"}, master="b", nodes=3, node_rank=2)
    assert (c.master, c.nodes, c.node_rank) == ("b", 3, 2)


@pytest.mark.parametrize(
    ("flags", "message"),
    [({"nodes": 0}, "--nodes 0"), ({"nodes": 2, "node_rank": 2}, "--node-rank 2"),
     ({"port": 70000}, "--port 70000"), ({"backend": "mpi"}, "--backend 'mpi'"),
     ({"procs_per_node": 0}, "--procs-per-node 0"),
     ({"phase_timeouts": ["nope=1"]}, "NAME=SECONDS"), ({"timeout": -1}, "positive")],
)  # fmt: skip
def test_bad_values_quote_themselves(flags, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("'", "'")):
        make(master="m", **flags)


def test_token_from_env_and_node_name_default():
    c = make({"NCCLDOCTOR_TOKEN": "t"}, master="m")
    assert c.token == "t" and c.node_name


@pytest.mark.parametrize(
    ("nodelist", "first"),
    [("gpu[03-05,9],cpu1", "gpu03"), ("node7", "node7"), ("a1,a2", "a1"), ("n[1,4]", "n1")],
)
def test_first_slurm_host(nodelist, first):
    assert first_slurm_host(nodelist) == first


def test_timeouts_order_of_strength():
    env = {"NCCLDOCTOR_TIMEOUT": "40", "NCCLDOCTOR_TIMEOUT_INIT": "50"}
    t = timeouts_from(None, ["init=7", "bandwidth-budget=3"], env)
    assert (t.reach, t.init, t.bandwidth_budget, t.settle) == (40, 7, 3, Timeouts().settle)
    assert timeouts_from(5).collective == 5 and timeouts_from(5).heartbeat == Timeouts().heartbeat
    with pytest.raises(TimeoutsError, match="not a number"):
        timeouts_from(None, [], {"NCCLDOCTOR_TIMEOUT_REACH": "soon"})


def test_worker_timeouts_are_the_contracts_keys():
    assert set(Timeouts().worker_timeouts()) == {"init", "barrier", "collective",
                                                 "bandwidth_budget", "ddp", "destroy"}  # fmt: skip


def test_the_token_never_reaches_the_reports_command_line():
    from nccldoctor.cli.check import redact_token

    assert redact_token(["nccldoctor", "check", "--token", "s", "--token=t", "--nodes", "2"]) == [
        "nccldoctor", "check", "--token", "***", "--token=***", "--nodes", "2"]  # fmt: skip
