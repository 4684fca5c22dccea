"""Which NCCL log lines a report keeps per rank, and which of them matter most.

A rank's log runs to thousands of lines; the report keeps at most LOG_LINES_PER_RANK of them so
that a 64-rank report stays under 3 MB (bench/report.py measures it): every WARN and every key
line (interface, network, transport, init, algorithm) up to half the budget, then the last lines
before the end, in their original order. The full logs stay on disk (``log_path``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

LOG_LINES_PER_RANK = 200
MAX_LINE_CHARS = 1000  # a garbled or binary "line" must not blow the report up

# Substrings of the lines that answer "what did NCCL choose" (reference/nccl-logs.md §2-§7).
KEY_MARKERS = (
    "NCCL version",
    "Bootstrap: Using",
    "Bootstrap : Using",
    "Using network",
    "NET/IB : Using",
    "NET/Socket : Using",
    "GPU Direct RDMA",
    " via ",
    "Trees",
    "Connected all rings",
    "Init COMPLETE",
    "Bytes -> Algo",
    "set by environment",
)
WARN_MARKERS = (" NCCL WARN ", "Watchdog caught", "DistBackendError", "Traceback (most recent")


def line_kind(line: str) -> str:
    """``warn`` for a warning or error, ``key`` for a line that states a choice, else ``""``."""
    # Loops of substring tests: the fastest way in Python (a regex alternation is ~3x slower).
    for marker in WARN_MARKERS:
        if marker in line:
            return "warn"
    for marker in KEY_MARKERS:
        if marker in line:
            return "key"
    return ""


def keep_log_lines(lines: Iterable[str], limit: int = LOG_LINES_PER_RANK) -> list[str]:
    """The lines a report embeds for one rank (one pass, memory bounded by ``limit``)."""
    marked_budget = limit // 2
    marked: list[tuple[int, str]] = []  # WARN first in priority, then key lines
    tail: deque[tuple[int, str]] = deque(maxlen=limit)
    for index, raw in enumerate(lines):
        line = raw.rstrip("\r\n")[:MAX_LINE_CHARS]
        tail.append((index, line))
        kind = line_kind(line)
        if kind == "warn" or (kind == "key" and len(marked) < marked_budget):
            marked.append((index, line))
            if len(marked) > marked_budget:  # a WARN pushes out the oldest key line
                drop = next((i for i, (_, m) in enumerate(marked) if line_kind(m) == "key"), 0)
                del marked[drop]
    chosen = dict(marked)
    for index, line in reversed(tail):
        if len(chosen) >= limit:
            break
        chosen.setdefault(index, line)
    return [chosen[i] for i in sorted(chosen)]
