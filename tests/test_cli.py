from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from checks import all_checks
from nccldoctor import __version__
from nccldoctor.cli import EXIT_CODES
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


def test_list_checks_lists_every_registered_check_with_its_scope():
    result = runner.invoke(app, ["preflight", "--list-checks"])
    assert result.exit_code == 0
    listed = {tuple(line.split()[:2]) for line in result.stdout.splitlines()}
    assert listed == {(c.id, c.scope) for c in all_checks()}
    assert {"node", "cluster", "run", "logs", "job"} <= {scope for _, scope in listed}


def test_unknown_check_is_a_usage_error():
    result = runner.invoke(app, ["preflight", "--check", "no.such-check"])
    assert result.exit_code == 2
    assert "no check available by the name no.such-check" in result.output


def _imported_by(*argv: str) -> set[str]:
    """The modules a real `python -m nccldoctor ARGV` imports, from Python's -X importtime."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "nccldoctor", *argv],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode in (0, 1), out.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines()
            if line.startswith("import time:") and "|" in line}  # fmt: skip


def test_preflight_json_imports_only_what_it_uses():
    # preflight runs before every job on every node: the other commands' modules, torch and
    # the terminal renderer stay out of a --json run.
    modules = _imported_by("preflight", "--json")
    assert "nccldoctor.cli.preflight" in modules
    for heavy in ("torch", "pydantic", "rich.console", "nccldoctor.cluster.config",
                  "nccldoctor.ncclog", "nccldoctor.cli.check", "checks.signatures"):  # fmt: skip
        assert heavy not in modules, heavy


def test_help_lists_every_command():
    result = subprocess.run([sys.executable, "-m", "nccldoctor", "--help"],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0
    for command in ("preflight", "explain", "check", "demo", "watch", "report", "docs"):
        assert command in result.stdout


@pytest.mark.parametrize(
    "command",
    [
        ["preflight"],
        ["explain"],
        ["check"],
        ["demo"],
        ["watch"],
        ["report"],
        ["report", "show"],
        ["report", "merge"],
        ["docs"],
    ],
)
def test_every_help_carries_the_one_exit_code_sentence(command):
    result = runner.invoke(app, [*command, "--help"], env={"NO_COLOR": "1", "COLUMNS": "400"})
    assert result.exit_code == 0
    assert " ".join(result.stdout.split()).count(" ".join(EXIT_CODES.split())) == 1


def test_the_readme_states_the_same_exit_code_sentence():
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    paragraph = readme.split('<a id="exit-codes"></a>\n', 1)[1].split("\n\n", 1)[0]
    assert " ".join(paragraph.replace("`", "").split()) == " ".join(EXIT_CODES.split())


def test_preflight_writes_its_json_to_the_file_named_by_json_file(tmp_path):
    path = tmp_path / "preflight.json"
    result = runner.invoke(app, ["preflight", "--json-file", str(path)])
    assert result.exit_code in (0, 1), result.output
    assert json.loads(path.read_text())["kind"] == "preflight"


@pytest.mark.parametrize(
    "command", [["check", "--master", "198.18.0.1", "--nodes", "1"], ["demo", "--loopback"]]
)
def test_an_out_that_is_a_file_is_said_in_one_line_before_anything_runs(tmp_path, command):
    out = tmp_path / "out"
    out.write_text("a user's file\n")
    result = subprocess.run([sys.executable, "-m", "nccldoctor", *command, "--out", str(out)],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(
        f"nccldoctor: cannot write this run's files under --out {out}: {out} is a file ("
    ), result.stderr
    assert len(result.stderr.splitlines()) == 1 and out.read_text() == "a user's file\n"


def test_a_run_name_already_used_is_refused(tmp_path):
    (tmp_path / "n0" / "job-7").mkdir(parents=True)
    result = runner.invoke(app, ["check", "--master", "198.18.0.1", "--nodes", "1", "--out",
                                 str(tmp_path), "--node-name", "n0", "--run-name", "job-7"])  # fmt: skip
    assert result.exit_code == 2
    assert f"{tmp_path}/n0/job-7 already holds a run" in " ".join(result.output.split())
