"""Collectives as descriptors over one harness, in the manner of NVIDIA nccl-tests.

A descriptor (``Collective``) knows one collective: how a rank fills its input, the exact result
every rank must end with, how many bytes the nccl-tests "size" column counts, and its bus-bandwidth
factor. The harness (``check_correctness``, ``sweep_bandwidth``) owns everything else: warmup, the
size sweep under a time budget, timing, combining times across ranks (max, as nccl-tests ``-a 3``)
before any bandwidth is computed, and the exact check (``#wrong``, summed over ranks as nccl-tests
does). algbw = bytes / 1e9 / seconds; busbw = algbw × bus_factor(n).

Values are small integers, so every partial sum is exact in every dtype whatever order the
backend adds in, and a check compares bit for bit.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nccldoctor.facts.ranks import BandwidthRow, CorrectnessRow, Skipped

if TYPE_CHECKING:
    import torch

# Largest integer N such that every integer in [0, N] is exact in the dtype (and no overflow).
EXACT_INTEGER_LIMIT = {
    "float64": 2**53,
    "float32": 2**24,
    "float16": 2**11,
    "bfloat16": 2**8,
    "int64": 2**63 - 1,
    "int32": 2**31 - 1,
    "int8": 2**7 - 1,
    "uint8": 2**8 - 1,
}
MAX_VALUE = 251  # values cycle through 1..m with m <= 251 (prime, so patterns don't align)
MAX_ITERS = 20  # nccl-tests' default -n
WARMUP_ITERS = 1  # nccl-tests' default -w (and the checked run)
SIZE_SHARE = 0.25  # one size may use this share of the bandwidth budget for its timed loop
# How backends word "this dtype is not supported" (gloo: "Invalid scalar type"; ProcessGroupNCCL:
# "Input tensor data type is not supported for NCCL process group").
_UNSUPPORTED = re.compile(r"scalar type|data ?type|dtype|not supported|unsupported", re.I)


def torch_dtype(name: str) -> torch.dtype:
    import torch

    return getattr(torch, name)


def value_modulus(dtype: str, n: int) -> int | None:
    """Values run over 1..m; None when even all-ones cannot be summed exactly over n ranks."""
    m = min(MAX_VALUE, EXACT_INTEGER_LIMIT[dtype] // n)
    return m if m >= 1 else None


def rank_values(rank: int, n: int, count: int, dtype: str, device: Any) -> torch.Tensor:
    """Rank r's element i is 1 + (i + r) mod m: rank-dependent, small, exact in ``dtype``."""
    period = _int_values(rank, n, _period(count, dtype, n), dtype, device)
    return _tile(period.to(torch_dtype(dtype)), count)


def _int_values(rank: int, n: int, count: int, dtype: str, device: Any) -> torch.Tensor:
    import torch

    m = value_modulus(dtype, n) or 1
    return 1 + (torch.arange(count, dtype=torch.int64, device=device) + rank) % m


def _sum_expected(n: int, count: int, dtype: str, device: Any) -> torch.Tensor:
    period = _period(count, dtype, n)
    total = sum(_int_values(r, n, period, dtype, device) for r in range(n))
    return _tile(total.to(torch_dtype(dtype)), count)


# The values repeat every m elements: one period is computed and copied out. The formula itself
# over a 64 MiB buffer (int64 arange, modulo, conversion) took seconds on a loaded CPU, several
# times the collective it checks, and every bandwidth size pays it twice (input and expected).
def _period(count: int, dtype: str, n: int) -> int:
    return min(count, value_modulus(dtype, n) or 1)


