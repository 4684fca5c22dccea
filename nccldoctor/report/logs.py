"""Which of a rank's NCCL log lines in a report matter most: warnings, and the lines that state
what NCCL chose. The page highlights them and opens the logs of ranks that warned."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate

# Substrings of the lines that answer "what did NCCL choose": version and init, bootstrap, network,
# GPUDirect RDMA, transports, trees, per-call algorithm, env echo (docs/nccl-log-formats.md).
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


# Each search: (kind, a substring every one of its markers holds, the markers). Five markers
# hold "Using": one pass finds their lines, and only those lines are tested for each of them.
_SEARCHES = (
    ("key", "Using", tuple(m for m in KEY_MARKERS if "Using" in m)),
    *(("key", m, (m,)) for m in KEY_MARKERS if "Using" not in m),
    *(("warn", m, (m,)) for m in WARN_MARKERS),  # warn last: it wins
)


def line_kinds(lines: Sequence[str]) -> list[str]:
    """Each line's kind: ``warn`` for a warning or error, ``key`` for a line that states a
    choice, else ``""``.

    A 64-rank report carries ~13k lines and most hold no marker, so the markers are searched
    in the lines joined on a newline (one ``str.find`` pass per search, no call per line); a
    marker holds no newline, so a hit lies inside one line, found by bisecting the line starts.
    """
    text = "\n".join(lines)
    kinds = [""] * len(lines)
    starts: list[int] = []
    for kind, anchor, markers in _SEARCHES:
        at = text.find(anchor)
        while at >= 0:
            if not starts:  # the first hit: most logs never get here
                starts = list(accumulate((len(line) + 1 for line in lines), initial=0))
            index = bisect_right(starts, at) - 1
            line = lines[index]
            if len(markers) == 1 or any(marker in line for marker in markers):
                kinds[index] = kind
            at = text.find(anchor, starts[index + 1])  # the next line: one hit is enough
    return kinds
