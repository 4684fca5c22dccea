"""Start this node's workers exactly as the cluster contract says (CLUSTER-CONTRACT.md, Launch).

One process per local rank: ``python -m nccldoctor.cluster.worker --config <rank_dir>/config.json``
with the torch launcher variables pointing at the node agents' own store, NCCL's debug output
sent to a file per rank, and the interface the reach phase found unless the user chose one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from nccldoctor.cluster.timeouts import Timeouts
from nccldoctor.cluster.workerconfig import WorkerConfig, WorkerTimeouts
from nccldoctor.debugenv import debug_env


@dataclass
class WorkerSpec:
    """What every local rank of this node shares."""

    run_id: str
    backend: str
    master: str
    port: int
    node_rank: int
    rank_offset: int
    local_world: int
    world_size: int
    interface: str | None
    timeouts: Timeouts
    mnist_root: str | None
    out: Path  # this node's output folder; rank folders go under it


@dataclass
class Launched:
    rank: int
    local_rank: int
    rank_dir: Path
    proc: subprocess.Popen
    log_path: Path


def rank_dir(spec: WorkerSpec, rank: int) -> Path:
    return spec.out / f"rank{rank}"


def worker_config(spec: WorkerSpec, rank: int) -> WorkerConfig:
    """The config of one rank (contract: Config JSON); sizes and dtypes are the worker's defaults."""
    return WorkerConfig(
        run_id=spec.run_id,
        backend=spec.backend,
        rank_dir=str(rank_dir(spec, rank)),
        timeouts=WorkerTimeouts(**spec.timeouts.worker_timeouts()),
        mnist_root=spec.mnist_root,
    )


def worker_env(spec: WorkerSpec, rank: int, local_rank: int, base: Mapping[str, str]) -> dict:
    """The user's env plus the contract's variables; the user's own NCCL settings win."""
    env = dict(base)
    directory = rank_dir(spec, rank)
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(spec.world_size),
        LOCAL_RANK=str(local_rank),
        LOCAL_WORLD_SIZE=str(spec.local_world),
        GROUP_RANK=str(spec.node_rank),
        MASTER_ADDR=spec.master,
        MASTER_PORT=str(spec.port),
    )
    env.update(debug_env(base, directory, coll=True))  # a short run: COLL lines are affordable
    if spec.interface:
        env.setdefault("NCCL_SOCKET_IFNAME", spec.interface)
        env.setdefault("GLOO_SOCKET_IFNAME", spec.interface)
    return env


def launch(spec: WorkerSpec, base_env: Mapping[str, str]) -> list[Launched]:
    """Start every local rank; each in its own session so a Ctrl-C reaches the agent only."""
    launched = []
    for local_rank in range(spec.local_world):
        rank = spec.rank_offset + local_rank
        directory = rank_dir(spec, rank)
        directory.mkdir(parents=True, exist_ok=True)
        config = worker_config(spec, rank).write(directory / "config.json")
        log_path = directory / "worker.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "nccldoctor.cluster.worker", "--config", str(config)],
                env=worker_env(spec, rank, local_rank, base_env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=os.getcwd(),
            )
        launched.append(Launched(rank, local_rank, directory, proc, log_path))
    return launched
