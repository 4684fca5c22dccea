"""Golden JSON of every scenario, and the schema holding for each (NCCLDOCTOR_UPDATE_GOLDEN=1 rewrites)."""

from __future__ import annotations

import json
import os

from nccldoctor.report.load import report_from_document
from tests.report.conftest import REPORTS, fixture_document
from tests.report.helpers import assert_valid_report
from tests.report.scenarios import SCENARIOS


def test_scenario_matches_its_golden_json(scenario: str) -> None:
    document = SCENARIOS[scenario]().to_dict()
    path = REPORTS / f"{scenario}.json"
    if os.environ.get("NCCLDOCTOR_UPDATE_GOLDEN"):
        path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    assert document == fixture_document(scenario)


def test_every_fixture_report_follows_the_schema() -> None:
    paths = sorted(REPORTS.glob("*.json"))
    assert {p.stem for p in paths} >= set(SCENARIOS)
    for path in paths:
        assert_valid_report(json.loads(path.read_text(encoding="utf-8")))


def test_fixture_round_trips_through_the_report(scenario: str) -> None:
    document = fixture_document(scenario)
    assert report_from_document(document).to_dict() == document
