from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nccldoctor.report.load import read_document
from tests.report.scenarios import SCENARIOS

REPORTS = Path(__file__).parent.parent / "fixtures" / "reports"


def fixture_document(name: str) -> dict[str, Any]:
    """A captured or golden document, read the way `nccldoctor report` reads one (upgraded)."""
    return read_document(REPORTS / f"{name}.json")


@pytest.fixture(params=sorted(SCENARIOS))
def scenario(request: pytest.FixtureRequest) -> str:
    return request.param
