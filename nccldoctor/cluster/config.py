"""`nccldoctor check`'s settings, translated from flags and the launcher's environment.

``config_from_args`` is pure: flags and an env mapping in, a :class:`CheckConfig` out. Flags win;
then the launcher's variables (``launchers.py``: torchrun, Slurm, mpirun, a Kubernetes
PyTorchJob, plain ``MASTER_ADDR``), so ``srun nccldoctor check`` and ``torchrun nccldoctor
check`` need no flags. Every value that makes no runnable check is a usage error naming the flag
or variable and what it should hold.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nccldoctor.cluster.launchers import (
    LauncherError,
    LocalRank,
    launcher_env,
    local_rank,
    shared_token,
)
from nccldoctor.cluster.rundir import bad_run_name, new_run_name
from nccldoctor.cluster.timeouts import Timeouts, TimeoutsError, timeouts_from

DEFAULT_PORT = 29400
BACKENDS = ("auto", "nccl", "gloo")
ISOLATE_MODES = ("auto", "always", "never")  # cluster/isolate/rounds.py


class ConfigError(ValueError):
    """The command line or the launcher env does not make a runnable check (exit 2)."""


@dataclass
class CheckConfig:
    master: str
    port: int = DEFAULT_PORT
    nodes: int | None = None  # None: the master closes the join window after a quiet time
    node_rank: int | None = None  # None: the master is the node owning ``master``
    procs_per_node: int | None = None  # None: the visible GPUs, 1 without
    backend: str = "auto"
    timeouts: Timeouts = field(default_factory=Timeouts)
    mnist_root: str | None = None
    out: Path = Path("nccldoctor-check")  # the user's folder; this run's files go in run_dir
    run_name: str = field(default_factory=new_run_name)  # its folder under out/<node>/ (rundir.py)
    token: str | None = None  # shared secret; never written to a report
    token_from: str = ""  # "--token", the job identity's variable it was derived from, or ""
    node_name: str = ""
    launcher: str = "standalone"  # standalone | torchrun | slurm | mpirun | kubernetes | env
    local: LocalRank | None = None  # set when the launcher started several processes per node
    isolate: str = "auto"  # isolation rounds: auto | always | never (cluster/isolate/rounds.py)

    @property
    def gate_port(self) -> int:
        """nccldoctor's own listener (hello, NAT check, TCP throughput) next to the store."""
        return self.port + 1

    @property
    def run_dir(self) -> Path:
        """Where this process writes and the only place it reads back from: its log, its ranks'
        folders, its reports (docs/design.md#run-folder)."""
        return self.out / self.node_name / self.run_name


def config_from_args(
    *,
    master: str | None = None,
    nodes: int | None = None,
    port: int | None = None,
    node_rank: int | None = None,
    procs_per_node: int | None = None,
    backend: str = "auto",
    timeout: float | None = None,
    phase_timeouts: Sequence[str] = (),
    mnist_root: str | None = None,
    out: Path | None = None,
    run_name: str | None = None,
    token: str | None = None,
    node_name: str | None = None,
    isolate: str = "auto",
    env: Mapping[str, str],
    resolve: Callable[[str], bool] | None = None,
) -> CheckConfig:
    """Flags (None when not given) and the environment to a CheckConfig. ``resolve``: whether a
    host name resolves here (:func:`~nccldoctor.cluster.launchers.host_resolves`), asked of a master taken from Slurm's node
    list only; None asks nothing. ``run_name``: this run's folder under ``out/<node>/``
    (None: the start time and a random suffix); a process other than local rank 0 adds its
    local rank, since local rank 0 makes the folder of that name.

    Raises:
        ConfigError: no master anywhere, a bad value, launcher variables that contradict each
            other, or a process that is not a node agent.
    """
    try:
        said = launcher_env(env)
    except LauncherError as exc:
        raise ConfigError(str(exc)) from None
    if said.launcher == "slurm" and node_rank is None and not env.get("SLURM_STEP_ID"):
        raise ConfigError(
            f"SLURM_JOB_ID={env['SLURM_JOB_ID']} is set but SLURM_STEP_ID is not: this is the "
            "allocation's batch or salloc shell, not a task of srun; start it as "
            "`srun --ntasks-per-node=1 nccldoctor check` (or give --node-rank)"
        )
    if not master and said.nodelist and said.master and resolve and not resolve(said.master):
        raise ConfigError(
            f"{said.nodelist}={env[said.nodelist]}: its first host "
            f"{said.master!r} (the master) does not resolve on this node; expected a host "
            "name every node resolves, or set MASTER_ADDR (or --master) to the master's address"
        )
    master = master or said.master
    if not master:
        how = "pass it with mpirun -x MASTER_ADDR=ADDR" if said.launcher == "mpirun" else "set it"
        raise ConfigError(
            "no master: give --master ADDR (or run under torchrun, Slurm or a PyTorchJob), or "
            f"MASTER_ADDR: {how}"
        )
    try:
        local = local_rank(said, procs_per_node)
    except LauncherError as exc:
        raise ConfigError(str(exc)) from None
    if local is None and said.local_rank not in (None, 0):
        raise ConfigError(
            f"this process has local rank {said.local_rank} but no launcher variable gives "
            "the processes per node (LOCAL_WORLD_SIZE under torchrun, the tasks per node under "
            "srun, OMPI_COMM_WORLD_LOCAL_SIZE under mpirun); run one nccldoctor per node"
        )
    run_name = run_name or new_run_name()
    if why := bad_run_name(run_name):
        raise ConfigError(f"--run-name {run_name!r}: {why}")
    if local is not None and not local.leader:  # local rank 0 makes the folder of that name
        run_name = f"{run_name}.local{local.local_rank}"
    procs_per_node = local.local_world if local else procs_per_node
    port = port if port is not None else (said.port if said.port is not None else DEFAULT_PORT)
    nodes = nodes if nodes is not None else said.nodes
    node_rank = node_rank if node_rank is not None else said.node_rank
    if not 0 < port < 65535:
        raise ConfigError(f"--port {port}: must be between 1 and 65534 (the next one is used too)")
    if nodes is not None and nodes < 1:
        raise ConfigError(f"--nodes {nodes}: must be at least 1")
    if node_rank is not None and (node_rank < 0 or (nodes is not None and node_rank >= nodes)):
        raise ConfigError(f"--node-rank {node_rank}: must be in 0..{(nodes or 1) - 1}")
    if procs_per_node is not None and procs_per_node < 1:
        raise ConfigError(f"--procs-per-node {procs_per_node}: must be at least 1")
    if backend not in BACKENDS:
        raise ConfigError(f"--backend {backend!r}: one of {', '.join(BACKENDS)}")
    if isolate not in ISOLATE_MODES:
        raise ConfigError(f"--isolate {isolate!r}: one of {', '.join(ISOLATE_MODES)}")
    try:
        timeouts = timeouts_from(timeout, phase_timeouts, env)
    except TimeoutsError as exc:
        raise ConfigError(str(exc)) from None
    token, token_from = shared_token(token or env.get("NCCLDOCTOR_TOKEN"), env, port)
    return CheckConfig(
        master=master,
        port=port,
        nodes=nodes,
        node_rank=node_rank,
        procs_per_node=procs_per_node,
        backend=backend,
        timeouts=timeouts,
        mnist_root=mnist_root,
        out=out or Path("nccldoctor-check"),
        run_name=run_name,
        token=token,
        token_from=token_from,
        node_name=node_name or env.get("NCCLDOCTOR_NODE_NAME") or socket.gethostname(),
        launcher=said.launcher,
        local=local,
        isolate=isolate,
    )
