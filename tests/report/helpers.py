"""Test helpers other tests can import: `from tests.report.helpers import assert_valid_report`."""

from __future__ import annotations

from typing import Any

from nccldoctor.report import Report
from nccldoctor.report.validate import validate_report


def assert_valid_report(report: Report | dict[str, Any]) -> dict[str, Any]:
    """Fail the test with every schema error of ``report``; return its JSON document."""
    document = report.to_dict() if isinstance(report, Report) else report
    errors = validate_report(document)
    assert not errors, "report does not follow nccldoctor/report/schema.json:\n" + "\n".join(errors)
    return document
