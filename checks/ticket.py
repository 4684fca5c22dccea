"""Checks over a ticket's attachments as `nccldoctor explain` sorted them (``scope="ticket"``).

The subject is the :class:`~nccldoctor.ticket.Ticket`: the files read, by kind, and those that
were not, each with why (binary, only NUL bytes, unreadable, a damaged or oversized archive).
"""

from __future__ import annotations

from checks import Problem, check
from nccldoctor.model import Severity
from nccldoctor.ticket import Ticket


@check("ticket.not-read", area="logs", category="other", scope="ticket")
def not_read(ticket: Ticket) -> Problem | None:
    """Some attachments were not read: what the answer leaves out, and why."""
    if not ticket.skipped:
        return None
    more = len(ticket.skipped) - 8 + ticket.more_skipped
    return Problem(
        Severity.WARN,
        f"{len(ticket.skipped) + ticket.more_skipped} attachment(s) not read",
        [f"{name}: {why}" for name, why in ticket.skipped[:8]]
        + (
            [f"... and {more} more (the report's attachments section names them)"]
            if more > 0
            else []
        ),
        "Attach NCCL's logs as text, whole: one file per process with\n"
        "export NCCL_DEBUG=INFO NCCL_DEBUG_FILE=/tmp/nccl.%h.%p.log\n"
        "A file of only NUL bytes was being written when its node crashed or its disk filled:\n"
        "the job's stdout, captured by the launcher, may still hold the lines.",
    )
