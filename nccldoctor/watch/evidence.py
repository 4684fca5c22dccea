"""Evidence about the watched job's processes, read from the watch folder and by asking them.

The injected sitecustomize writes ``proc.<pid>.json`` (identity), answers SIGUSR1 with
``stacks.<pid>.txt`` and a write to ``fr.<pid>.fifo`` with ``fr.<pid>.pkl``; NCCL writes
``nccl.<host>.<pid>.log``. Everything here has a deadline and tolerates a process that vanished.
"""

from __future__ import annotations

import errno
import io
import json
import os
import pickle
import shutil
import signal
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

STACK_WAIT_S = 2.0
FLIGHT_RECORDER_WAIT_S = 5.0
LAST_LINES = 20


@dataclass
class RankProcess:
    pid: int
    rank: int | None
    local_rank: int | None
    host: str
    argv: list[str]


@dataclass
class RankEvidence:
    process: RankProcess
    stacks: str | None = None
    stacks_source: str | None = None  # py-spy | faulthandler
    last_nccl_lines: list[str] = field(default_factory=list)
    nccl_log: str | None = None
    flight_recorder: list[dict] | None = None  # the dump's entries
    flight_recorder_error: str | None = None
    error: str | None = None  # the uncaught exception's traceback
    error_time: float | None = None  # when it was written: the first failure is the cause


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


def tail(path: Path, lines: int = LAST_LINES) -> list[str]:
    try:
        with path.open("rb") as src:
            src.seek(max(0, src.seek(0, io.SEEK_END) - 64 * 1024))
            text = src.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return list(deque((ln for ln in text.splitlines() if ln.strip()), maxlen=lines))


def python_stacks(watch_dir: Path, pid: int) -> tuple[str | None, str | None]:
    """(stacks, source): py-spy with locals when installed, else faulthandler via SIGUSR1."""
    py_spy = shutil.which("py-spy")
    if py_spy:
        try:
            out = subprocess.run(
                [py_spy, "dump", "--locals", "--full-filenames", "--pid", str(pid)],
                capture_output=True, text=True, timeout=15, check=False,
            )  # fmt: skip
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout, "py-spy"
        except (OSError, subprocess.TimeoutExpired):
            pass
    stacks_file = watch_dir / f"stacks.{pid}.txt"
    before = _size(stacks_file)
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError:
        return None, None
    deadline = time.monotonic() + STACK_WAIT_S
    while time.monotonic() < deadline and _size(stacks_file) == before:
        time.sleep(0.05)
    time.sleep(0.1)  # let faulthandler finish the other threads
    try:
        text = stacks_file.read_text(errors="replace")[before:]
    except OSError:
        return None, None
    return (text, "faulthandler") if text.strip() else (None, None)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def flight_recorder(watch_dir: Path, pid: int) -> tuple[list[dict] | None, str | None]:
    """Ask the process for its Flight Recorder dump; (entries, None) or (None, why not)."""
    fifo, dump = watch_dir / f"fr.{pid}.fifo", watch_dir / f"fr.{pid}.pkl"
    dump.unlink(missing_ok=True)
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        why = "no reader on the trigger" if exc.errno == errno.ENXIO else str(exc)
        return None, f"flight recorder not reachable: {why}"
    with os.fdopen(fd, "wb") as trigger:
        trigger.write(b"dump\n")
    deadline = time.monotonic() + FLIGHT_RECORDER_WAIT_S
    while time.monotonic() < deadline and not dump.exists():
        time.sleep(0.05)
    try:
        data = dump.read_bytes()
    except OSError:
        return None, "no flight recorder dump (process group not initialised, or busy)"
    if data.startswith(b"flight recorder unavailable"):
        return None, data.decode(errors="replace")
    try:
        entries = _SafeUnpickler(io.BytesIO(data)).load().get("entries", [])
    except Exception as exc:
        return None, f"unreadable flight recorder dump: {exc}"
    return [_fr_entry(e) for e in entries], None


class _SafeUnpickler(pickle.Unpickler):
    """Flight Recorder dumps hold only builtin containers and scalars; refuse anything else."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"refusing {module}.{name} in a flight recorder dump")


def _fr_entry(entry: dict) -> dict:
    keep = ("record_id", "collective_seq_id", "p2p_seq_id", "profiling_name", "state",
            "input_sizes", "time_created_ns", "duration_ms", "timeout_ms", "process_group")  # fmt: skip
    return {k: entry[k] for k in keep if k in entry}


def collect(watch_dir: Path, processes: list[RankProcess], want_stacks: bool) -> list[RankEvidence]:
    """Gather what each rank process can tell: stacks, Flight Recorder, NCCL lines, its error."""
    evidence = []
    for process in processes:
        item = RankEvidence(process=process)
        log = nccl_log_of(watch_dir, process)
        if log:
            item.nccl_log = str(log)
            item.last_nccl_lines = tail(log)
        error_file = watch_dir / f"error.{process.pid}.txt"
        try:
            item.error = error_file.read_text(errors="replace")
            item.error_time = error_file.stat().st_mtime
        except OSError:
            pass
        if want_stacks:
            item.stacks, item.stacks_source = python_stacks(watch_dir, process.pid)
            item.flight_recorder, item.flight_recorder_error = flight_recorder(
                watch_dir, process.pid
            )
        evidence.append(item)
    return evidence
