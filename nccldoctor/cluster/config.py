"""`nccldoctor check`'s settings, translated from flags and the launcher's environment.

``config_from_args`` is pure: flags and an env mapping in, a :class:`CheckConfig` out. Flags win;
then the launcher's variables, so ``srun nccldoctor check`` and ``torchrun nccldoctor check``
need no flags:

- torchrun (``TORCHELASTIC_RUN_ID`` set): ``MASTER_ADDR``; nodes = ``WORLD_SIZE`` /
  ``LOCAL_WORLD_SIZE``; node rank = ``GROUP_RANK``. ``MASTER_PORT`` is torchrun's own store, so
  nccldoctor keeps ``--port``. Run one nccldoctor per node (``--nproc-per-node 1``).
- Slurm (``SLURM_JOB_ID``): nodes = ``SLURM_JOB_NUM_NODES``/``SLURM_NNODES``, node rank =
  ``SLURM_NODEID``, master = ``MASTER_ADDR`` or the first host of ``SLURM_JOB_NODELIST``.
- Kubernetes PyTorchJob (``PET_NNODES`` or ``KUBERNETES_SERVICE_HOST``): ``MASTER_ADDR``,
  ``MASTER_PORT``, nodes = ``PET_NNODES`` or ``WORLD_SIZE`` (one pod per node), node rank =
  ``PET_NODE_RANK`` or ``RANK``.
- Plain env (``MASTER_ADDR`` set): ``MASTER_PORT``, ``WORLD_SIZE`` and ``RANK`` as node count
  and node rank (one process per node, as in the two-container DDP setup).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nccldoctor.cluster.timeouts import Timeouts, TimeoutsError, timeouts_from

DEFAULT_PORT = 29400
BACKENDS = ("auto", "nccl", "gloo")


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
    out: Path = Path("nccldoctor-check")
    token: str | None = None  # shared secret; never written to a report
    node_name: str = ""
    launcher: str = "standalone"  # standalone | torchrun | slurm | kubernetes | env

    @property
    def gate_port(self) -> int:
        """nccldoctor's own listener (hello, NAT check, TCP throughput) next to the store."""
        return self.port + 1


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
    token: str | None = None,
    node_name: str | None = None,
    env: Mapping[str, str],
) -> CheckConfig:
    """Flags (None when not given) and the environment to a CheckConfig.

    Raises:
        ConfigError: no master anywhere, a bad value, or a process that is not a node agent.
    """
    launcher, found = _launcher_env(env)
    master = master or found.get("master")
    if not master:
        raise ConfigError(
            "no master: give --master ADDR (or run under torchrun, Slurm or a PyTorchJob, "
            "or set MASTER_ADDR)"
        )
    if found.get("local_rank", 0) != 0:
        raise ConfigError(
            f"this process has local rank {found['local_rank']}: run one nccldoctor per node "
            "(torchrun --nproc-per-node 1, srun --ntasks-per-node 1); it starts the workers itself"
        )
    port = port if port is not None else found.get("port", DEFAULT_PORT)
    nodes = nodes if nodes is not None else found.get("nodes")
    node_rank = node_rank if node_rank is not None else found.get("node_rank")
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
    try:
        timeouts = timeouts_from(timeout, phase_timeouts, env)
    except TimeoutsError as exc:
        raise ConfigError(str(exc)) from None
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
        token=token or env.get("NCCLDOCTOR_TOKEN") or None,
        node_name=node_name or env.get("NCCLDOCTOR_NODE_NAME") or socket.gethostname(),
        launcher=launcher,
    )


def _launcher_env(env: Mapping[str, str]) -> tuple[str, dict]:
    """Which launcher started us, and what its variables say (master, port, nodes, node_rank)."""
    found: dict = {}
    if env.get("MASTER_ADDR"):
        found["master"] = env["MASTER_ADDR"]
    if env.get("TORCHELASTIC_RUN_ID"):
        world, local_world = _int(env, "WORLD_SIZE"), _int(env, "LOCAL_WORLD_SIZE") or 1
        _put(found, "nodes", world // local_world if world else None)
        _put(found, "node_rank", _int(env, "GROUP_RANK"))
        _put(found, "local_rank", _int(env, "LOCAL_RANK"))
        return "torchrun", found
    if env.get("SLURM_JOB_ID"):
        _put(found, "nodes", _first(_int(env, "SLURM_JOB_NUM_NODES"), _int(env, "SLURM_NNODES")))
        _put(found, "node_rank", _int(env, "SLURM_NODEID"))
        _put(found, "local_rank", _int(env, "SLURM_LOCALID"))
        _put(found, "port", _int(env, "MASTER_PORT"))
        if "master" not in found and env.get("SLURM_JOB_NODELIST"):
            found["master"] = first_slurm_host(env["SLURM_JOB_NODELIST"])
        return "slurm", found
    _put(found, "port", _int(env, "MASTER_PORT"))
    if env.get("PET_NNODES") or (env.get("KUBERNETES_SERVICE_HOST") and "master" in found):
        found.setdefault("master", env.get("PET_MASTER_ADDR"))
        _put(found, "nodes", _first(_int(env, "PET_NNODES"), _int(env, "WORLD_SIZE")))
        _put(found, "node_rank", _first(_int(env, "PET_NODE_RANK"), _int(env, "RANK")))
        return "kubernetes", found
    if "master" in found:
        _put(found, "nodes", _int(env, "WORLD_SIZE"))
        _put(found, "node_rank", _int(env, "RANK"))
        _put(found, "local_rank", _int(env, "LOCAL_RANK"))
        return "env", found
    return "standalone", {}


def first_slurm_host(nodelist: str) -> str:
    """The first host of a Slurm hostlist: ``gpu[03-05,9],cpu1`` -> ``gpu03``."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not match:
        return nodelist
    prefix, ranges = match.groups()
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def _int(env: Mapping[str, str], name: str) -> int | None:
    try:
        return int(env[name])
    except (KeyError, ValueError):
        return None


def _first(*values: int | None) -> int | None:
    return next((v for v in values if v is not None), None)


def _put(found: dict, key: str, value: object) -> None:
    if value is not None:
        found[key] = value
