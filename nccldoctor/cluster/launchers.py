"""What the launcher that started ``nccldoctor check`` says in its environment, so that ``srun
nccldoctor check`` and ``torchrun nccldoctor check`` need no flags (``config.py`` lets flags win):

- torchrun (``TORCHELASTIC_RUN_ID`` set): ``MASTER_ADDR``; nodes = ``WORLD_SIZE`` /
  ``LOCAL_WORLD_SIZE``; node rank = ``GROUP_RANK``. ``MASTER_PORT`` is torchrun's own store, so
  nccldoctor keeps ``--port``.
- Slurm (``SLURM_JOB_ID``): nodes = ``SLURM_STEP_NUM_NODES``/``SLURM_JOB_NUM_NODES``/
  ``SLURM_NNODES``, node rank = ``SLURM_NODEID``, master = ``MASTER_ADDR`` or the first host of
  ``SLURM_STEP_NODELIST``/``SLURM_JOB_NODELIST``. Only a task of ``srun`` (``SLURM_STEP_ID``
  set) is a node: the batch shell of the allocation has the same variables and would wait for
  nodes that never come.
- OpenMPI's mpirun (``OMPI_COMM_WORLD_SIZE``): ``MASTER_ADDR`` (``mpirun -x MASTER_ADDR``);
  nodes = ``OMPI_COMM_WORLD_SIZE`` / ``OMPI_COMM_WORLD_LOCAL_SIZE``; node rank =
  ``OMPI_COMM_WORLD_RANK`` // ``OMPI_COMM_WORLD_LOCAL_SIZE`` (mpirun fills a node before the
  next by default). ``OMPI_COMM_WORLD_NODE_RANK`` is not the node's index (docs/launch/mpirun.md).
- Kubernetes PyTorchJob (``PET_NNODES`` or ``KUBERNETES_SERVICE_HOST``): ``MASTER_ADDR``,
  ``MASTER_PORT``, nodes = ``PET_NNODES`` or ``WORLD_SIZE`` (one pod per node), node rank =
  ``PET_NODE_RANK``, ``RANK`` or a JobSet's ``JOB_COMPLETION_INDEX`` (docs/launch/kubernetes.md).
- Plain env (``MASTER_ADDR`` set): ``MASTER_PORT``, ``WORLD_SIZE`` and ``RANK`` as node count
  and node rank (one process per node, as in the two-container DDP setup).

With several processes per node (``--nproc-per-node 2``, ``--ntasks-per-node=2``, ``mpirun -N
2``), each process is one rank of the check (:class:`LocalRank`: the launcher's rank, local rank,
processes per node and world size); local rank 0 also does the node's agent work
(cluster/agent/local.py). One process per node keeps the agent that starts its own workers.

The shared token the master's gate asks of every node (docs/design.md#gate) is ``--token``
(``NCCLDOCTOR_TOKEN``); without it, one derived from the launcher's job identity, which every
node of one job sees alike: ``TORCHELASTIC_RUN_ID`` (torchrun's ``--rdzv-id``; not its default
"none"), ``SLURM_JOB_ID``, and in a Kubernetes pod ``JOBSET_NAME`` or ``JOB_NAME`` (set from
the pod's job label through the downward API: Kubernetes puts no job name in the environment
itself). Without either the master trusts its network: anyone who reaches its ports may join.

A launcher whose variables contradict each other (a world that is not a whole number of nodes,
a node list that does not parse or whose first host does not resolve) is a usage error that
names the variable and what it should hold; every process of the job gets the same one.
"""

from __future__ import annotations

import hashlib
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


class LauncherError(ValueError):
    """The launcher's variables contradict each other (config.py makes it a usage error)."""


@dataclass(frozen=True)
class LocalRank:
    """This process is one rank of several the launcher started on this node."""

    rank: int
    local_rank: int
    local_world: int
    world_size: int

    @property
    def leader(self) -> bool:
        """Local rank 0 does the node agent's work besides its rank's."""
        return self.local_rank == 0


@dataclass(frozen=True)
class RankVariables:
    """The variables a launcher gives a process's place in by (the usage errors name them)."""

    rank: str
    local_rank: str
    local_world: str = "?"
    world: str = "?"


@dataclass
class LauncherSays:
    """Which launcher started us and what its variables say; None where they say nothing."""

    launcher: str = "standalone"  # standalone | torchrun | slurm | mpirun | kubernetes | env
    master: str | None = None
    port: int | None = None
    nodes: int | None = None
    node_rank: int | None = None
    rank: int | None = None  # this process among all the launcher started
    local_rank: int | None = None
    local_world: int | None = None  # processes per node (None: one)
    world: int | None = None
    nodelist: str | None = None  # the variable whose first host is the master, under Slurm
    names: RankVariables | None = None  # where rank, local rank and the sizes came from


