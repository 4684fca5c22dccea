"""A small launcher for worker tests: a TCPStore master here, N real worker processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from nccldoctor.cluster.records import WorkerEvent
from nccldoctor.cluster.worker.config import WorkerConfig, WorkerTimeouts
from nccldoctor.facts.ranks import RankResult

REPO = Path(__file__).resolve().parents[2]
SMALL_SIZES = [4**k for k in range(1, 11)]  # 4 B … 1 MiB: quick on two cores


@dataclass
class Ranks:
    procs: list[subprocess.Popen]
    dirs: list[Path]
    started: float

    def wait(self, timeout: float) -> list[int]:
        end = time.monotonic() + timeout
        codes = []
        for proc in self.procs:
            try:
                codes.append(proc.wait(timeout=max(0.1, end - time.monotonic())))
            except subprocess.TimeoutExpired:
                self.kill()
                raise
        return codes

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def result(self, rank: int) -> RankResult:
        return RankResult.from_json((self.dirs[rank] / "result.json").read_text())

    def events(self, rank: int) -> list[WorkerEvent]:
        """Every event the rank wrote so far; each line the worker writes is one."""
        path = self.dirs[rank] / "events.jsonl"
        if not path.exists():
            return []
        lines = path.read_text().splitlines()
        events = [event for line in lines if (event := WorkerEvent.from_line(line))]
        assert len(events) == len(lines), "\n".join(lines)
        return events

    def output(self, rank: int) -> str:
        return (self.dirs[rank] / "worker.log").read_text(errors="replace")


def start_store() -> Any:
    import torch.distributed as dist

    return dist.TCPStore(
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30)
    )


def launch(
    tmp: Path,
    store: Any,
    n: int,
    *,
    fault: str | None = None,
    timeouts: dict[str, float] | None = None,
    **config: Any,
) -> Ranks:
    """Start n workers with the worker env of agent/launcher.py, each with its own rank_dir and config."""
    run_id = f"t{os.getpid()}x{time.monotonic_ns()}"
    commands = []
    for rank in range(n):
        rank_dir = tmp / f"rank{rank}"
        rank_dir.mkdir(parents=True)
        cfg = WorkerConfig(
            run_id=run_id,
            backend="gloo",
            rank_dir=str(rank_dir),
            timeouts=WorkerTimeouts(**{"bandwidth_budget": 0.5, **(timeouts or {})}),
            bandwidth_sizes=config.get("bandwidth_sizes", SMALL_SIZES),
            ddp_steps=config.get("ddp_steps", 3),
            **{k: v for k, v in config.items() if k not in ("bandwidth_sizes", "ddp_steps")},
        )
        path = cfg.write(rank_dir / "config.json")
        commands.append(["-m", "nccldoctor.cluster.worker.entry", "--config", str(path)])
    return spawn(tmp, store, commands, fault=fault)


def spawn(tmp: Path, store: Any, commands: list[list[str]], fault: str | None = None) -> Ranks:
    """Run ``python <command[rank]>`` for each rank with the worker env of agent/launcher.py; output in rank<r>/."""
    n = len(commands)
    procs, dirs = [], []
    for rank, command in enumerate(commands):
        rank_dir = tmp / f"rank{rank}"
        rank_dir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k != "NCCLDOCTOR_FAULT"}
        env.update(
            RANK=str(rank),
            WORLD_SIZE=str(n),
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE=str(n),
            GROUP_RANK="0",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(store.port),
            GLOO_SOCKET_IFNAME="lo",
            PYTHONPATH=str(REPO),
            PYTHONFAULTHANDLER="1",
        )
        if fault:
            env["NCCLDOCTOR_FAULT"] = fault
        with (rank_dir / "worker.log").open("wb") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, *command],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=tmp,
                )
            )
        dirs.append(rank_dir)
    return Ranks(procs, dirs, time.monotonic())
