from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.report.scenarios import SCENARIOS

REPORTS = Path(__file__).parent.parent / "fixtures" / "reports"


def fixture_document(name: str) -> dict[str, Any]:
    return json.loads((REPORTS / f"{name}.json").read_text(encoding="utf-8"))


@pytest.fixture(params=sorted(SCENARIOS))
def scenario(request: pytest.FixtureRequest) -> str:
    return request.param
