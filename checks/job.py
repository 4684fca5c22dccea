"""Checks over what `nccldoctor watch` saw of the user's own job (``scope="job"``).

The subject is a :class:`~nccldoctor.forensics.ranks.JobSeen`: each rank's stacks, Flight
Recorder and error, whether the job stopped moving, and its exit code. The title of the one
check that fires is the watch report's verdict sentence.
"""

from __future__ import annotations

from checks import Problem, check
from nccldoctor.forensics.ranks import JobSeen, RankState, ranks_behind, without_dump
from nccldoctor.model import Severity


@check("watch.hang", area="run", category="collective_timeout_hang", scope="job")
def hang(job: JobSeen) -> Problem | None:
    """The job made no progress: which rank is behind, and where its stack stopped."""
    if not job.hung:
        return None
    states = job.ranks
    late = ranks_behind(states)
    # a rank whose dump is missing waits in no known collective: it may be the one behind
    unknown = [s for s in without_dump(states) if s not in late]
    waiting = [s for s in states if s not in late and s not in unknown]
    parts, evidence = [], []
    for s in late:
        at = f" at {s.where}" if s.where else ""
        seq = f"; its last collective was #{s.last_seq} ({s.last_op})" if s.last_seq else ""
        outside = ", not inside a collective" if s.in_collective is False else ""
        parts.append(f"{s.label} is behind{at}{outside}{seq}")
    if len(unknown) == 1:
        suspect = "what it issued is unknown" if late else "it may be the one behind"
        parts.append(f"{unknown[0].label} left no Flight Recorder dump: {suspect}")
    elif unknown:
        suspect = "what they issued is unknown" if late else "one of them may be the one behind"
        parts.append(f"ranks {_numbers(unknown)} left no Flight Recorder dump: {suspect}")
    if waiting:
        last = max((s for s in waiting if s.last_seq is not None),
                   key=lambda s: s.last_seq, default=None)  # fmt: skip
        where = f" in collective #{last.last_seq} ({last.last_op})" if last else " in a collective"
        who = (
            f"ranks {_numbers(waiting)} wait"
            if len(waiting) > 1
            else f"rank {waiting[0].rank} waits"
        )
        parts.append(f"{who}{where}")
    for s in states:
        issued = (
            f"last collective #{s.last_seq} {s.last_op or ''}"
            if s.dumped
            else f"no Flight Recorder dump ({s.evidence.flight_recorder_error or 'none came back'})"
        )
        evidence.append(
            f"{s.label}: {issued}; stack: {s.where or 'unknown'}; in collective: {s.in_collective}"
        )
        evidence.extend(f"  {line}" for line in s.evidence.last_nccl_lines[-3:])
    if not late and not unknown:
        parts.append("no rank is behind the others: all stopped together (a deadlock in a "
                     "collective, the network, or work outside torch.distributed)")  # fmt: skip
    named = late or unknown
    return Problem(
        Severity.FAIL,
        f"The job made no progress for {job.idle_s:.0f} s: " + "; ".join(parts) + ".",
        evidence,
        fix=(
            "Look at the code the behind rank is running (its stack above): a rank that skips or "
            "reorders a collective (data-dependent branches, uneven batches without "
            "DistributedSampler(drop_last=True)) hangs the others. If every rank is inside the "
            "same collective, run `nccldoctor check` across the nodes to test the network."
        ),
        rank=named[0].rank if named else None,
        node=named[0].evidence.process.host if named else None,
    )


def _numbers(states: list[RankState]) -> str:
    return ", ".join(str(s.rank) for s in states)


def _failed_first(job: JobSeen) -> list:
    """The ranks that left a traceback, first failure first: the first is the cause, the
    others' errors (peer closed the connection, remote process exited) follow from it."""
    failed = [s for s in job.ranks if s.evidence.error]
    return sorted(failed, key=lambda s: s.evidence.error_time or 0)


@check("watch.rank-failed", area="run", category="other", scope="job")
def rank_failed(job: JobSeen) -> Problem | None:
    """The job exited with an error: the first rank that failed, and its traceback."""
    failed = _failed_first(job)
    if job.hung or job.stopped_by or job.exit_code == 0 or not failed:
        return None
    first = failed[0]
    error_lines = [ln for ln in (first.evidence.error or "").splitlines() if ln.strip()]
    last_error = error_lines[-1] if error_lines else "unknown error"
    at = f" at {first.where}" if first.where else ""
    warns = [ln for s in job.ranks for ln in s.evidence.last_nccl_lines if "NCCL WARN" in ln]
    return Problem(
        Severity.FAIL,
        f"{first.label} failed{at}: {last_error}",
        error_lines[-8:] + warns[-5:],
        fix="The traceback names the failing line; the NCCL WARN lines (if any) name the "
        "cause below the Python error. Other ranks' errors usually follow from this one.",
        rank=first.rank,
        node=first.evidence.process.host,
    )


@check("watch.exit-nonzero", area="run", category="other", scope="job")
def exit_nonzero(job: JobSeen) -> Problem | None:
    """The job exited with an error and no rank left a Python traceback."""
    if job.hung or job.stopped_by or job.exit_code == 0 or _failed_first(job):
        return None
    return Problem(
        Severity.FAIL,
        f"The job exited with code {job.exit_code}; no rank left a Python traceback.",
        [line for s in job.ranks for line in s.evidence.last_nccl_lines[-3:]],
        fix="Read the job's own output above; a rank killed by a signal (OOM killer: "
        "`dmesg | grep -i kill`) leaves no traceback.",
    )


@check("watch.stopped", area="run", category="other", scope="job")
def stopped(job: JobSeen) -> Problem | None:
    """nccldoctor watch was told to stop: it stopped the job, and killed it past its grace."""
    if job.hung or not job.stopped_by:
        return None
    if job.killed:
        ended = "still running after its grace, it was killed (SIGKILL to its process group)"
    else:
        ended = f"it exited with code {job.exit_code}"
    return Problem(
        Severity.FAIL if job.killed or job.exit_code else Severity.WARN,
        f"nccldoctor watch got {job.stopped_by} and stopped the job with SIGTERM; {ended}.",
        [line for s in job.ranks for line in s.evidence.last_nccl_lines[-3:]],
        fix="Something stopped the watch: a scheduler's time limit (Slurm sends SIGTERM, then "
        "SIGKILL after KillWait), scancel or kill, or a closed terminal (SIGHUP: run it under "
        "nohup, tmux or sbatch). A job that ignores SIGTERM loses its last checkpoint: save "
        "one in a SIGTERM handler, and give it the seconds it takes with `nccldoctor watch "
        "--grace S` (10 by default).",
    )
