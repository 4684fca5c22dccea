"""Is the job still moving? Liveness from the outside: CPU time, NCCL log growth, output bytes.

A process is active in an interval when its CPU time grew by more than ``cpu_busy_fraction`` of
the interval (collectives that wait in gloo or NCCL's host threads cost almost nothing), when its
NCCL log grew, or when the job wrote output. The job is idle when none of that moved.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Sample:
    """One look at the job: CPU seconds per pid, NCCL log bytes per file, output bytes so far."""

    time: float
    cpu_seconds: dict[int, float] = field(default_factory=dict)
    log_bytes: dict[str, int] = field(default_factory=dict)
    output_bytes: int = 0


class LivenessTracker:
    def __init__(self, start: float, cpu_busy_fraction: float = 0.02) -> None:
        self.cpu_busy_fraction = cpu_busy_fraction
        self.job_active_at = start
        self._last: Sample | None = None

    def observe(self, sample: Sample) -> None:
        last = self._last
        self._last = sample
        if last is None:
            return
        interval = max(sample.time - last.time, 1e-6)
        busy = any(
            cpu - last.cpu_seconds.get(pid, cpu) > self.cpu_busy_fraction * interval
            for pid, cpu in sample.cpu_seconds.items()
        )
        logs_grew = any(size != last.log_bytes.get(path) for path, size in sample.log_bytes.items())
        if busy or logs_grew or sample.output_bytes != last.output_bytes:
            self.job_active_at = sample.time

    def job_idle_for(self, now: float) -> float:
        return now - self.job_active_at
