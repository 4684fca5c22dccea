"""Evidence about the watched job's processes, read from the watch folder and by asking them.

The injected sitecustomize writes ``proc.<pid>.json`` (identity), answers SIGUSR1 with
``stacks.<pid>.txt`` and a write to ``fr.<pid>.fifo`` with ``fr.<pid>.pkl``; NCCL writes
``nccl.<host>.<pid>.log``. Everything here has a deadline and tolerates a process that vanished.
"""

from __future__ import annotations

import json
from pathlib import Path

from nccldoctor.forensics.capture import flight_recorder, last_nccl_lines, python_stacks
from nccldoctor.forensics.ranks import RankEvidence, RankProcess


def known_processes(watch_dir: Path) -> dict[int, RankProcess]:
    """Every Python process of the job that announced itself, by pid."""
    found = {}
    for path in watch_dir.glob("proc.*.json"):
        try:
            data = json.loads(path.read_text())
            found[int(data["pid"])] = RankProcess(
                pid=int(data["pid"]),
                rank=_int(data.get("rank")),
                local_rank=_int(data.get("local_rank")),
                host=str(data.get("host", "")),
                argv=[str(a) for a in data.get("argv", [])],
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found


def _int(value: object) -> int | None:
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def nccl_log_of(watch_dir: Path, process: RankProcess) -> Path | None:
    matches = sorted(watch_dir.glob(f"nccl.*.{process.pid}.log"))
    return matches[0] if matches else None


def collect(watch_dir: Path, processes: list[RankProcess], want_stacks: bool) -> list[RankEvidence]:
    """Gather what each rank process can tell: stacks, Flight Recorder, NCCL lines, its error."""
    evidence = []
    for process in processes:
        item = RankEvidence(process=process)
        log = nccl_log_of(watch_dir, process)
        if log:
            item.nccl_log = str(log)
            item.last_nccl_lines = last_nccl_lines([log])
        error_file = watch_dir / f"error.{process.pid}.txt"
        try:
            item.error = error_file.read_text(errors="replace")
            item.error_time = error_file.stat().st_mtime
        except OSError:
            pass
        if want_stacks:
            pid = process.pid
            item.stacks, item.stacks_source = python_stacks(pid, watch_dir / f"stacks.{pid}.txt")
            item.flight_recorder, item.flight_recorder_error = flight_recorder(
                watch_dir / f"fr.{pid}.fifo", watch_dir / f"fr.{pid}.pkl"
            )
        evidence.append(item)
    return evidence
