"""What the Flight Recorder analysis (``flightrec.py``) reports, as records: each dump read,
each process group's reading (its members, how far they agree, where they stopped agreeing and
who is behind), and the whole reading the ``flightrec`` rules judge (``checks/flightrec.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from nccldoctor.forensics.stacks import Frame, user_frame

# Frames of the culprit's last op shown as its Python stack.
STACK_FRAMES = 8


@dataclass
class DumpRead:
    source: str
    rank: int | None
    version: str | None = None
    entries: int = 0
    skipped: int = 0  # entries without the keys the matching needs
    error: str | None = None
    refused: bool = False


@dataclass
class RankTail:
    """Where one rank's record of a process group ends."""

    rank: int
    last_seq: int | None = None
    last_op: str | None = None
    last_state: str | None = None
    completed_seq: int | None = None
    completed_op: str | None = None
    where: str | None = None  # the user's innermost frame of the last op
    stack: list[str] = field(default_factory=list)


@dataclass
class Side:
    """The ranks that showed one op signature at a sequence number."""

    ranks: list[int]
    op: str
    input_sizes: str
    output_sizes: str
    dtypes: str
    state: str


@dataclass
class Divergence:
    """Where the ranks of a process group stopped agreeing."""

    kind: str  # missing | op | size | dtype | state
    seq: int
    p2p: bool
    op: str
    sides: list[Side]
    missing: list[int] = field(default_factory=list)  # ranks that never issued it
    culprits: list[RankTail] = field(default_factory=list)


@dataclass
class GroupReading:
    name: str
    desc: str
    ranks: list[int] | None  # its members; None when no dump's pg_config names them
    dumped: list[int]
    no_dump: list[int]  # members without a dump
    first_seq: int | None  # the first sequence number every member's buffer still holds
    last_seq: int | None
    matched: int  # collectives every member issued alike
    divergences: list[Divergence]
    more: int  # divergences past MISMATCH_CAP

    @property
    def label(self) -> str:
        name = self.desc or self.name
        ranks = ranges(self.ranks) if self.ranks is not None else "ranks unknown"
        return f"process group {name!r} ({ranks})"


@dataclass
class FlightRecorderReading:
    dumps: list[DumpRead]
    groups: list[GroupReading]
    # Where each global rank's NCCL log stops, when the same ticket holds the job's logs
    # (``explain_ticket``: the ranks of its one world-sized communicator)
    log_stops: dict[int, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dumps": [asdict(d) for d in self.dumps],
            "groups": [{**asdict(g), "label": g.label} for g in self.groups],
        }


def ranges(ranks: Iterable[int]) -> str:
    """``ranks 0-3, 7``."""
    ordered = sorted(set(ranks))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ("rank " if len(ordered) == 1 else "ranks ") + ", ".join(parts)


def tail_of(
    rank: int,
    entries: list[Any],
    last: dict[str, Any] | None,
    completed: dict[str, Any] | None,
    status: dict[str, Any],
) -> RankTail:
    """Where ``rank``'s record of a process group ends: its last entry there, the last that
    completed (gloo's entries all stay "scheduled": ``pg_status`` counts what completed), the
    user's frame and the stack of the last."""
    tail = RankTail(rank)
    if last is None:
        return tail
    tail.last_seq = seq_of(last)
    tail.last_op = str(last.get("profiling_name"))
    tail.last_state = str(last.get("state"))
    raw = last.get("frames")
    frames = [
        Frame(str(f.get("filename")), _int(f.get("line")), str(f.get("name")))
        for f in (raw if isinstance(raw, list) else [])
        if isinstance(f, dict)
    ]
    frame = user_frame(frames)
    tail.where = frame.describe() if frame else None
    tail.stack = [f"{f.func} at {f.file}:{f.line}" for f in frames[:STACK_FRAMES]]
    # gloo leaves every entry "scheduled": pg_status's counter says what completed
    done = status.get(str(last.get("pg_id"))) if isinstance(status, dict) else None
    seq_done = _int(done.get("last_completed_collective"), -1) if isinstance(done, dict) else -1
    if completed is not None and (seq_of(completed) or -1) >= seq_done:
        tail.completed_seq, tail.completed_op = seq_of(completed), str(completed["profiling_name"])
    elif seq_done > 0:
        tail.completed_seq = seq_done
        tail.completed_op = next(
            (
                str(e.get("profiling_name"))
                for e in reversed(entries)
                if isinstance(e, dict)
                and e.get("process_group") == last.get("process_group")
                and not e.get("is_p2p")
                and seq_of(e) == seq_done
            ),
            None,
        )
    return tail


def seq_of(e: dict[str, Any]) -> int | None:
    """An entry's sequence number: its p2p one for a point-to-point op."""
    value = e.get("p2p_seq_id") if e.get("is_p2p") else e.get("collective_seq_id")
    return _int(value, None)


def _int(value: Any, default: Any = 0) -> Any:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