def launcher_env(env: Mapping[str, str]) -> LauncherSays:
    """Which launcher started us, and what its variables say."""
    said = LauncherSays(master=env.get("MASTER_ADDR") or None)
    if env.get("TORCHELASTIC_RUN_ID"):
        said.launcher = "torchrun"
        said.nodes = _whole_nodes(env, "WORLD_SIZE", "LOCAL_WORLD_SIZE")
        said.node_rank = _int(env, "GROUP_RANK")
        _ranks(said, env, RankVariables("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE"))
        return said
    if env.get("SLURM_JOB_ID"):
        said.launcher = "slurm"
        nodes_name = _present(env, _SLURM_NODES)
        tasks_name = _present(env, ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"))
        nodes = _int(env, nodes_name) if nodes_name else None
        tasks = _int(env, tasks_name) if tasks_name else None
        said.nodes = nodes
        if nodes and tasks is not None and tasks % nodes:
            raise LauncherError(
                f"{tasks_name}={tasks} is not a multiple of {nodes_name}={nodes} (tasks per "
                f"node: {env.get('SLURM_STEP_TASKS_PER_NODE', '?')}); expected the same number "
                "of tasks on every node: srun -N NODES --ntasks-per-node=N"
            )
        said.node_rank = _int(env, "SLURM_NODEID")
        _ranks(said, env, RankVariables("SLURM_PROCID", "SLURM_LOCALID",
                                        "SLURM_STEP_TASKS_PER_NODE", tasks_name or "?"))  # fmt: skip
        if nodes and tasks:  # srun says the tasks per node only as "2(x2)": the quotient
            said.local_world = tasks // nodes
        said.port = _int(env, "MASTER_PORT")
        # The step's own nodes: a step on part of the allocation may not hold its first node.
        listed = next(
            (n for n in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST") if env.get(n)), None
        )
        if said.master is None and listed:
            try:
                said.master = first_slurm_host(env[listed])
            except ValueError as exc:
                raise LauncherError(
                    f"{listed}={env[listed]}: {exc}; expected a Slurm host list such as "
                    "gpu[01-04],cpu7, or set MASTER_ADDR"
                ) from None
            said.nodelist = listed
        return said
    if env.get("OMPI_COMM_WORLD_SIZE"):
        said.launcher = "mpirun"
        said.nodes = _whole_nodes(env, *_OMPI_SIZES)
        rank, local_world = _int(env, "OMPI_COMM_WORLD_RANK"), _int(env, _OMPI_SIZES[1]) or 1
        said.node_rank = None if rank is None else rank // local_world
        _ranks(said, env, RankVariables("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                        _OMPI_SIZES[1], _OMPI_SIZES[0]))  # fmt: skip
        said.port = _int(env, "MASTER_PORT")
        return said
    said.port = _int(env, "MASTER_PORT")
    if env.get("PET_NNODES") or (env.get("KUBERNETES_SERVICE_HOST") and said.master is not None):
        said.launcher = "kubernetes"
        said.master = said.master or env.get("PET_MASTER_ADDR") or None
        said.nodes = _first(_int(env, "PET_NNODES"), _int(env, "WORLD_SIZE"))
        # JOB_COMPLETION_INDEX: what Kubernetes sets in an Indexed Job's pods (a JobSet's).
        ranks = ("PET_NODE_RANK", "RANK", "JOB_COMPLETION_INDEX")
        said.node_rank = _first(*(_int(env, name) for name in ranks))
        return said
    if said.master is not None:
        said.launcher = "env"
        said.nodes = _int(env, "WORLD_SIZE")
        said.node_rank = _int(env, "RANK")
        said.local_rank = _int(env, "LOCAL_RANK")
        return said
    return LauncherSays()


def local_rank(said: LauncherSays, procs_per_node: int | None) -> LocalRank | None:
    """Who this process is among several per node, when the launcher started several."""
    local_world = said.local_world or 1
    if local_world <= 1 or said.names is None:
        return None
    names = said.names
    rank, local_rank, world = said.rank, said.local_rank, said.world
    if rank is None or local_rank is None or world is None:
        given = ((names.rank, rank), (names.local_rank, local_rank), (names.world, world))
        missing = ", ".join(name for name, value in given if value is None)
        raise LauncherError(
            f"{names.local_world}={local_world} processes per node, but {missing} "
            "not set to a number: each process needs its rank, local rank and the world size"
        )
    if not 0 <= local_rank < local_world:
        raise LauncherError(
            f"{names.local_rank}={local_rank}: expected 0..{local_world - 1} "
            f"({names.local_world}={local_world})"
        )
    if not 0 <= rank < world:
        raise LauncherError(f"{names.rank}={rank}: expected 0..{world - 1} ({names.world})")
    if procs_per_node is not None and procs_per_node != local_world:
        raise LauncherError(
            f"--procs-per-node {procs_per_node}: the launcher started {local_world} processes "
            f"on this node ({names.local_world}), and each is one rank; leave it out"
        )
    return LocalRank(rank, local_rank, local_world, world)


_SLURM_NODES = ("SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES")
_OMPI_SIZES = ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE")
# One host of a Slurm host list: a name, or a prefix with a bracketed list of numbers and ranges
# (``gpu[03-05,9]``), maybe a suffix after it (``rack1-[1-4]-ib``).
_HOSTLIST_ITEM = re.compile(
    r"([^,\[\]]+)(?:\[(\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*)\]([^,\[\]]*))?(?:,|$)"
)


# Where a launcher names the job, in the order looked at; the Kubernetes names only in a pod.
JOB_IDENTITIES = ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID")
POD_JOB_IDENTITIES = ("JOBSET_NAME", "JOB_NAME")
# torchrun's run id when --rdzv-id is not given: the same for every job, so no identity
_TORCHRUN_DEFAULT_ID = "none"


def shared_token(given: str | None, env: Mapping[str, str], port: int) -> tuple[str | None, str]:
    """The token every node must present, and where it came from: ``given`` (``--token``), else
    a hash of the launcher's job identity and the store port, which every node of one job
    derives alike and a node of another job does not; (None, "") without either.

    The master's address stays out: nodes may name it differently (a host name, an address)."""
    if given:
        return given, "--token"
    names = JOB_IDENTITIES + (POD_JOB_IDENTITIES if env.get("KUBERNETES_SERVICE_HOST") else ())
    for name in names:
        value = env.get(name, "")
        if value and not (name == "TORCHELASTIC_RUN_ID" and value == _TORCHRUN_DEFAULT_ID):
            digest = hashlib.sha256(f"nccldoctor check\0{name}={value}\0{port}".encode())
            return digest.hexdigest()[:32], name
    return None, ""


def first_slurm_host(nodelist: str) -> str:
    """The first host of a Slurm hostlist: ``gpu[03-05,9],cpu1`` -> ``gpu03``.

    Raises:
        ValueError: not a host list (an unclosed bracket, an empty name, a bad range).
    """
    match = _HOSTLIST_ITEM.match(nodelist.strip())
    if not match:
        raise ValueError("not a host list (an empty name, or a bracket that is not a number list)")
    prefix, ranges, suffix = match.groups()
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0] + suffix


def host_resolves(name: str) -> bool:
    """Whether ``name`` resolves on this machine (a node list's host must, everywhere)."""
    try:
        socket.getaddrinfo(name, None)
    except (OSError, ValueError):  # ValueError: a NUL, a label too long for IDNA
        return False
    return True


def _int(env: Mapping[str, str], name: str) -> int | None:
    try:
        return int(env[name])
    except (KeyError, ValueError):
        return None


def _whole_nodes(env: Mapping[str, str], world_name: str, local_name: str) -> int | None:
    """The node count ``world`` / ``local``; a world that is not a whole number of nodes is
    refused, naming both variables."""
    world, local = _int(env, world_name), _int(env, local_name)
    if world is None:
        return None
    if local is None:
        return world  # one process per node
    if local < 1 or world % local:
        raise LauncherError(
            f"{world_name}={world} is not a multiple of {local_name}={local}; expected the same "
            f"number of processes on every node ({world_name} = nodes x {local_name})"
        )
    return world // local


def _present(env: Mapping[str, str], names: Sequence[str]) -> str | None:
    """The first of ``names`` that holds a number."""
    return next((name for name in names if _int(env, name) is not None), None)


def _first(*values: int | None) -> int | None:
    return next((v for v in values if v is not None), None)


def _ranks(said: LauncherSays, env: Mapping[str, str], names: RankVariables) -> None:
    """The launcher's rank, local rank, processes per node and world size, and the names of
    the variables they came from (for the usage errors)."""
    said.names = names
    said.rank, said.local_rank, said.local_world, said.world = (
        _int(env, name) if name != "?" else None  # "?": this launcher has no such variable
        for name in (names.rank, names.local_rank, names.local_world, names.world)
    )
