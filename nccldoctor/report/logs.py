"""Which of a rank's NCCL log lines in a report matter most: warnings, and the lines that state
what NCCL chose. The page highlights them and opens the logs of ranks that warned."""

from __future__ import annotations

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
