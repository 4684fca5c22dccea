"""Start this node's workers exactly as the cluster contract says (CLUSTER-CONTRACT.md, Launch).

One process per local rank: ``python -m nccldoctor.cluster.worker --config <rank_dir>/config.json``
with the torch launcher variables pointing at the node agents' own store, NCCL's debug output
sent to a file per rank, and the interface the reach phase found unless the user chose one.

Importing torch takes seconds, so the agent starts the workers on standby as it starts, the rest
once preflight has counted the GPUs (:func:`standby`: ``worker --standby SECONDS``, the user's env, stdin a pipe), while it runs reach,
rendezvous and bootstrap. :func:`launch` then hands each one its config and the contract's env
(``workerconfig.Handoff``, one line on stdin) and moves its log to ``<rank_dir>/worker.log``; a
standby that is gone or refuses the line is replaced by a fresh ``--config`` process, and one the
run does not use is killed (:func:`release`: nothing ran in it yet). A standby also ends by itself
when its stdin closes, so not even a killed agent leaves one behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nccldoctor.cluster.timeouts import Timeouts
from nccldoctor.cluster.workerconfig import Handoff, WorkerConfig, WorkerTimeouts
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


@dataclass
class Standby:
    """A worker started before its rank is known, importing torch until its handoff."""

    local_rank: int
    proc: subprocess.Popen
    log_path: Path
    env: dict[str, str]  # what it was started with; the handoff sends the difference


def standby(
    local_ranks: Sequence[int], base_env: Mapping[str, str], folder: Path, wait_s: float
) -> list[Standby]:
    """Start workers on standby for ``local_ranks``, for up to ``wait_s`` seconds; logs under
    ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    started: list[Standby] = []
    for local_rank in local_ranks:
        log_path = folder / f"local{local_rank}.log"
        argv = ["-m", "nccldoctor.cluster.worker", "--standby", f"{wait_s:g}"]
        try:
            proc = _start(argv, dict(base_env), log_path, stdin=subprocess.PIPE)
        except OSError:
            release(started)
            raise
        started.append(Standby(local_rank, proc, log_path, dict(base_env)))
    return started


def release(standbys: Sequence[Standby]) -> None:
    """Kill standby workers the run will not use; nothing ran in them, so nothing is lost."""
    for item in standbys:
        if item.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(item.proc.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):  # a handoff that failed may still be buffered
            item.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            item.proc.wait(timeout=2)
        item.log_path.unlink(missing_ok=True)
    for folder in {item.log_path.parent for item in standbys}:
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when empty: a standby that was handed off moved its log


def launch(
    spec: WorkerSpec, base_env: Mapping[str, str], standbys: Sequence[Standby] = ()
) -> list[Launched]:
    """Start every local rank, through a standby worker where one is ready; the rest of
    ``standbys`` is released. Each worker runs in its own session, so a Ctrl-C reaches the
    agent only."""
    spare = {item.local_rank: item for item in standbys}
    launched = []
    for local_rank in range(spec.local_world):
        rank = spec.rank_offset + local_rank
        directory = rank_dir(spec, rank)
        directory.mkdir(parents=True, exist_ok=True)
        config = worker_config(spec, rank).write(directory / "config.json")
        env = worker_env(spec, rank, local_rank, base_env)
        log_path = directory / "worker.log"
        item = spare.pop(local_rank, None)
        proc = _hand_off(item, config, env, log_path) if item else None
        if proc is None:
            argv = ["-m", "nccldoctor.cluster.worker", "--config", str(config)]
            proc = _start(argv, env, log_path, stdin=subprocess.DEVNULL)
        launched.append(Launched(rank, local_rank, directory, proc, log_path))
    release(list(spare.values()))
    return launched


def _hand_off(
    item: Standby, config: Path, env: dict[str, str], log_path: Path
) -> subprocess.Popen | None:
    """Give a standby worker its rank; None (and the standby ended) when it cannot take it."""
    changed = {name: value for name, value in env.items() if item.env.get(name) != value}
    try:
        if item.proc.poll() is not None:
            raise OSError(f"the standby ended with status {item.proc.returncode}")
        item.proc.stdin.write(Handoff(str(config), changed).to_line())
        item.proc.stdin.close()
    except OSError:  # gone (its wait ran out, or it crashed importing torch): start afresh
        release([item])
        return None
    os.replace(item.log_path, log_path)  # the same open file, now where the rank's log belongs
    with contextlib.suppress(OSError):
        item.log_path.parent.rmdir()
    return item.proc


def _start(argv: list[str], env: dict[str, str], log_path: Path, stdin: int) -> subprocess.Popen:
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [sys.executable, *argv],
            env=env,
            stdin=stdin,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=os.getcwd(),
        )
