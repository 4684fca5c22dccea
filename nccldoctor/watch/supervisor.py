"""Run the user's command exactly as they would, watch it from outside, report a hang or crash.

The command's stdin is inherited; its stdout and stderr are copied through byte for byte (so the
watcher sees output move; the caller may pass the writers, to keep a live line below them), and
read to their end even where ours closed early (a pipe whose reader left); its exit code is
returned unchanged. The watcher's own loop wakes once a second, and at once when the job ends;
it reads a few /proc files and the ranks' announcements, and says what it saw (``JobStatus``),
so an idle watch costs well under 1% of a core.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import psutil

from nccldoctor.debugenv import debug_env
from nccldoctor.forensics.stop import stop_groups
from nccldoctor.watch.evidence import collect, known_processes
from nccldoctor.watch.liveness import LivenessTracker, Sample
from nccldoctor.watch.peers import WatchPeers

INJECT_DIR = Path(__file__).parent / "inject"
POLL_S = 1.0
GATHER_S = 20.0  # how long a watcher waits for the other nodes' evidence after a hang


@dataclass
class WatchConfig:
    command: list[str]
    out_dir: Path
    hang_after_s: float = 120.0
    keep_running: bool = False
    peers: WatchPeers | None = None  # the other nodes' watchers, when --master is given
    node: str | None = None  # how the report names this node (default: the hostname)
    grace_s: float = 10.0  # from SIGTERM to SIGKILL, when watch ends the job (--grace)


@dataclass(frozen=True)
class JobStatus:
    """What the watcher saw of the job at one look: ``phase`` is ``running``, ``quiet`` (no
    progress for half of ``hang_after_s``) or ``hung``; ``ranks`` the processes that announced
    a rank (the injected sitecustomize's ``proc.<pid>.json``)."""

    phase: str
    elapsed_s: float
    idle_s: float
    hang_after_s: float
    ranks: int


Writer = Callable[[bytes], None]


@dataclass
class WatchOutcome:
    exit_code: int  # the job's own code; 3 when the watcher ended a hung job
    hung: bool
    ended_by_watch: bool
    idle_s: float
    evidence: list = field(default_factory=list)
    output_tail: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    stopped_by: str | None = None  # the stop signal watch got and passed on ("SIGTERM")
    killed: bool = False  # the job outlived its grace after it and was killed


def job_env(user_env: dict[str, str], watch_dir: Path, node: str | None = None) -> dict[str, str]:
    """The user's env plus what makes the job observable (never overriding the user)."""
    env = dict(user_env)
    if node:
        env["NCCLDOCTOR_NODE_NAME"] = node
    env.update(debug_env(user_env, watch_dir))
    env["NCCLDOCTOR_WATCH_DIR"] = str(watch_dir)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(INJECT_DIR), user_env.get("PYTHONPATH")) if p
    )
    return env


class _Pump(threading.Thread):
    """Copies one of the job's streams to ours, counting bytes and keeping the last lines."""

    def __init__(self, source: BinaryIO, write: Writer, tail: deque[str]) -> None:
        super().__init__(daemon=True)
        self.source, self.write, self.tail, self.bytes = source, write, tail, 0

    def run(self) -> None:
        partial = b""
        while chunk := self.source.read1(65536):
            try:
                self.write(chunk)
            except OSError:
                # Our reader left (`nccldoctor watch -- CMD | head`): the job is still drained,
                # else it blocks on a full pipe and looks hung; its tail still goes to the report.
                self.write = _discard
            self.bytes += len(chunk)
            *lines, partial = (partial + chunk).split(b"\n")
            self.tail.extend(ln.decode("utf-8", errors="replace") for ln in lines)
            partial = partial[-4096:]


def run_watched(
    config: WatchConfig,
    on_event: Callable[[str], None] = lambda _: None,
    on_hang: Callable[[WatchOutcome], None] = lambda _: None,
    on_status: Callable[[JobStatus], None] = lambda _: None,
    writers: tuple[Writer, Writer] | None = None,
) -> WatchOutcome:
    """Run the job to its end (or until it hangs and is ended); ``on_hang`` sees a hang at once,
    ``on_status`` each look at the job; ``writers`` take the job's stdout and stderr bytes
    (default: ours, flushed at each chunk)."""
    watch_dir = config.out_dir
    watch_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    stop = _Stop()
    previous = stop.install()  # before the job starts: a stop signal never finds watch unguarded
    try:
        job = subprocess.Popen(
            config.command,
            env=job_env(dict(os.environ), watch_dir, config.node),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # the whole job can be signalled as one process group
        )
    except BaseException:
        _restore_signals(previous)
        raise
    stop.started(job)
    tail: deque[str] = deque(maxlen=50)
    out, err = writers or (_writer(sys.stdout.buffer), _writer(sys.stderr.buffer))
    pumps = [
        _Pump(job.stdout, out, tail),  # type: ignore[arg-type]
        _Pump(job.stderr, err, tail),  # type: ignore[arg-type]
    ]
    for pump in pumps:
        pump.start()
    tracker = LivenessTracker(start=started)
    outcome: WatchOutcome | None = None
    try:
        while job.poll() is None:
            now = time.monotonic()
            stop.kill_after(config.grace_s, on_event)
            tracker.observe(_sample(job.pid, watch_dir, now, sum(p.bytes for p in pumps)))
            idle = tracker.job_idle_for(now)
            ranks = sum(p.rank is not None for p in known_processes(watch_dir).values())
            on_status(_status(config, outcome, now - started, idle, ranks))
            if outcome is None and _hang_seen(config, idle):
                on_event(f"no progress for {idle:.0f} s: collecting stacks and Flight Recorder")
                outcome = WatchOutcome(3, True, False, idle, _hang_evidence(config, watch_dir))
                outcome.output_tail = list(tail)
                on_hang(outcome)
                if not config.keep_running:
                    on_event("ending the hung job")
                    stop_groups([job], config.grace_s)
                    outcome.ended_by_watch = True
            with contextlib.suppress(subprocess.TimeoutExpired):  # woken by the job's end
                job.wait(timeout=POLL_S)
    finally:
        _restore_signals(previous)
    for pump in pumps:
        pump.join(timeout=5)
    if outcome is None:
        ranks = list(known_processes(watch_dir).values())
        outcome = WatchOutcome(
            _shell_code(job.returncode), False, False, 0.0, collect(watch_dir, ranks, False)
        )
    elif not outcome.ended_by_watch:
        outcome.exit_code = _shell_code(job.returncode)
    if stop.signal is not None:
        outcome.stopped_by, outcome.killed = signal.Signals(stop.signal).name, stop.killed
    outcome.output_tail = list(tail)
    outcome.duration_s = time.monotonic() - started
    return outcome


