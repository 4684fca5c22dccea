"""Throughput of checks.signatures.match_line on a realistic NCCL INFO/WARN mix.

Prints lines/s for: match_line, one `str.__contains__` per line (the floor any filter must pay),
one search of a single literal regex,
and the naive alternative (every signature's regex searched on every line), with the ratios.
Usage: python bench/signatures.py [--lines N]
"""

from __future__ import annotations

import argparse
import random
import re
import time
from collections.abc import Callable

from checks.signatures import SIGNATURES, match_line

# Healthy-log lines as NCCL 2.2x prints them (docs/nccl-log-formats.md), plus rare failures.
_HEALTHY = (
    "node-a:4711:4711 [0] NCCL INFO Bootstrap: Using eth0:198.18.0.2<0>",
    "node-a:4711:4790 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB ib0:198.18.1.11<0>",
    "node-a:4711:4790 [0] NCCL INFO Using network IB",
    "node-a:4711:4790 [0] NCCL INFO ncclCommInitRankConfig comm 0x55d1c2a0 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 18000 commId 0x9f3c1b2ad4e5f601 - Init START",
    "node-a:4711:4790 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA",
    "node-a:4711:4790 [0] NCCL INFO Channel 01/0 : 2[2] -> 3[3] via P2P/CUMEM/read",
    "node-a:4711:4790 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] -1/-1/-1->0->1",
    "node-a:4711:4790 [0] NCCL INFO AllReduce: opCount 2a sendbuff 0x7f1c40000000 recvbuff 0x7f1c40000000 count 2097152 datatype 7 op 0 root 0 comm 0x55d1c2a0 [nranks=16] stream 0x55d1d000",
    "node-a:4711:4790 [0] NCCL INFO AllReduce: 8388608 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..15}",
    "node-a:4711:4790 [0] NCCL INFO     AllReduce |    10.4/   3.2 |    18.6/  26.7 |    46.2/  62.5 |     8.7/   6.0 |    13.4/  51.0 |    24.4/  96.0 |     0.0/   0.0 |     0.0/   0.0 |     0.0/   0.0 |",
    "node-a:4711:4790 [0] NCCL INFO Init timings - ncclCommInitRankConfig: rank 3 nranks 16 total 4.21 (kernels 0.35, alloc 0.02, bootstrap 2.91, allgathers 0.05, topo 0.40, graphs 0.02, connections 0.44, rest 0.02)",
    "node-a:4711:4790 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 0.",
    "Epoch 3/10: 120it [01:24,  1.42it/s, loss=0.312]",
)
_FAILING = (
    "[2026-12-02 12:17:57] node-b:2268:2268 [0] misc/socket.cc:58 (socketProgress) NCCL WARN socketProgress: Connection closed by remote peer node-a<52310>",
    "node-b:2268:2301 [0] NCCL INFO ncclOsSocketPollConnect: connect to 198.18.0.2<41237> returned Connection refused, retrying (3/34) after sleep for 300 msec",
)


def _corpus(n: int) -> list[str]:
    rng = random.Random(1)
    return [
        rng.choice(_FAILING) if rng.random() < 0.001 else rng.choice(_HEALTHY) for _ in range(n)
    ]


def _rate(lines: list[str], per_line: Callable[[str], object]) -> float:
    start = time.process_time()  # CPU time: steadier than wall time on a shared machine
    for line in lines:
        per_line(line)
    return len(lines) / (time.process_time() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    lines = _corpus(parser.parse_args().lines)
    regexes = [re.compile(s.pattern) for s in SIGNATURES]

    def naive(line: str) -> list[object]:
        return [m for rx in regexes if (m := rx.search(line))]

    def contains(line: str) -> bool:
        return "NCCL WARN" in line

    one_regex = re.compile("NCCL WARN").search
    baseline = _rate(lines, contains)
    single = _rate(lines, one_regex)
    ours = _rate(lines, match_line)
    every = _rate(lines[: len(lines) // 10], naive)
    print(f"corpus: {len(lines)} lines, {len(SIGNATURES)} signatures")
    print(f"str.__contains__ ('NCCL WARN' in line): {baseline:12,.0f} lines/s")
    print(f"one literal regex search:               {single:12,.0f} lines/s")
    print(f"match_line:                             {ours:12,.0f} lines/s")
    print(f"every regex on every line:              {every:12,.0f} lines/s")
    print(
        f"match_line / contains = {ours / baseline:.3f}   match_line / one regex = "
        f"{ours / single:.3f}   match_line / naive = {ours / every:.1f}x"
    )


if __name__ == "__main__":
    main()
