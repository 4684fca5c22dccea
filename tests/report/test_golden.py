"""Golden JSON of every scenario, and the schema holding for each (NCCLDOCTOR_UPDATE_GOLDEN=1 rewrites).

Reports evolve by adding keys with defaults (docs/report.md, schema versions), so a golden
document must be *contained* in what is produced now: every key it has, with the same value;
new keys may appear. A changed or dropped key fails.
"""

from __future__ import annotations

import json
import os
from typing import Any

from nccldoctor.report.load import report_from_document
from tests.report.conftest import REPORTS, fixture_document
from tests.report.helpers import assert_valid_report
from tests.report.scenarios import SCENARIOS


def differences(actual: Any, golden: Any, path: str = "") -> list[str]:
    """Where ``actual`` does not contain ``golden`` (dicts may have extra keys)."""
    if isinstance(golden, dict) and isinstance(actual, dict):
        return [
            d
            for key, value in golden.items()
            for d in (
                differences(actual[key], value, f"{path}/{key}")
                if key in actual
                else [f"{path}/{key}: missing"]
            )
        ]
    if isinstance(golden, list) and isinstance(actual, list) and len(golden) == len(actual):
        return [
            d
            for i, (a, g) in enumerate(zip(actual, golden, strict=True))
            for d in differences(a, g, f"{path}/{i}")
        ]
    return [] if actual == golden else [f"{path or '<root>'}: {actual!r} != {golden!r}"]


def test_differences_catch_changes_but_allow_new_keys() -> None:
    assert differences({"a": 1, "b": [{"c": 2, "new": 0}]}, {"a": 1, "b": [{"c": 2}]}) == []
    assert differences({"a": 2}, {"a": 1}) == ["/a: 2 != 1"]
    assert differences({}, {"a": 1}) == ["/a: missing"]
    assert differences({"b": [1, 2]}, {"b": [1]}) == ["/b: [1, 2] != [1]"]


def test_scenario_matches_its_golden_json(scenario: str) -> None:
    document = SCENARIOS[scenario]().to_dict()
    path = REPORTS / f"{scenario}.json"
    if os.environ.get("NCCLDOCTOR_UPDATE_GOLDEN"):
        path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    assert differences(document, fixture_document(scenario)) == []


def test_every_fixture_report_read_by_the_loader_follows_the_schema() -> None:
    """Golden documents are of this schema version; captured ones may be older and are upgraded."""
    paths = sorted(REPORTS.glob("*.json"))
    assert {p.stem for p in paths} >= set(SCENARIOS)
    for path in paths:
        assert_valid_report(fixture_document(path.stem))


def test_fixture_round_trips_through_the_report(scenario: str) -> None:
    document = fixture_document(scenario)
    assert differences(report_from_document(document).to_dict(), document) == []
