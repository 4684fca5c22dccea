"""The worker deadline (workerwatch): a worker's outputs and its own phase deadlines: events.jsonl,
result.json, stacks.txt.

One thread (``PhaseWatch``) does three things every half second: it writes a heartbeat while a
phase runs, ends the process when the phase outlives its deadline (stacks first, then a ``fail``
event and result.json, exit 3), and takes SIGTERM/SIGINT, which the main thread blocks so that a
worker stuck inside a collective (in C++, where Python signal handlers never run) still writes
its result when the agent stops it.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from nccldoctor.cluster.records import WORKER_DEADLINE, EventStatus, WorkerEvent

HEARTBEAT_S = 1.0  # well inside the agent watchdog's heartbeat budget (Timeouts.heartbeat)
POLL_S = 0.5
# The worker's own deadline fires this long after the phase's timeout, so the backend's timeout
# (gloo's error, ProcessGroupNCCL's watchdog and Flight Recorder dump) normally speaks first.
GRACE_S = 2.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def block_stop_signals() -> None:
    """Call first in the main thread, before torch starts threads: they inherit the mask."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def write_json_atomic(path: Path, data: Any) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=1)
            out.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class EventLog:
    """events.jsonl: one flushed JSON object per line, safe to call from any thread."""

    def __init__(self, path: Path, rank: int) -> None:
        self.rank = rank
        self._lock = threading.Lock()
        self._out = path.open("a", encoding="utf-8")

    def emit(self, phase: str, status: EventStatus, detail: str = "") -> None:
        line = WorkerEvent(time.time(), self.rank, phase, status, detail).to_line()
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()


class StackDump:
    """stacks.txt: every thread's Python stack on SIGUSR1 (the agent's hang watch) or on demand."""

    def __init__(self, path: Path) -> None:
        self._out: TextIO = path.open("a", encoding="utf-8")
        faulthandler.register(signal.SIGUSR1, file=self._out, all_threads=True, chain=False)

    def dump(self, why: str) -> None:
        self._out.write(f"# {why}\n")
        self._out.flush()
        faulthandler.dump_traceback(file=self._out, all_threads=True)


class PhaseWatch(threading.Thread):
    """The worker's own deadline: heartbeats, phase deadlines and stop signals for the worker's
    main thread, from inside the worker (the agent's watchdog watches it from outside).

    ``on_fatal(error)`` is called from this thread when the worker must end (deadline passed or
    a stop signal); it writes the result and never returns (os._exit).
    """

    def __init__(
        self, events: EventLog, stacks: StackDump, on_fatal: Callable[[str], None]
    ) -> None:
        super().__init__(name="nccldoctor-phase-watch", daemon=True)
        self._events, self._stacks, self._on_fatal = events, stacks, on_fatal
        self._lock = threading.Lock()
        self._phase: tuple[str, float, float] | None = None  # (name, started, timeout_s)

    def enter(self, phase: str, timeout_s: float) -> None:
        with self._lock:
            self._phase = (phase, time.monotonic(), timeout_s)

    def leave(self) -> None:
        with self._lock:
            self._phase = None

    def run(self) -> None:
        last_beat = time.monotonic()
        while True:
            try:
                received = signal.sigtimedwait(STOP_SIGNALS, POLL_S)
                with self._lock:
                    current = self._phase
                now = time.monotonic()
                if received is not None:
                    name = signal.Signals(received.si_signo).name
                    where = current[0] if current else "between phases"
                    self._on_fatal(f"{where}: stopped by {name}")
                if current is None:
                    continue
                phase, started, timeout_s = current
                if now - started > timeout_s + GRACE_S:
                    self._stacks.dump(f"{phase} outlived its {timeout_s:g} s deadline")
                    self._on_fatal(f"{phase}: timed out after {timeout_s:g} s {WORKER_DEADLINE}")
                if now - last_beat >= HEARTBEAT_S:
                    self._events.emit(
                        phase, EventStatus.HEARTBEAT, f"{now - started:.1f} of {timeout_s:g} s"
                    )
                    last_beat = now
            except Exception as exc:  # the worker's deadline must outlive its own errors
                print(f"nccldoctor worker: phase watch error: {exc!r}", file=sys.stderr, flush=True)
