from __future__ import annotations

import json
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture(autouse=True)
def reports_follow_the_schema(request: pytest.FixtureRequest):
    """Every report a test leaves under its tmp_path (from the CLI, agents, watchers) is checked
    against nccldoctor/report/schema.json; tests that write broken reports on purpose opt out
    with ``@pytest.mark.invalid_reports``."""
    if "tmp_path" not in request.fixturenames or request.node.get_closest_marker("invalid_reports"):
        yield
        return
    tmp_path = request.getfixturevalue("tmp_path")  # now torn down after this check
    yield
    from tests.report.helpers import assert_valid_report

    for path in tmp_path.rglob("*.json"):
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(document, dict) and {"schema_version", "kind", "findings"} <= document.keys():
            assert_valid_report(document)
