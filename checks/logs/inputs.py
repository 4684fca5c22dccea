"""Rules over the logs given (scope ``logs``): unreadable, cut or truncated input, and logs
without NCCL's debug output.
"""

from __future__ import annotations

from checks import Problem, check
from nccldoctor.debugenv import NCCL_DEBUG_SUBSYS
from nccldoctor.model import Severity
from nccldoctor.ncclog.inputs import MAX_LINE
from nccldoctor.ncclog.summary import LogReading


@check("logs.unreadable", area="logs", category="other", scope="logs")
def unreadable(reading: LogReading) -> Problem | None:
    """An input could not be read to the end."""
    errors = reading.logs.read_errors
    if not errors:
        return None
    return Problem(
        Severity.WARN,
        f"{len(errors)} input(s) could not be read to the end",
        errors[:8],
        "Check the files' permissions and that they are complete.",
    )


@check("logs.lines-cut", area="logs", category="other", scope="logs")
def lines_cut(reading: LogReading) -> Problem | None:
    """Lines longer than any NCCL line were cut: what they held past the cut was not read."""
    cut = reading.logs.cut_lines
    if not cut:
        return None
    return Problem(
        Severity.WARN,
        f"{sum(cut.values())} line(s) over {MAX_LINE // 1024} KiB cut in {len(cut)} input(s)",
        [f"{name}: {n} line(s) cut" for name, n in list(cut.items())[:8]],
        "No NCCL line is that long: a progress bar that redraws itself with a carriage return\n"
        "(tqdm writing to a file) or binary data. NCCL lines glued behind such a bar are lost\n"
        "at the cut; give the bar's redraws their own lines and explain the copy:\n"
        "tr '\\r' '\\n' < job.log > job.lines.log",
    )


@check("logs.truncated", area="logs", category="other", scope="logs")
def truncated(reading: LogReading) -> Problem | None:
    """Lines past one of the reader's bounds (nccldoctor/limits.py) were left out: a number
    Python will not read, more processes than any node runs."""
    left = reading.logs.left_out
    if not left:
        return None
    return Problem(
        Severity.WARN,
        f"{sum(left.values())} line(s) left out of the reading",
        [f"{n} {why}" for why, n in left.items()],
        "No NCCL line holds such a number, and no log that many processes: the file is\n"
        "damaged or not a log. Attach the ranks' own NCCL_DEBUG_FILE logs.",
    )


@check("logs.no-nccl-output", area="logs", category="env_config", scope="logs")
def no_nccl_output(reading: LogReading) -> Problem | None:
    """The inputs hold no NCCL debug output at all."""
    logs = reading.logs
    if logs.nccl_lines or logs.bare_versions:
        return None
    counted = [f"{logs.other_lines} other lines, {logs.garbled_lines} garbled"]
    gloo = sorted(sig for sig in logs.signatures if "gloo" in sig)
    if gloo:  # a gloo job: NCCL has nothing to log, and its advice would be wrong
        return Problem(
            Severity.INFO,
            f"no NCCL output in {logs.lines} lines: this job ran its collectives on gloo",
            [*counted, f"gloo's own lines: {', '.join(gloo)}"],
            "The gloo findings above are the evidence; NCCL_DEBUG changes nothing for gloo.",
        )
    return Problem(
        Severity.WARN,
        f"no NCCL debug output in {logs.lines} lines of {len(logs.sources)} input(s)",
        counted,
        "If this job used NCCL (backend nccl), NCCL logs only when asked to. Rerun with:\n"
        f"export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS={NCCL_DEBUG_SUBSYS}\n"
        "export NCCL_DEBUG_FILE=/tmp/nccl.%h.%p.log   # one file per process",
    )
