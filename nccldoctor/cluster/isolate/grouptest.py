"""One node's part in one group's test: a fresh process group on its own store prefix, init,
an exact allreduce, and busbw at three sizes (docs/design.md#isolation).

Run in a thread of the node agent, after its workers ended: torch is loaded, and a group of a
round is a process group of its own (``ProcessGroupGloo`` or ``ProcessGroupNCCL`` made directly
on a ``PrefixStore``), never the default one. Every op carries the group's deadline; the caller
also stops waiting at it (``run_member``), so a hung op costs a thread, not the round.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from nccldoctor.cluster.isolate.messages import MemberResult
from nccldoctor.cluster.worker.collectives import rank_values

# (bytes, timed iterations): small enough that a rate-limited link still finishes one in seconds,
# the largest big enough that the link, not the latency, bounds it
SIZES = ((64 << 10, 5), (1 << 20, 3), (8 << 20, 2))
CHECK_COUNT = 65_537  # odd: a backend that chunks by rank gets its edge tested
GRACE_S = 2.0  # past the group's deadline, a member stops waiting for its ops
OVER_POLL_S = 0.25  # how often a member waiting on its group asks whether the round is over


@dataclass(frozen=True)
class GroupSpec:
    master: str
    port: int
    prefix: str  # the group's own keys in the run's store
    rank: int
    size: int
    backend: str  # gloo | nccl
    interface: str | None  # the interface gloo binds to (the one towards the master)
    deadline_s: float
    ready_key: str = ""  # set in the store once the first op is done (the group connected)


def run_member(spec: GroupSpec, over: Callable[[], bool] = lambda: False) -> MemberResult:
    """This node's part, within ``spec.deadline_s`` whatever the group does, or until ``over()``
    says the master reads no more of it (a hung op is left to its own timeout in its thread)."""
    result = MemberResult()
    done = threading.Event()

    def work() -> None:
        try:
            _measure(spec, result)
            result.status = "ok"
        except Exception as exc:  # torch raises DistError, RuntimeError, TimeoutError ...
            result.status, result.error = "error", f"{type(exc).__name__}: {exc}"
        finally:
            done.set()

    threading.Thread(target=work, name="nccldoctor-isolate", daemon=True).start()
    end = time.monotonic() + spec.deadline_s + GRACE_S  # the ops' own timeout is the deadline
    while not done.wait(min(OVER_POLL_S, max(0.0, end - time.monotonic()))):
        if time.monotonic() >= end:
            why = f"no answer within the group's deadline of {spec.deadline_s:.0f} s"
        elif over():
            why = "the master ended the round before this group's test did"
        else:
            continue
        return MemberResult("timeout", result.init_s, list(result.seconds), why)
    return result


def _measure(spec: GroupSpec, result: MemberResult) -> None:
    import torch
    import torch.distributed as dist

    timeout = timedelta(seconds=spec.deadline_s)
    client = dist.TCPStore(spec.master, spec.port, is_master=False, timeout=timeout)
    store = dist.PrefixStore(spec.prefix, client)
    started = time.perf_counter()
    if spec.backend == "nccl":
        # a timed-out NCCL op tears the process down by default (torch's async error handling
        # 3): here the process is the node's agent, whose report must still be written
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2")
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        group = dist.ProcessGroupNCCL(store, spec.rank, spec.size, options)
    else:
        device = torch.device("cpu")
        options = dist.ProcessGroupGloo._Options()
        options._timeout = timeout
        make = dist.ProcessGroupGloo.create_device
        options._devices = [make(interface=spec.interface) if spec.interface else make()]
        group = dist.ProcessGroupGloo(store, spec.rank, spec.size, options)
    try:
        values = rank_values(spec.rank, spec.size, CHECK_COUNT, "float32", device)
        _reduce(group, values)  # the first op: the connections are made by now
        result.init_s = round(time.perf_counter() - started, 4)
        if spec.ready_key:
            client.set(spec.ready_key, str(result.init_s))
        expected = sum(rank_values(r, spec.size, CHECK_COUNT, "float32", device)
                       for r in range(spec.size))  # fmt: skip
        if not torch.equal(values, expected):
            wrong = int((values != expected).sum())
            raise ValueError(f"allreduce gave {wrong} wrong values of {CHECK_COUNT}")
        for size, iterations in SIZES:
            tensor = torch.ones(size // 4, dtype=torch.float32, device=device)
            _reduce(group, tensor)  # warm-up, and every member starts the timing together
            start = time.perf_counter()
            for _ in range(iterations):
                _reduce(group, tensor)
            result.seconds.append((size, (time.perf_counter() - start) / iterations))
    finally:
        if spec.backend == "nccl":
            group.shutdown() if hasattr(group, "shutdown") else None
        del group


def _reduce(group: Any, tensor: Any) -> None:
    import torch

    group.allreduce([tensor]).wait()
    if tensor.device.type == "cuda":
        torch.cuda.synchronize(tensor.device)
