"""Turn a watch outcome into the same Report document as `check`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from checks import run_checks
from nccldoctor.explain import explain, explain_dumps
from nccldoctor.forensics.ranks import JobSeen, rank_state
from nccldoctor.model import Finding
from nccldoctor.ncclog.inputs import file_sources
from nccldoctor.report import Report
from nccldoctor.watch.supervisor import WatchOutcome


def explain_job_logs(log_dir: Path) -> tuple[dict[str, Any], list[Finding]]:
    """What the job's NCCL logs and its ranks' tracebacks say: the summary and known signatures."""
    sources = file_sources(sorted([*log_dir.glob("nccl.*.log"), *log_dir.glob("error.*.txt")]))
    if not sources:
        return {}, []
    return explain(sources)


def watch_report(
    outcome: WatchOutcome, command: Sequence[str], log_dir: Path, final: bool = True
) -> Report:
    states = sorted(
        (rank_state(e) for e in outcome.evidence),
        key=lambda s: (s.rank is None, s.rank if s.rank is not None else s.evidence.process.pid),
    )
    # Only the processes that are ranks matter (torchrun's own agent is not one).
    ranked = [s for s in states if s.rank is not None] or states
    seen_job = JobSeen(ranked, outcome.hung, outcome.idle_s, outcome.exit_code,
                       outcome.stopped_by, outcome.killed)  # fmt: skip
    findings = run_checks("job", seen_job)
    # the one job check that fires says what happened; a healthy job fires none
    sentence = findings[0].title if findings else "The job finished successfully."
    hang = None
    if outcome.hung:
        hang = {
            "phase": "training",
            "stuck": [
                {
                    "node": s.evidence.process.host,
                    "rank": s.rank,
                    "phase": "training",
                    "last_nccl_line": (s.evidence.last_nccl_lines or [None])[-1],
                }
                for s in ranked
            ],
            "verdict": sentence,
        }
    nccl, log_findings = explain_job_logs(log_dir)
    # the dumps the ranks answered with (fr.<pid>.pkl), matched across ranks like explain's
    flight_recorder, fr_findings = explain_dumps(
        [(log_dir / f"fr.{s.evidence.process.pid}.pkl", s.rank)
         for s in ranked if s.evidence.flight_recorder is not None]
    )  # fmt: skip
    seen = {f.id for f in findings}
    findings += fr_findings + [f for f in log_findings if f.id not in seen]
    return Report(
        kind="watch",
        findings=findings,
        command=list(command),
        completed=final and not outcome.ended_by_watch and outcome.stopped_by is None,
        extra={
            **nccl,
            "watch": {
                "exit_code": outcome.exit_code,
                "hung": outcome.hung,
                "ended_by_watch": outcome.ended_by_watch,
                "stopped_by": outcome.stopped_by,
                "killed": outcome.killed,
                "idle_s": round(outcome.idle_s, 1),
                "duration_s": round(outcome.duration_s, 1),
                "verdict": sentence,
                "output_tail": outcome.output_tail,
            },
            "hang": hang,
            "flight_recorder": flight_recorder,
            "ranks": [
                {
                    "rank": s.rank,
                    "node": s.evidence.process.host,
                    "local_rank": s.evidence.process.local_rank,
                    "pid": s.evidence.process.pid,
                    "phase_reached": "training",
                    "exit_code": None,
                    "where": s.where,
                    "in_collective": s.in_collective,
                    "last_collective_seq": s.last_seq,
                    "last_nccl_lines": s.evidence.last_nccl_lines,
                    "stacks": s.evidence.stacks,
                    "stacks_source": s.evidence.stacks_source,
                    "flight_recorder": s.evidence.flight_recorder,
                    "flight_recorder_error": s.evidence.flight_recorder_error,
                    "error": s.evidence.error,
                    "log_path": s.evidence.nccl_log,
                }
                for s in ranked
            ],
        },
    )
