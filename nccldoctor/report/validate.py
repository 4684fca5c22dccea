"""Validate a report document against the JSON Schema shipped in the package (schema.json)."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any


@cache
def report_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the report document."""
    return json.loads(resources.files(__package__).joinpath("schema.json").read_text("utf-8"))


def validate_report(document: Any) -> list[str]:
    """Every way ``document`` breaks the schema, one line each ("path: message"); [] when valid.

    jsonschema is a test dependency, imported only here.
    """
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(report_schema())
    errors = (_deepest(e) for e in validator.iter_errors(document))
    return sorted(f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors)


def _deepest(error: Any) -> Any:
    """Inside "X or null" (anyOf), the error of the branch that got furthest says what is wrong."""
    while error.context:
        error = max(error.context, key=lambda e: len(e.absolute_path))
    return error
