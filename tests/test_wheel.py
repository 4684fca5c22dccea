"""The wheel: built from this checkout, installed into a fresh venv, `nccldoctor preflight` run
from there. `checks/` and `templates/` must travel inside it.

The fresh venv has no site packages of its own; the wheel goes in with `--no-deps` and its
dependencies (torch, psutil, typer, ...) come from this interpreter's site-packages through a
`.pth` path line. A path line adds the folder without running the `.pth` files in it, so an
editable install of nccldoctor there stays invisible to the new venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _run(cmd: list, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run(
        [str(c) for c in cmd], env=env, capture_output=True, text=True, timeout=600, **kwargs
    )
    return proc


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_runs_preflight(tmp_path, built_wheel):
    wheel = built_wheel
    names = zipfile.ZipFile(wheel).namelist()
    for shipped in ("checks/__init__.py", "checks/gpu.py", "checks/container.py"):
        assert shipped in names
    assert any(n.startswith("nccldoctor/templates/") for n in names)
    assert "nccldoctor/guide/findings/container.shm-small.md" in names
    assert not any(n.startswith("tests/") for n in names)

    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", venv]).returncode == 0
    python = venv / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", python, "install", "-q"]
    proc = _run([*install, "--no-deps", "--no-index", wheel])
    assert proc.returncode == 0, proc.stderr
    site = Path(
        _run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        ).stdout.strip()
    )
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "nccldoctor_test_deps.pth").write_text("".join(f"{d}\n" for d in sorted(deps)))

    where = _run(
        [
            python,
            "-c",
            "import nccldoctor, checks; print(nccldoctor.__file__); print(checks.__file__)",
        ],
        cwd=tmp_path,
    )
    assert where.returncode == 0, where.stderr
    for path in where.stdout.split():
        assert Path(path).is_relative_to(venv), path
    templates = Path(where.stdout.split()[0]).parent / "templates"
    assert templates.is_dir()

    proc = _run([venv / "bin" / "nccldoctor", "preflight", "--json"], cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["kind"] == "preflight" and doc["exit_code"] == proc.returncode
    listed = _run([venv / "bin" / "nccldoctor", "preflight", "--list-checks"], cwd=tmp_path)
    assert "container.shm-small" in listed.stdout and "gpu.no-gpu" in listed.stdout
    version = _run([venv / "bin" / "nccldoctor", "--version"], cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("nccldoctor ")
    # the field guide travels too: a finding's page, read from the installed package
    page = _run([venv / "bin" / "nccldoctor", "docs", "container.shm-small"], cwd=tmp_path)
    assert page.returncode == 0 and page.stdout.startswith("# `container.shm-small`"), page.stderr
    assert (
        f"The field guide: {Path(where.stdout.split()[0]).parent / 'guide'}"
        in _run([venv / "bin" / "nccldoctor", "docs"], cwd=tmp_path).stdout
    )
