"""Start this node's workers (docs/design.md#phases, the workers phase).

What agent and worker agree on lives in code (docs/design.md#records): the config JSON (``workerconfig``), the env
(:func:`worker_env`), and what a worker leaves in its rank folder (``worker``, ``workerwatch``).

One process per local rank, running ``nccldoctor.cluster.worker.entry`` on ``<rank_dir>/config.json``
with the torch launcher variables pointing at the node agents' own store, NCCL's debug output
sent to a file per rank, and the interface the reach phase found unless the user chose one.

Importing torch takes seconds of CPU, and the agent imports it anyway for its TCPStore (during
preflight, in the background, with what the worker phases use). So the workers are forked from
the agent (:class:`ForkedWorker`): they start with torch loaded, and a node pays for one import,
not one per process. Neither NCCL nor CUDA is initialised in the agent: preflight loads libnccl
(after torch loaded its own, see agent.py) only for ncclGetVersion, which returns a constant
(NVIDIA/nccl src/init.cc); the bootstrap probe runs ncclGetUniqueId in a child process of its
own; NVML is shut down after preflight. The child sets the worker env before anything
reads it. Where the agent could not import torch, or torch says a child could not use CUDA
(:func:`forkable`), each rank is a fresh ``python -m nccldoctor.cluster.worker.entry --config PATH``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from nccldoctor.cluster.agent.local import FollowerProcess
from nccldoctor.cluster.timeouts import Timeouts
from nccldoctor.cluster.torchstart import quiet_omp
from nccldoctor.cluster.worker.config import WorkerConfig, WorkerTimeouts
from nccldoctor.cluster.worker.workerwatch import STOP_SIGNALS
from nccldoctor.debugenv import debug_env
from nccldoctor.facts.serde import from_dict, to_dict


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
    node: str  # this node's name, as local rank 0 has it
    out: Path  # local rank 0's run folder (config.run_dir); rank folders go under it

    def to_dict(self) -> dict:
        """What local rank 0 hands a follower (agent/local.py); the timeouts are the follower's
        own, from the same command line and environment."""
        return {f.name: str(v) if isinstance(v, Path) else v for f in dataclasses.fields(self)
                for v in [getattr(self, f.name)] if f.name != "timeouts"}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, object], timeouts: Timeouts) -> WorkerSpec:
        """The spec local rank 0 handed over, every value of its field's type, run under
        ``timeouts``.

        Raises:
            ValueError: a key missing or unknown, a value null or of the wrong type.
        """
        names = {f.name for f in dataclasses.fields(cls)} - {"timeouts"}
        if set(data) != names:
            raise ValueError(f"worker spec: keys {sorted(data)}, expected {sorted(names)}")
        try:
            return from_dict(cls, {**data, "timeouts": to_dict(timeouts)}, strict=True)
        except TypeError as exc:
            raise ValueError(f"worker spec: {exc}") from None


@dataclass
class Launched:
    rank: int
    local_rank: int
    rank_dir: Path
    proc: Process
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
    """The user's env plus the worker's own variables; the user's own NCCL settings win."""
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
    torch = sys.modules.get("torch")  # the agent's torch is the workers'
    # a short run: COLL lines are affordable
    env.update(
        debug_env(base, directory, coll=True, torch_version=getattr(torch, "__version__", None))
    )
    quiet_omp(env)
    if spec.interface:
        env.setdefault("NCCL_SOCKET_IFNAME", spec.interface)
        env.setdefault("GLOO_SOCKET_IFNAME", spec.interface)
    return env


def launch(spec: WorkerSpec, base_env: Mapping[str, str], fork: bool = False) -> list[Launched]:
    """Start every local rank, each in its own session so that a Ctrl-C reaches the agent only.

    ``fork``: the ranks are forked from this process, which must hold torch and leave CUDA usable
    to a child (:func:`forkable`); otherwise each is a fresh ``--config`` process.
    """
    return [
        launch_one(spec, spec.rank_offset + local_rank, local_rank, base_env, fork)
        for local_rank in range(spec.local_world)
    ]


def launch_one(
    spec: WorkerSpec, rank: int, local_rank: int, base_env: Mapping[str, str], fork: bool
) -> Launched:
    """Start one rank (see :func:`launch`)."""
    directory = prepare(spec, rank)
    config = directory / "config.json"
    env = worker_env(spec, rank, local_rank, base_env)
    log_path = directory / "worker.log"
    if fork:
        proc: Process = ForkedWorker.start(config, env, log_path)
    else:
        argv = ["-m", "nccldoctor.cluster.worker.entry", "--config", str(config)]
        proc = _start(argv, env, log_path, stdin=subprocess.DEVNULL)
    return Launched(rank, local_rank, directory, proc, log_path)


def prepare(spec: WorkerSpec, rank: int) -> Path:
    """The rank's folder, its config.json written into it."""
    directory = rank_dir(spec, rank)
    directory.mkdir(parents=True, exist_ok=True)
    worker_config(spec, rank).write(directory / "config.json")
    return directory


def forkable() -> bool:
    """Whether a worker may be forked from this process: torch is imported (what the fork
    saves), and a child could still use CUDA. Once CUDA was initialised here (a device count
    is enough), torch marks every child a "bad fork" that cannot; a child forked to ask says."""
    torch = sys.modules.get("torch")
    if torch is None or sys.platform != "linux":
        return False
    in_bad_fork = getattr(torch.cuda, "_is_in_bad_fork", None)
    if in_bad_fork is None:  # torch no longer says: fork only a build without CUDA
        return torch.version.cuda is None
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 1 if in_bad_fork() else 0
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


class ForkedWorker:
    """A worker forked from the agent: the part of :class:`subprocess.Popen` the watchdog uses
    (``pid``, ``returncode``, ``poll``, ``wait``)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd = os.pidfd_open(pid)  # select()able: wait(timeout) without polling

    @classmethod
    def start(cls, config: Path, env: Mapping[str, str], log_path: Path) -> ForkedWorker:
        from nccldoctor.cluster.worker import entry

        # The child writes to fresh streams, but a stale reference to these (a logging handler's)
        # would write the agent's pending output into the rank's log.
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(AttributeError, OSError, ValueError):  # None, or closed
                stream.flush()
        # Blocked across the fork: the child must not run the agent's own signal handlers
        # before the worker takes SIGTERM/SIGINT over (it keeps them blocked, see workerwatch).
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            pid = os.fork()
            if pid == 0:
                entry.forked_main(str(config), env, log_path)  # never returns
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return cls(pid)

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
                os.close(self._pidfd)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.poll() is None:
            select.select([self._pidfd], [], [], timeout)
            if self.poll() is None:
                raise subprocess.TimeoutExpired(f"worker pid {self.pid}", timeout or 0)
        return self.returncode


Process = subprocess.Popen | ForkedWorker | FollowerProcess


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
