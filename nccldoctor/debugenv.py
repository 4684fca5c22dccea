"""The environment nccldoctor gives the processes it launches or watches.

NCCL and PyTorch only tell what they chose and where they stopped when asked: NCCL_DEBUG with the
subsystems that print interfaces, transports and tuning (NCCL_DEBUG_SUBSYS replaces NCCL's default
mask, so INIT and BOOTSTRAP must be listed), a log file per process, and PyTorch's Flight
Recorder with a dump on timeout. A variable the user set is never overridden.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

# TUNING makes NCCL >= 2.24 print the algorithm and protocol of each collective (rank 0 only).
NCCL_DEBUG_SUBSYS = "INIT,BOOTSTRAP,ENV,NET,GRAPH,TUNING"
FLIGHT_RECORDER_ENTRIES = "2000"


def debug_env(
    user_env: Mapping[str, str],
    log_dir: str | Path,
    coll: bool = False,
    torch_version: str | None = None,
) -> dict[str, str]:
    """The variables to add to ``user_env`` so that NCCL and PyTorch explain themselves.

    ``coll`` adds NCCL's per-call COLL lines (one line per collective per rank: short runs only).
    ``torch_version``: the job's torch, where known; one older than 2.6 reads the Flight
    Recorder's size under its old name, which newer ones warn about on every rank when it is set
    (watch's job may run another Python: its sitecustomize adds the old name there).
    Returns only what the user has not set; the caller merges it over a copy of the env.
    """
    log_dir = Path(log_dir)
    wanted = {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": NCCL_DEBUG_SUBSYS + (",COLL" if coll else ""),
        # %h and %p are NCCL's own: short hostname and pid, one file per process.
        "NCCL_DEBUG_FILE": str(log_dir / "nccl.%h.%p.log"),
        "TORCH_FR_BUFFER_SIZE": FLIGHT_RECORDER_ENTRIES,
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": str(log_dir / "fr_trace_rank_"),
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(log_dir / "fr_trace_rank_"),
        "PYTHONFAULTHANDLER": "1",
    }
    if torch_version and torch_before_2_6(torch_version):
        wanted["TORCH_NCCL_TRACE_BUFFER_SIZE"] = FLIGHT_RECORDER_ENTRIES
    return {name: value for name, value in wanted.items() if name not in user_env}


def torch_before_2_6(version: str) -> bool:
    """Whether a torch version string ("2.5.1+cu124", "2.13.0a0") names a release before 2.6."""
    try:
        major, minor = (int(part) for part in version.split(".")[:2])
    except ValueError:
        return False  # unreadable: assume a current torch, which warns on the old name
    return (major, minor) < (2, 6)
