"""The Report: one versioned JSON document per run, the single source of truth for every view."""

from nccldoctor.report.document import (
    EXIT_FAIL,
    EXIT_INCOMPLETE,
    EXIT_OK,
    EXIT_USAGE,
    SCHEMA_VERSION,
    Report,
    load_report,
    write_report,
)

__all__ = [
    "EXIT_FAIL",
    "EXIT_INCOMPLETE",
    "EXIT_OK",
    "EXIT_USAGE",
    "SCHEMA_VERSION",
    "Report",
    "load_report",
    "write_report",
]
