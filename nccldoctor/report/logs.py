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


def line_kinds(lines: Sequence[str]) -> list[str]:
    """Each line's kind: ``warn`` for a warning or error, ``key`` for a line that states a
    choice, else ``""``.

    A 64-rank report carries ~13k lines and most hold no marker, so the markers are searched
    in the lines joined on a newline (one ``str.find`` pass per marker, no call per line); a
    marker holds no newline, so a hit lies inside one line, found by bisecting the line starts.
    """
    text = "\n".join(lines)
    kinds = [""] * len(lines)
    starts: list[int] = []
    for kind, markers in (("key", KEY_MARKERS), ("warn", WARN_MARKERS)):  # warn last: it wins
        for marker in markers:
            at = text.find(marker)
            while at >= 0:
                if not starts:  # the first hit: most logs never get here
                    starts = list(accumulate((len(line) + 1 for line in lines), initial=0))
                index = bisect_right(starts, at) - 1
                kinds[index] = kind
                at = text.find(marker, starts[index + 1])  # the next line: one hit is enough
    return kinds
