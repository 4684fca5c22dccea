"""config_from_args: flags and the launchers' env to one CheckConfig (pure, no machine)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from nccldoctor.cluster.config import ConfigError, config_from_args
from nccldoctor.cluster.launchers import (
    LauncherSays,
    LocalRank,
    RankVariables,
    first_slurm_host,
    host_resolves,
    launcher_env,
)
from nccldoctor.cluster.records import WORKER_PHASES, phase_budget
from nccldoctor.cluster.timeouts import Timeouts, TimeoutsError, timeouts_from
from nccldoctor.cluster.worker.config import WorkerTimeouts


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


def test_each_run_has_a_folder_of_its_own_under_its_node():
    c = make(master="198.18.0.1", node_name="b", out=Path("o"))
    assert c.run_dir.parent == Path("o/b") and c.run_name != make(master="198.18.0.1").run_name
    assert make(master="198.18.0.1", node_name="b", run_name="job-7").run_dir == Path(
        "nccldoctor-check/b/job-7"
    )
    torchrun = {"TORCHELASTIC_RUN_ID": "t", "MASTER_ADDR": "198.18.0.1", "WORLD_SIZE": "2",
                "RANK": "1", "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "1", "GROUP_RANK": "0"}  # fmt: skip
    assert make(torchrun, run_name="job-7").run_name == "job-7.local1"  # local rank 0 has job-7
    for bad in ("latest", "../up", "a/b"):
        with pytest.raises(ConfigError, match=f"--run-name '{re.escape(bad)}': "):
            make(master="198.18.0.1", run_name=bad)


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


def test_torchrun_with_several_procs_per_node_makes_each_process_a_rank():
    env = {"TORCHELASTIC_RUN_ID": "x", "MASTER_ADDR": "h", "WORLD_SIZE": "8", "RANK": "3",
           "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1", "LOCAL_RANK": "1"}  # fmt: skip
    c = make(env)
    assert (c.nodes, c.node_rank, c.procs_per_node) == (4, 1, 2)
    assert c.local == LocalRank(rank=3, local_rank=1, local_world=2, world_size=8)
    assert not c.local.leader and make({**env, "LOCAL_RANK": "0"}).local.leader


@pytest.mark.parametrize(
    ("change", "said"),
    [({"RANK": None}, "LOCAL_WORLD_SIZE=2 processes per node, but RANK not set"),
     ({"LOCAL_RANK": "2"}, "LOCAL_RANK=2: expected 0..1 (LOCAL_WORLD_SIZE=2)"),
     ({"RANK": "8"}, "RANK=8: expected 0..7 (WORLD_SIZE)")],
)  # fmt: skip
def test_several_procs_per_node_with_bad_rank_variables_say_which(change, said):
    env = {"TORCHELASTIC_RUN_ID": "x", "MASTER_ADDR": "h", "WORLD_SIZE": "8", "RANK": "3",
           "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1", "LOCAL_RANK": "1"}  # fmt: skip
    env = {k: v for k, v in {**env, **change}.items() if v is not None}
    with pytest.raises(ConfigError, match=re.escape(said)):
        make(env)


def test_procs_per_node_flag_contradicting_the_launcher_is_refused():
    env = {"TORCHELASTIC_RUN_ID": "x", "MASTER_ADDR": "h", "WORLD_SIZE": "4", "RANK": "0",
           "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0", "LOCAL_RANK": "0"}  # fmt: skip
    with pytest.raises(ConfigError, match="--procs-per-node 4: the launcher started 2"):
        config_from_args(env=env, procs_per_node=4)


def test_what_srun_says_is_one_record_with_the_variables_it_came_from():
    env = {**SRUN_TASK, "SLURM_STEP_NUM_TASKS": "4", "SLURM_NTASKS": "4",
           "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_LOCALID": "1", "SLURM_PROCID": "3"}  # fmt: skip
    names = RankVariables("SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE",
                          "SLURM_STEP_NUM_TASKS")  # fmt: skip
    assert launcher_env(env) == LauncherSays(
        "slurm", master="node2", nodes=2, node_rank=1, rank=3, local_rank=1, local_world=2,
        world=4, nodelist="SLURM_STEP_NODELIST", names=names
    )  # fmt: skip
    assert launcher_env({"MASTER_PORT": "29500"}) == LauncherSays()  # no launcher: says nothing


def test_srun_two_tasks_per_node():
    env = {**SRUN_TASK, "SLURM_STEP_NUM_TASKS": "4", "SLURM_NTASKS": "4",
           "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_LOCALID": "1", "SLURM_PROCID": "3"}  # fmt: skip
    c = make(env)
    assert (c.nodes, c.node_rank, c.local) == (2, 1, LocalRank(3, 1, 2, 4))


def test_slurm_env():
    env = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_JOB_NUM_NODES": "3",
           "SLURM_NODEID": "0", "SLURM_LOCALID": "0", "SLURM_JOB_NODELIST": "gpu[03-05]"}  # fmt: skip
    c = make(env)
    assert (c.launcher, c.master, c.nodes, c.node_rank) == ("slurm", "gpu03", 3, 0)


# What srun sets in a task of `srun -N2 --ntasks-per-node=1` inside a 4-node allocation, and what
# the batch shell of a 2-node allocation has (as the lab's Slurm 22.05 sets them, nccldoctor/lab/slurm.py).
SRUN_TASK = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_JOB_NUM_NODES": "4",
             "SLURM_NNODES": "2", "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NUM_TASKS": "2",
             "SLURM_NTASKS": "2", "SLURM_STEP_TASKS_PER_NODE": "1(x2)", "SLURM_NODEID": "1",
             "SLURM_LOCALID": "0", "SLURM_PROCID": "1", "SLURM_JOB_NODELIST": "node[0-3]",
    "SLURM_STEP_NODELIST": "node[2-3]"}  # fmt: skip
BATCH_SHELL = {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "2", "SLURM_NNODES": "2",
               "SLURM_NODEID": "0", "SLURM_LOCALID": "0", "SLURM_PROCID": "0",
               "SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_JOB_NODELIST": "node[0-1]"}  # fmt: skip


def test_srun_step_counts_the_steps_nodes_not_the_allocations():
    c = make(SRUN_TASK)
    assert (c.launcher, c.master, c.nodes, c.node_rank) == ("slurm", "node2", 2, 1)


def test_the_batch_shell_is_not_a_node_of_the_check():
    with pytest.raises(ConfigError, match=r"SLURM_JOB_ID=7 is set but SLURM_STEP_ID is not.*srun"):
        make(BATCH_SHELL)
    assert make(BATCH_SHELL, node_rank=0).nodes == 2  # an explicit node rank: the user knows


def test_uneven_srun_tasks_name_both_variables():
    env = {**SRUN_TASK, "SLURM_STEP_NUM_TASKS": "3", "SLURM_STEP_TASKS_PER_NODE": "2,1"}
    with pytest.raises(ConfigError) as err:
        make(env)
    assert str(err.value).startswith(
        "SLURM_STEP_NUM_TASKS=3 is not a multiple of SLURM_STEP_NUM_NODES=2 (tasks per node: 2,1)"
    )


@pytest.mark.parametrize("nodelist", ["gpu[03-", "gpu[a-b]", ",gpu1", "[1-2]"])
def test_a_node_list_that_does_not_parse_is_named(nodelist):
    with pytest.raises(ConfigError, match=r"^SLURM_STEP_NODELIST=.*expected a Slurm host list"):
        make({**SRUN_TASK, "SLURM_STEP_NODELIST": nodelist})


def test_a_node_list_whose_master_does_not_resolve_is_named():
    asked = []

    def resolve(name):
        asked.append(name)
        return False

    with pytest.raises(ConfigError) as err:
        make(SRUN_TASK, resolve=resolve)
    assert asked == ["node2"]
    assert str(err.value).startswith(
        "SLURM_STEP_NODELIST=node[2-3]: its first host 'node2' (the master) does not resolve"
    )
    # MASTER_ADDR (or --master) is the user's own choice: not asked, the reach phase retries it.
    assert make({**SRUN_TASK, "MASTER_ADDR": "m"}, resolve=resolve).master == "m"
    assert asked == ["node2"]


def test_host_resolves():
    assert host_resolves("localhost")
    assert not host_resolves("no-such-host.invalid")
    assert not host_resolves("bad\x00name" * 30)


def test_torchrun_world_that_is_not_whole_nodes_is_named():
    env = {"TORCHELASTIC_RUN_ID": "x", "MASTER_ADDR": "h", "WORLD_SIZE": "5",
           "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0", "LOCAL_RANK": "0"}  # fmt: skip
    with pytest.raises(ConfigError) as err:
        make(env)
    assert str(err.value).startswith("WORLD_SIZE=5 is not a multiple of LOCAL_WORLD_SIZE=2;")


# What OpenMPI 4.1's mpirun sets in each process (seen in tests/cluster/test_mpirun.py), here
# for `mpirun -np 2 -N 1 -x MASTER_ADDR` on the second node.
OMPI = {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
        "OMPI_COMM_WORLD_NODE_RANK": "0", "MASTER_ADDR": "198.18.0.1"}  # fmt: skip


def test_mpirun_env():
    c = make(OMPI)
    assert (c.launcher, c.master, c.nodes, c.node_rank, c.port) == (
        "mpirun", "198.18.0.1", 2, 1, 29400)  # fmt: skip


def test_mpirun_with_several_procs_per_node():
    env = {**OMPI, "OMPI_COMM_WORLD_SIZE": "6", "OMPI_COMM_WORLD_RANK": "3",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}  # fmt: skip
    assert (make(env).nodes, make(env).node_rank) == (2, 1)
    assert make(env).local == LocalRank(rank=3, local_rank=0, local_world=3, world_size=6)
    with pytest.raises(ConfigError, match="OMPI_COMM_WORLD_SIZE=7 is not a multiple of "):
        make({**env, "OMPI_COMM_WORLD_SIZE": "7"})


def test_mpirun_without_master_says_how_to_pass_it():
    env = {k: v for k, v in OMPI.items() if k != "MASTER_ADDR"}
    with pytest.raises(ConfigError, match=r"mpirun -x MASTER_ADDR=ADDR"):
        make(env)


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
    [
        ("gpu[03-05,9],cpu1", "gpu03"),
        ("node7", "node7"),
        ("a1,a2", "a1"),
        ("n[1,4]", "n1"),
        ("rack1-[2-4]-ib", "rack1-2-ib"),
    ],
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
    assert set(Timeouts().worker_timeouts()) == {f.name for f in dataclasses.fields(WorkerTimeouts)}


def test_the_agent_budgets_each_phase_as_the_worker_times_it():
    """One table: the deadline a worker sets itself is the budget the agent's watchdog gives it,
    and the workers' overall deadline leaves room for every phase at its full budget (it once
    counted the collective budget twice for three phases that wait on it)."""
    t = timeouts_from(None, ["init=7", "barrier=2", "collective=3", "bandwidth-budget=5"])
    worker = WorkerTimeouts(**t.worker_timeouts())
    assert [phase_budget(p, worker) for p in WORKER_PHASES] == [
        phase_budget(p, t) for p in WORKER_PHASES
    ] == [7, 2, 3, 5 + 3, t.ddp, 3, t.destroy]  # fmt: skip
    assert t.workers_total() == t.startup + 7 + 2 + 3 + 8 + t.ddp + 3 + t.destroy
    assert phase_budget("a-newer-phase", t) == max(t.init, t.ddp, 8)


def test_the_token_never_reaches_the_reports_command_line():
    from nccldoctor.cli.check import redact_token

    assert redact_token(["nccldoctor", "check", "--token", "s", "--token=t", "--nodes", "2"]) == [
        "nccldoctor", "check", "--token", "***", "--token=***", "--nodes", "2"]  # fmt: skip


K8S = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def test_elastic_pytorchjob_pet_variables():
    env = {**K8S, "PET_NNODES": "4", "PET_NODE_RANK": "2", "PET_MASTER_ADDR": "ddp-master-0",
           "PET_MASTER_PORT": "23456", "MASTER_PORT": "23456"}  # fmt: skip
    c = make(env)
    assert (c.launcher, c.master, c.nodes, c.node_rank) == ("kubernetes", "ddp-master-0", 4, 2)


def test_plain_env_with_a_local_rank_above_0_is_refused_saying_what_is_missing():
    env = {"MASTER_ADDR": "h", "WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"}
    with pytest.raises(ConfigError, match="local rank 1 but no launcher variable gives the "
                       "processes per node"):  # fmt: skip
        make(env)
