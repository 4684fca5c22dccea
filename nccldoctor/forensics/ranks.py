"""What one rank process showed when it was asked, and where that puts it among the others."""

from __future__ import annotations

from dataclasses import dataclass, field

from nccldoctor.forensics.behind import Position, behind
from nccldoctor.forensics.stacks import (
    in_collective,
    main_thread_frames,
    traceback_frames,
    user_frame,
)


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


@dataclass
class RankState:
    """One rank at the moment of the verdict."""

    evidence: RankEvidence
    last_seq: int | None  # highest collective sequence number in its Flight Recorder
    last_op: str | None
    where: str | None  # the user's innermost frame, with loop variables when py-spy saw them
    in_collective: bool | None

    @property
    def rank(self) -> int | None:
        return self.evidence.process.rank

    @property
    def label(self) -> str:
        p = self.evidence.process
        return f"rank {p.rank} (pid {p.pid} on {p.host})" if p.rank is not None else f"pid {p.pid}"

    @property
    def dumped(self) -> bool:
        """Its Flight Recorder dump came back (it may hold no entry)."""
        return self.evidence.flight_recorder is not None


def rank_state(item: RankEvidence) -> RankState:
    entries = item.flight_recorder or []
    last = max(entries, key=lambda e: e.get("collective_seq_id", -1), default=None)
    if item.stacks:
        frames = main_thread_frames(item.stacks)
    else:
        frames = traceback_frames(item.error) if item.error else []
    frame = user_frame(frames)
    return RankState(
        evidence=item,
        last_seq=last.get("collective_seq_id") if last else None,
        last_op=last.get("profiling_name") if last else None,
        where=frame.describe() if frame else None,
        in_collective=in_collective(frames) if frames else None,
    )


def ranks_behind(states: list[RankState]) -> list[RankState]:
    """The ranks that are behind: fewest collectives issued, else the ones outside a collective."""
    return behind(
        states, lambda s: Position(last_seq=s.last_seq, in_collective=bool(s.in_collective))
    )


def without_dump(states: list[RankState]) -> list[RankState]:
    """The ranks whose Flight Recorder dump did not come back while another rank's did: what
    they issued is unknown, so any of them may be the one behind (one that died or cannot
    answer writes none); [] when no rank's came back."""
    if not any(s.dumped for s in states):
        return []
    return [s for s in states if not s.dumped]


@dataclass
class JobSeen:
    """What `nccldoctor watch` saw of the user's job: the subject of the ``job`` checks."""

    ranks: list[RankState]  # the rank processes (torchrun's own agent is not one)
    hung: bool
    idle_s: float
    exit_code: int
    stopped_by: str | None = None  # the stop signal watch got and passed on ("SIGTERM")
    killed: bool = False  # the job outlived its grace after it and was killed
