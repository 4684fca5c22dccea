from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parent.parent


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


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """nccldoctor's wheel, built once per session (pip, offline when hatchling is installed)."""
    out = tmp_path_factory.mktemp("dist")
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)]
    if importlib.util.find_spec("hatchling"):
        cmd.insert(4, "--no-build-isolation")  # offline: the backend is already here
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = out.glob("nccldoctor-*.whl")
    return wheel
