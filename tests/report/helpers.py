"""Test helpers other tests can import: `from tests.report.helpers import assert_valid_report`.

The report's JSON Schema (nccldoctor/report/schema.json) ships in the package as the document's
published description; validating against it is a test's job, so it lives here, with jsonschema
(a test dependency).
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from nccldoctor.report import Report


@cache
def report_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the report document."""
    text = resources.files("nccldoctor.report").joinpath("schema.json").read_text("utf-8")
    return json.loads(text)


def validate_report(document: Any) -> list[str]:
    """Every way ``document`` breaks the schema, one line each ("path: message"); [] when valid."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(report_schema())
    errors = (_deepest(e) for e in validator.iter_errors(document))
    return sorted(f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors)


def _deepest(error: Any) -> Any:
    """Inside "X or null" (anyOf), the error of the branch that got furthest says what is wrong."""
    while error.context:
        error = max(error.context, key=lambda e: len(e.absolute_path))
    return error


def assert_valid_report(report: Report | dict[str, Any]) -> dict[str, Any]:
    """Fail the test with every schema error of ``report``; return its JSON document."""
    document = report.to_dict() if isinstance(report, Report) else report
    errors = validate_report(document)
    assert not errors, "report does not follow nccldoctor/report/schema.json:\n" + "\n".join(errors)
    return document