def _tile(period: torch.Tensor, count: int) -> torch.Tensor:
    return period.repeat(-(-count // period.numel()))[:count]


def _gather_expected(n: int, count: int, dtype: str, device: Any) -> torch.Tensor:
    import torch

    return torch.cat([rank_values(r, n, count, dtype, device) for r in range(n)])


def _same_buffer(inp: torch.Tensor, n: int) -> torch.Tensor:
    return inp


def _gather_buffer(inp: torch.Tensor, n: int) -> torch.Tensor:
    import torch

    return torch.empty(inp.numel() * n, dtype=inp.dtype, device=inp.device)


def _run_allreduce(inp: torch.Tensor, out: torch.Tensor) -> None:
    import torch.distributed as dist

    dist.all_reduce(out, op=dist.ReduceOp.SUM)


def _run_allgather(inp: torch.Tensor, out: torch.Tensor) -> None:
    import torch.distributed as dist

    # The chunks are views of ``out``: gloo and NCCL both fill them in place.
    dist.all_gather(list(out.chunk(dist.get_world_size())), inp)


def _run_broadcast(inp: torch.Tensor, out: torch.Tensor) -> None:
    import torch.distributed as dist

    dist.broadcast(out, src=0)


@dataclass(frozen=True)
class Collective:
    """One collective, as nccl-tests' ``testColl``; ``count`` is always the per-rank input count."""

    name: str
    fill: Callable[[int, int, int, str, Any], torch.Tensor]  # (rank, n, count, dtype, device)
    expected: Callable[[int, int, str, Any], torch.Tensor]  # (n, count, dtype, device)
    output: Callable[[torch.Tensor, int], torch.Tensor]  # (input, n) -> output buffer
    run: Callable[[torch.Tensor, torch.Tensor], None]  # (input, output)
    bus_factor: Callable[[int], float]  # n -> busbw / algbw
    ranks_in_size: bool  # nccl-tests' size counts all ranks' data (allgather, reducescatter)

    def input_count(self, size_bytes: int, itemsize: int, n: int) -> int:
        return size_bytes // itemsize // (n if self.ranks_in_size else 1)

    def size_bytes(self, count: int, itemsize: int, n: int) -> int:
        return count * itemsize * (n if self.ranks_in_size else 1)


# Bus factors from nccl-tests doc/PERFORMANCE.md ("Bus bandwidth" section, and *GetBw in
# src/all_reduce.cu, all_gather.cu, broadcast.cu): allreduce moves 2(n-1)/n of the data over
# each link, allgather/reducescatter (n-1)/n, broadcast 1.
ALLREDUCE = Collective(
    name="allreduce",
    fill=rank_values,
    expected=_sum_expected,
    output=_same_buffer,
    run=_run_allreduce,
    bus_factor=lambda n: 2 * (n - 1) / n,
    ranks_in_size=False,
)
ALLGATHER = Collective(
    name="allgather",
    fill=rank_values,
    expected=_gather_expected,
    output=_gather_buffer,
    run=_run_allgather,
    bus_factor=lambda n: (n - 1) / n,
    ranks_in_size=True,
)
BROADCAST = Collective(
    name="broadcast",
    fill=rank_values,
    expected=lambda n, count, dtype, device: rank_values(0, n, count, dtype, device),
    output=_same_buffer,
    run=_run_broadcast,
    bus_factor=lambda n: 1.0,
    ranks_in_size=False,
)
COLLECTIVES = {c.name: c for c in (ALLREDUCE, ALLGATHER, BROADCAST)}


@dataclass(frozen=True)
class Comm:
    """This rank's view of the process group, for the harness's own bookkeeping collectives."""

    rank: int
    world_size: int
    device: Any

    def sync(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def reduce(self, values: Sequence[float], op: str) -> list[float]:
        """Combine small per-rank numbers across ranks: op "max" or "sum"."""
        import torch
        import torch.distributed as dist

        buf = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        dist.all_reduce(buf, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return buf.tolist()


def _checked_run(
    coll: Collective, comm: Comm, count: int, dtype: str, corrupt: bool
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Fill, run once, count this rank's wrong elements; returns the buffers for reuse."""
    import torch

    inp = coll.fill(comm.rank, comm.world_size, count, dtype, comm.device)
    if corrupt:  # NCCLDOCTOR_FAULT=wrong: this rank's contribution is off by one element
        inp[0] += 1
    out = coll.output(inp, comm.world_size)
    coll.run(inp, out)
    comm.sync()
    expected = coll.expected(comm.world_size, count, dtype, comm.device)
    wrong = 0 if torch.equal(out, expected) else int((out != expected).sum())
    return inp, out, wrong


# Told ("start", size) before a size's first collective and ("done", size) once every rank got
# through it: a rank that stops in between knows the size it stalled at (see worker.py).
SizeProgress = Callable[[str, int], None]


def _no_progress(event: str, size: int) -> None:
    return None


def unsupported_reason(exc: BaseException) -> str | None:
    """The backend's own words when ``exc`` says a dtype is not supported, else None."""
    if isinstance(exc, (TypeError, RuntimeError)) and _UNSUPPORTED.search(str(exc)):
        return str(exc).strip().splitlines()[0]
    return None


def check_correctness(
    coll: Collective,
    comm: Comm,
    dtypes: Sequence[str],
    counts: Sequence[int],
    corrupt: bool,
    progress: SizeProgress = _no_progress,
) -> tuple[list[CorrectnessRow], list[Skipped]]:
    """Exact checks over dtypes x counts: (a row each, the dtypes skipped and why)."""
    rows: list[CorrectnessRow] = []
    skipped: list[Skipped] = []
    for dtype in dtypes:
        if value_modulus(dtype, comm.world_size) is None:
            reason = f"{dtype} cannot hold the sum of {comm.world_size} ranks exactly"
            skipped.append(Skipped(dtype, reason))
            continue
        for count in counts:
            size = coll.size_bytes(count, torch_dtype(dtype).itemsize, comm.world_size)
            progress("start", size)
            try:
                wrong = _checked_run(coll, comm, count, dtype, corrupt)[2]
            except (TypeError, RuntimeError) as exc:
                reason = unsupported_reason(exc)
                if reason is None:
                    raise
                skipped.append(Skipped(dtype, f"{comm.device.type}: {reason}"))
                break
            total = int(comm.reduce([wrong], "sum")[0])
            progress("done", size)
            rows.append(CorrectnessRow(dtype, count, total == 0, total))
    return rows, skipped


@dataclass
class Sweep:
    rows: list[BandwidthRow]
    not_run: list[int]  # sizes the time budget left out (or too small for the dtype)


def sweep_bandwidth(
    coll: Collective,
    comm: Comm,
    sizes: Sequence[int],
    dtype: str,
    budget_s: float,
    corrupt: bool = False,
    clock: Callable[[], float] = time.perf_counter,
    progress: SizeProgress = _no_progress,
) -> Sweep:
    """nccl-tests' size sweep, smallest first, stopping before a size would pass the budget.

    Every decision (iterations, stop) is taken from numbers already combined across ranks, so all
    ranks run the same collectives and none is left waiting.
    """
    n, itemsize = comm.world_size, torch_dtype(dtype).itemsize
    rows: list[BandwidthRow] = []
    not_run: list[int] = []
    start = clock()
    spent = 0.0  # max over ranks of the time spent so far
    timed: list[tuple[int, float]] = []  # (size, combined seconds per iteration)
    for position, size in enumerate(sizes):
        count = coll.input_count(size, itemsize, n)
        if count == 0:
            not_run.append(size)
            continue
        iters = MAX_ITERS
        if timed:
            predicted = predict_seconds(timed, size)
            iters = max(1, min(MAX_ITERS, int(budget_s * SIZE_SHARE / predicted)))
            if spent + predicted * (iters + WARMUP_ITERS) > budget_s:
                not_run.extend(sizes[position:])
                break
        nbytes = coll.size_bytes(count, itemsize, n)
        progress("start", nbytes)
        inp, out, wrong = _checked_run(coll, comm, count, dtype, corrupt)
        inp.zero_()  # the timed runs reduce zeros, so in-place sums never grow
        out.zero_()
        began = clock()
        for _ in range(iters):
            coll.run(inp, out)
        comm.sync()
        seconds = (clock() - began) / iters
        seconds, spent = comm.reduce([seconds, clock() - start], "max")
        total_wrong = int(comm.reduce([wrong], "sum")[0])
        progress("done", nbytes)
        algbw = nbytes / 1e9 / seconds
        rows.append(
            BandwidthRow(
                size_bytes=nbytes,
                count=nbytes // itemsize,
                dtype=dtype,
                time_us=seconds * 1e6,
                algbw_GBps=algbw,
                busbw_GBps=algbw * coll.bus_factor(n),
                wrong=total_wrong,
                iters=iters,
                time_combine="max",
            )
        )
        timed.append((size, seconds))
    return Sweep(rows, not_run)


def predict_seconds(timed: Sequence[tuple[int, float]], size: int) -> float:
    """Seconds per iteration at ``size``, from the sizes timed so far (ascending).

    A line through the last two points (latency + bytes/bandwidth, slope clamped at 0) when
    there are two; proportional to size from a single point (pessimistic, so safe).
    """
    last_size, last_s = timed[-1]
    if len(timed) == 1:
        return last_s * size / last_size
    prev_size, prev_s = timed[-2]
    slope = max(0.0, (last_s - prev_s) / (last_size - prev_size))
    return last_s + slope * (size - last_size)
