"""One rank of ``nccldoctor check``: who it is (:class:`RankEnv`) and its phases (:class:`Worker`).

Started by the node agent with torchrun-style env (RANK, WORLD_SIZE, LOCAL_RANK, ...;
MASTER_ADDR:MASTER_PORT is the agents' TCPStore), in a process of its own or forked from the
agent (the entry points: worker/entry.py), or run by a launcher's own process that is one rank
of the check (cluster/agent/follower.py). It runs the phases of ``cluster/records.py`` in their
order, each under its deadline there. Everything the agent needs lands in the config's rank_dir
(docs/design.md#records, and the launcher): events.jsonl as it goes, result.json on every exit
path, stacks.txt on SIGUSR1 or at a missed deadline.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

from nccldoctor.cluster.records import EventStatus, phase_budget
from nccldoctor.cluster.worker.collectives import (
    ALLREDUCE,
    Comm,
    SizeProgress,
    check_correctness,
    sweep_bandwidth,
)
from nccldoctor.cluster.worker.config import WorkerConfig
from nccldoctor.cluster.worker.faults import FaultPlan
from nccldoctor.cluster.worker.workerwatch import (
    EventLog,
    PhaseWatch,
    StackDump,
    write_json_atomic,
)
from nccldoctor.facts.ranks import Checksum, MnistResult, RankResult
from nccldoctor.facts.serde import to_dict

EXIT_OK, EXIT_WRONG, EXIT_ERROR = 0, 1, 3
# Odd counts too, so a backend that chunks by rank or by 4 gets its edges tested.
CORRECTNESS_COUNTS = (1, 7, 1024, 65_537)
BANDWIDTH_DTYPE = "float32"
ENV_INTS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_PORT")


@dataclass(frozen=True)
class RankEnv:
    """Who this process is, from the launcher's env (-1 where unknown in a lenient read)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    group_rank: int
    master_addr: str
    master_port: int

    @classmethod
    def from_env(cls, env: Mapping[str, str], strict: bool = True) -> RankEnv:
        values: dict[str, int] = {}
        for name in ENV_INTS:
            text = env.get(name, "")
            if text.strip().isdigit():
                values[name] = int(text)
            elif strict:
                raise ValueError(f"env {name}={text!r}: expected a non-negative integer")
            else:
                values[name] = -1
        addr = env.get("MASTER_ADDR", "")
        if strict and not addr:
            raise ValueError("env MASTER_ADDR is not set")
        if strict and not 0 <= values["RANK"] < values["WORLD_SIZE"]:
            raise ValueError(f"env RANK={values['RANK']} outside WORLD_SIZE={values['WORLD_SIZE']}")
        return cls(*(values[n] for n in ENV_INTS[:5]), addr, values["MASTER_PORT"])


