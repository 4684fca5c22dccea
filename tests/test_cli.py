from __future__ import annotations

import json
import subprocess
import sys

from typer.testing import CliRunner

from nccldoctor import __version__
from nccldoctor.cli.app import app

runner = CliRunner()


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"nccldoctor {__version__}"


def test_python_dash_m():
    out = subprocess.run(
        [sys.executable, "-m", "nccldoctor", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert __version__ in out.stdout


def test_preflight_json_on_this_machine():
    result = runner.invoke(app, ["preflight", "--json"])
    assert result.exit_code in (0, 1), result.output
    doc = json.loads(result.stdout)
    assert doc["kind"] == "preflight"
    assert doc["schema_version"] >= 1
    assert doc["exit_code"] == result.exit_code


def test_unknown_check_is_a_usage_error():
    result = runner.invoke(app, ["preflight", "--check", "no.such-check"])
    assert result.exit_code == 2
    assert "no check available by the name no.such-check" in result.output
