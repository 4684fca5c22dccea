"""`nccldoctor preflight` end to end for the GPU/software/container areas: on this machine (which
has no NVIDIA driver), on the captured host trees, and without importing torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccldoctor.cli.app import app

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures" / "hosts"
runner = CliRunner()


def _has_nvidia_driver() -> bool:
    return Path("/proc/driver/nvidia/version").exists()


@pytest.mark.skipif(_has_nvidia_driver(), reason="this machine has an NVIDIA driver")
def test_this_machine_reports_no_driver_with_its_fix():
    result = runner.invoke(app, ["preflight", "--json"])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    (finding,) = [f for f in doc["findings"] if f["id"] == "gpu.no-gpu"]
    assert finding["severity"] == "fail" and finding["area"] == "gpu"
    assert finding["evidence"][1] == "/proc/driver/nvidia/version: missing"
    assert "Install the NVIDIA driver on the host" in finding["fix"]
    assert "nvidia-smi" in finding["fix"]
    assert doc["area_status"]["gpu"].startswith("no NVIDIA driver: ")
    node = doc["nodes"][0]
    assert node["gpu"]["nvml_available"] is False and node["gpu"]["nvml_error"]
    assert node["software"]["python"] and node["container"]["shm_source"] == "statvfs"


def test_this_machine_terminal_output_shows_the_fix():
    result = runner.invoke(app, ["preflight", "--check", "gpu.no-gpu"])
    if _has_nvidia_driver():
        assert result.exit_code == 0
        return
    assert result.exit_code == 1
    assert "No usable NVIDIA GPU or driver: NCCL cannot run here" in result.stdout
    assert "Fix:" in result.stdout


def test_docker_bridge_fixture_on_a_multi_node_job():
    root = FIXTURES / "docker-bridge"
    result = runner.invoke(
        app, ["preflight", "--json", "--root", str(root), "--master", "198.18.0.1"]
    )
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    by_id = {f["id"]: f for f in doc["findings"]}
    assert by_id["container.bridge-network"]["severity"] == "fail"
    assert by_id["container.shm-small"]["title"] == "/dev/shm is only 64 MiB"
    assert "container.memlock-limited" not in by_id  # no HCA in this container
    assert doc["area_status"]["container"] == (
        "docker, bridge network, /dev/shm 64 MiB, memlock 8192 KiB"
    )


def test_cpu_host_fixture_has_no_container_findings():
    result = runner.invoke(app, ["preflight", "--json", "--root", str(FIXTURES / "cpu-host")])
    doc = json.loads(result.stdout)
    assert not [f for f in doc["findings"] if f["area"] == "container"]
    assert doc["area_status"]["container"].startswith("bare host, /dev/shm ")


def test_preflight_does_not_import_torch():
    """Run preflight in a fresh interpreter, then look at its sys.modules."""
    code = (
        "import sys\n"
        "from nccldoctor.cli.app import app\n"
        "try:\n"
        "    app(['preflight', '--json'])\n"
        "except SystemExit as exc:\n"
        "    assert exc.code in (0, 1), exc.code\n"
        "loaded = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
        "print('TORCH-MODULES', loaded, file=sys.stderr)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "TORCH-MODULES []" in proc.stderr
    assert json.loads(proc.stdout)["kind"] == "preflight"