class Worker:
    def __init__(
        self,
        config: WorkerConfig,
        env: Mapping[str, str],
        end: Callable[[int], NoReturn] = os._exit,
    ) -> None:
        """``end(code)``: how the process ends when a deadline passes or a stop signal comes,
        from the phase watch's thread, after result.json is written (a launcher's process that
        is one rank first waits for the check's verdict: agent/follower.py)."""
        self.config = config
        self._end = end
        self.setup_error: str | None = None
        try:
            self.ids = RankEnv.from_env(env)
            self.faults = FaultPlan.from_env(env, self.ids.rank)
        except ValueError as exc:  # reported inside the init phase, where the agent looks
            self.ids = RankEnv.from_env(env, strict=False)
            self.faults = FaultPlan([], self.ids.rank)
            self.setup_error = str(exc)
        rank_dir = Path(config.rank_dir)
        rank_dir.mkdir(parents=True, exist_ok=True)
        self.result_path = rank_dir / "result.json"
        self.events = EventLog(rank_dir / "events.jsonl", self.ids.rank)
        self.watch = PhaseWatch(self.events, StackDump(rank_dir / "stacks.txt"), self._fatal)
        self.problems: list[str] = []  # failed checks: exit 1, the run itself completed
        self._lock = threading.Lock()
        self._finished = False
        self.result = RankResult(
            rank=self.ids.rank,
            node=socket.gethostname(),
            group_rank=self.ids.group_rank,
            local_rank=self.ids.local_rank,
            backend=config.backend,
            world_size=self.ids.world_size,
            pid=os.getpid(),
        )

    # -- bookkeeping -----------------------------------------------------------------------
    def record(self, result: RankResult) -> None:
        """``result`` is this rank's from now on, unless result.json is written already (the
        phases' thread records, the phase watch's may finish at any moment)."""
        with self._lock:
            if not self._finished:
                self.result = result

    def finish(self, exit_code: int, error: str | None) -> bool:
        """Write result.json once; False when another path already did."""
        with self._lock:
            if self._finished:
                return False
            self._finished = True
            self.result = replace(
                self.result, ok=exit_code == EXIT_OK, error=error, exit_code=exit_code
            )
            write_json_atomic(self.result_path, to_dict(self.result))
            return True

    def _fatal(self, error: str) -> None:
        """From the phase watch: a deadline passed or a stop signal came; end the process now."""
        self.events.emit(self.result.phase_reached, EventStatus.FAIL, error)
        if self.finish(EXIT_ERROR, error):
            sys.stdout.flush()
            sys.stderr.flush()
            self._end(EXIT_ERROR)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        timeout_s = phase_budget(name, self.config.timeouts)
        self.record(replace(self.result, phase_reached=name))
        self.events.emit(name, EventStatus.START, f"deadline {timeout_s:g} s")
        self.watch.enter(name, timeout_s)
        started = time.monotonic()
        try:
            self.faults.enter_phase(name)
            yield
        except BaseException as exc:
            self.watch.leave()
            self.events.emit(name, EventStatus.FAIL, f"{type(exc).__name__}: {exc}")
            raise
        self.watch.leave()
        self.events.emit(name, EventStatus.OK, f"{time.monotonic() - started:.3f} s")

    # -- the run ---------------------------------------------------------------------------
    def run(self) -> int:
        self.watch.start()
        try:
            self._phases()
        except BaseException as exc:
            error = f"{self.result.phase_reached}: {type(exc).__name__}: {exc}"
            self.finish(EXIT_ERROR, error)
            return EXIT_ERROR
        code = EXIT_WRONG if self.problems else EXIT_OK
        self.finish(code, "; ".join(self.problems) or None)
        return code

    def _phases(self) -> None:
        with self.phase("init"):
            if self.setup_error:
                raise ValueError(self.setup_error)
            comm = self._init_process_group()
        import torch.distributed as dist

        with self.phase("barrier"):
            if comm.device.type == "cuda":
                dist.barrier(device_ids=[comm.device.index])
            else:
                dist.barrier()
        with self.phase("allreduce_correctness"):
            self._correctness(comm)
        with self.phase("bandwidth"):
            self._bandwidth(comm)
        with self.phase("ddp"):
            model = self._ddp(comm)
        with self.phase("checksum"):
            self._checksum(comm, model)
        with self.phase("destroy"):
            dist.destroy_process_group()

    def _init_process_group(self) -> Comm:
        from datetime import timedelta

        import torch
        import torch.distributed as dist

        ids, timeouts = self.ids, self.config.timeouts
        # Every wait of the TCPStore client (connect retries included) ends at the init deadline.
        store = dist.TCPStore(
            ids.master_addr,
            ids.master_port,
            is_master=False,
            timeout=timedelta(seconds=timeouts.init),
        )
        pg_store = dist.PrefixStore(f"nccldoctor/{self.config.run_id}/pg", store)
        options: dict[str, Any] = {}
        device = torch.device("cpu")
        if self.config.backend == "nccl":
            torch.cuda.set_device(ids.local_rank)
            device = torch.device("cuda", ids.local_rank)
            options["device_id"] = device  # eager NCCL init: a failure is located in "init"
        dist.init_process_group(
            self.config.backend,
            store=pg_store,
            rank=ids.rank,
            world_size=ids.world_size,
            timeout=timedelta(seconds=timeouts.collective),
            **options,
        )
        return Comm(ids.rank, ids.world_size, device)

    def _correctness(self, comm: Comm) -> None:
        phase = "allreduce_correctness"
        rows, skipped = check_correctness(
            ALLREDUCE,
            comm,
            self.config.dtypes,
            CORRECTNESS_COUNTS,
            self.faults.corrupts(phase),
            progress=self._size_progress(phase),
        )
        self.record(replace(self.result, correctness=rows, correctness_skipped=skipped))
        wrong = sum(row.wrong for row in rows)
        if wrong:
            bad = sorted({row.dtype for row in rows if row.wrong})
            self.problems.append(f"{phase}: {wrong} wrong elements ({', '.join(bad)})")

    def _bandwidth(self, comm: Comm) -> None:
        sweep = sweep_bandwidth(
            ALLREDUCE,
            comm,
            self.config.bandwidth_sizes,
            BANDWIDTH_DTYPE,
            self.config.timeouts.bandwidth_budget,
            self.faults.corrupts("bandwidth"),
            progress=self._size_progress("bandwidth"),
        )
        self.record(replace(self.result, bandwidth=sweep.rows, bandwidth_not_run=sweep.not_run))
        wrong = sum(row.wrong for row in sweep.rows)
        if wrong:
            self.problems.append(f"bandwidth: {wrong} wrong elements")

    def _size_progress(self, phase: str) -> SizeProgress:
        def progress(event: str, size: int) -> None:
            sizes = self.result.message_sizes
            if event == "start":
                sizes = replace(sizes, phase=phase, in_flight_bytes=size)
            else:
                largest = max(size, sizes.largest_passed_bytes or 0)
                sizes = replace(sizes, in_flight_bytes=None, last_passed_bytes=size,
                                largest_passed_bytes=largest)  # fmt: skip
            self.record(replace(self.result, message_sizes=sizes))

        return progress

    def _ddp(self, comm: Comm) -> Any:
        from nccldoctor.cluster.worker.mnist import load_mnist, param_checksum, train_ddp

        cfg = self.config
        data = load_mnist(
            cfg.mnist_root, cfg.batch_size * cfg.ddp_steps * comm.world_size, cfg.seed
        )
        trained = train_ddp(
            data,
            rank=comm.rank,
            world_size=comm.world_size,
            device=comm.device,
            steps=cfg.ddp_steps,
            batch_size=cfg.batch_size,
            lr=cfg.lr,
            seed=cfg.seed,
        )
        mnist = MnistResult(
            source=data.source,
            path=data.path,
            reason=data.reason,
            samples=len(data.labels),
            steps=trained.steps,
            loss_before=trained.loss_before,
            loss_after=trained.loss_after,
            param_checksum=param_checksum(trained.model, comm.rank),
        )
        self.record(replace(self.result, mnist=mnist))
        return trained.model

    def _checksum(self, comm: Comm, model: Any) -> None:
        import torch
        import torch.distributed as dist

        from nccldoctor.cluster.worker.mnist import param_checksum

        if self.faults.corrupts("checksum"):  # one ULP off in one weight: not bit-identical
            with torch.no_grad():
                weight = next(model.parameters())
                weight.view(-1)[0] = torch.nextafter(weight.view(-1)[0], weight.new_tensor(1e9))
        # The checksum travels as 5 int64 (the float64 sum's bits, the 32-byte sha256): a plain
        # tensor allgather works on every backend and needs no pickling (all_gather_object).
        own = param_checksum(model, comm.rank)
        packed = struct.pack("<d", own.sum) + bytes.fromhex(own.sha256)
        mine = torch.tensor(struct.unpack("<5q", packed), dtype=torch.int64, device=comm.device)
        parts = [torch.empty_like(mine) for _ in range(comm.world_size)]
        dist.all_gather(parts, mine)
        gathered = []
        for rank, part in enumerate(parts):
            raw = struct.pack("<5q", *part.tolist())
            sum_ = struct.unpack("<d", raw[:8])[0]
            gathered.append(Checksum(rank, sum_, raw[8:].hex()))
        identical = len({c.sha256 for c in gathered}) == 1
        self.record(replace(self.result, checksums=gathered, params_identical=identical))
        if not identical:
            differing = [c.rank for c in gathered if c.sha256 != gathered[0].sha256]
            self.problems.append(f"checksum: DDP replicas differ from rank 0 on ranks {differing}")