def _discard(_data: bytes) -> None:
    pass


def _writer(sink: BinaryIO) -> Writer:
    def write(data: bytes) -> None:
        sink.write(data)
        sink.flush()

    return write


def _status(
    config: WatchConfig, outcome: WatchOutcome | None, elapsed: float, idle: float, ranks: int
) -> JobStatus:
    hung = outcome is not None and outcome.hung
    quiet = idle >= config.hang_after_s / 2
    phase = "hung" if hung else "quiet" if quiet else "running"
    return JobStatus(phase, elapsed, idle, config.hang_after_s, ranks)


def _hang_seen(config: WatchConfig, idle_s: float) -> bool:
    """This node's job stopped moving, or another node's watcher said so."""
    if idle_s >= config.hang_after_s:
        if config.peers:
            config.peers.announce_hang()
        return True
    return bool(config.peers and config.peers.hang_announced())


def _hang_evidence(config: WatchConfig, watch_dir: Path) -> list:
    """This node's ranks, asked for stacks and Flight Recorder, plus the other nodes' ranks."""
    local = collect(watch_dir, list(known_processes(watch_dir).values()), want_stacks=True)
    if not config.peers:
        return local
    config.peers.publish(local)
    return local + config.peers.gather(deadline=time.monotonic() + GATHER_S)


def _shell_code(returncode: int) -> int:
    """A job killed by signal N exits 128+N, as a shell would report it."""
    return returncode if returncode >= 0 else 128 - returncode


def _sample(root_pid: int, watch_dir: Path, now: float, output_bytes: int) -> Sample:
    cpu: dict[int, float] = {}
    try:
        root = psutil.Process(root_pid)
        for proc in [root, *root.children(recursive=True)]:
            try:
                times = proc.cpu_times()
                cpu[proc.pid] = times.user + times.system
            except psutil.Error:
                continue
    except psutil.Error:
        pass
    logs = {}
    for path in watch_dir.glob("nccl.*.log"):
        try:
            logs[str(path)] = path.stat().st_size
        except OSError:
            continue
    return Sample(time=now, cpu_seconds=cpu, log_bytes=logs, output_bytes=output_bytes)


class _Stop:
    """The signals watch passes on to its job's process group. Ctrl-C goes as it is, and the
    job decides. SIGTERM, SIGHUP and SIGQUIT (a scheduler's time limit, scancel, a closed
    terminal) stop the watch: the job gets SIGTERM, the polite stop every launcher handles,
    and a job still running ``grace`` seconds later gets SIGKILL. Their own action ended watch
    at once and left the job running, with no report."""

    STOPS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)

    def __init__(self) -> None:
        self.job: subprocess.Popen | None = None  # None until it started
        self.signal: int | None = None  # the first stop signal watch got
        self.at = 0.0
        self.killed = False

    def started(self, job: subprocess.Popen) -> None:
        """The job runs: a stop signal that came while it was starting reaches it now."""
        self.job = job
        if self.signal is not None:
            _signal_group(job, signal.SIGTERM)

    def install(self) -> dict[int, object]:
        """Handle the signals; the handlers they had, to put back."""
        previous = {signal.SIGINT: signal.signal(signal.SIGINT, self._forward)}
        for sig in self.STOPS:
            previous[sig] = signal.signal(sig, self._stop)
        return previous

    def _forward(self, sig: int, _frame: object) -> None:
        if self.job is not None:
            _signal_group(self.job, sig)

    def _stop(self, sig: int, _frame: object) -> None:
        if self.signal is None:
            self.signal, self.at = sig, time.monotonic()
        if self.job is not None:
            _signal_group(self.job, signal.SIGTERM)

    def kill_after(self, grace: float, on_event: Callable[[str], None]) -> None:
        """SIGKILL to the job's group once it outlived ``grace`` after the stop signal."""
        if self.signal is None or self.killed or time.monotonic() - self.at < grace:
            return
        on_event(f"the job outlived {grace:g} s after SIGTERM: killing it")
        if self.job is not None:
            _signal_group(self.job, signal.SIGKILL)
        self.killed = True


def _signal_group(job: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(job.pid, sig)


def _restore_signals(previous: dict[int, object]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)  # type: ignore[arg-type]
