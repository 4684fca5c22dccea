"""Judge what the watcher saw: which rank is behind, where ranks diverge, why a rank died."""

from __future__ import annotations

from dataclasses import dataclass

from nccldoctor.forensics.behind import Position
from nccldoctor.forensics.behind import behind as forensics_behind
from nccldoctor.forensics.stacks import (
    in_collective,
    main_thread_frames,
    traceback_frames,
    user_frame,
)
from nccldoctor.model import Finding, Severity
from nccldoctor.watch.evidence import RankEvidence


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


def _label(state: RankState) -> str:
    p = state.evidence.process
    return f"rank {p.rank} (pid {p.pid} on {p.host})" if p.rank is not None else f"pid {p.pid}"


def _position(state: RankState) -> Position:
    return Position(last_seq=state.last_seq, in_collective=bool(state.in_collective))


def behind(states: list[RankState]) -> list[RankState]:
    """The ranks that are behind: fewest collectives issued, else the ones outside a collective."""
    return forensics_behind(states, _position)


def hang_verdict(states: list[RankState], idle_s: float) -> tuple[str, list[Finding]]:
    """The sentence and findings for a job that stopped moving."""
    late = behind(states)
    others = [s for s in states if s not in late]
    parts, evidence = [], []
    for s in late:
        at = f" at {s.where}" if s.where else ""
        seq = f"; its last collective was #{s.last_seq} ({s.last_op})" if s.last_seq else ""
        outside = ", not inside a collective" if s.in_collective is False else ""
        parts.append(f"{_label(s)} is behind{at}{outside}{seq}")
    if others:
        seqs = sorted({s.last_seq for s in others if s.last_seq is not None})
        ranks = ", ".join(str(s.rank) for s in others)
        waiting = (
            f" in collective #{seqs[-1]} ({others[0].last_op})" if seqs else " in a collective"
        )
        who = f"ranks {ranks} wait" if len(others) > 1 else f"rank {ranks} waits"
        parts.append(f"{who}{waiting}")
    for s in states:
        evidence.append(
            f"{_label(s)}: last collective #{s.last_seq} {s.last_op or ''}; "
            f"stack: {s.where or 'unknown'}; in collective: {s.in_collective}"
        )
        evidence.extend(f"  {line}" for line in s.evidence.last_nccl_lines[-3:])
    if not late:
        parts.append("no rank is behind the others: all stopped together (a deadlock in a "
                     "collective, the network, or work outside torch.distributed)")  # fmt: skip
    sentence = f"The job made no progress for {idle_s:.0f} s: " + "; ".join(parts) + "."
    finding = Finding(
        id="watch.hang",
        category="collective_timeout_hang",
        severity=Severity.FAIL,
        title=sentence,
        evidence=evidence,
        fix=(
            "Look at the code the behind rank is running (its stack above): a rank that skips or "
            "reorders a collective (data-dependent branches, uneven batches without "
            "DistributedSampler(drop_last=True)) hangs the others. If every rank is inside the "
            "same collective, run `nccldoctor check` across the nodes to test the network."
        ),
        area="run",
        rank=late[0].rank if late else None,
        node=late[0].evidence.process.host if late else None,
    )
    return sentence, [finding]


def crash_verdict(states: list[RankState], exit_code: int) -> tuple[str, list[Finding]]:
    """The sentence and findings for a job that exited with an error."""
    # The first rank to fail is the cause; the others' errors (peer closed the connection,
    # remote process exited) follow from it.
    failed = sorted(
        (s for s in states if s.evidence.error), key=lambda s: s.evidence.error_time or 0
    )
    if not failed:
        sentence = f"The job exited with code {exit_code}; no rank left a Python traceback."
        return sentence, [
            Finding(
                id="watch.exit-nonzero",
                category="other",
                severity=Severity.FAIL,
                title=sentence,
                evidence=[line for s in states for line in s.evidence.last_nccl_lines[-3:]],
                fix="Read the job's own output above; a rank killed by a signal (OOM killer: "
                "`dmesg | grep -i kill`) leaves no traceback.",
                area="run",
            )
        ]
    first = failed[0]
    error_lines = [ln for ln in (first.evidence.error or "").splitlines() if ln.strip()]
    last_error = error_lines[-1] if error_lines else "unknown error"
    at = f" at {first.where}" if first.where else ""
    sentence = f"{_label(first)} failed{at}: {last_error}"
    warns = [ln for s in states for ln in s.evidence.last_nccl_lines if "NCCL WARN" in ln]
    return sentence, [
        Finding(
            id="watch.rank-failed",
            category="other",
            severity=Severity.FAIL,
            title=sentence,
            evidence=error_lines[-8:] + warns[-5:],
            fix="The traceback names the failing line; the NCCL WARN lines (if any) name the "
            "cause below the Python error. Other ranks' errors usually follow from this one.",
            area="run",
            rank=first.rank,
            node=first.evidence.process.host,
        )
    ]
