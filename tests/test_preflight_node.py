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
    assert result.exit_code in (0, 1), result.output
    doc = json.loads(result.stdout)
    (finding,) = [f for f in doc["findings"] if f["id"] == "gpu.no-gpu"]
    # a CPU build of torch makes this a CPU node (gloo): info; a CUDA build: a failure
    cuda_torch = doc["nodes"][0]["gpu"]["torch"]["cuda_build"]
    assert finding["severity"] == ("fail" if cuda_torch else "info") and finding["area"] == "gpu"
    assert finding["evidence"][1] == "/proc/driver/nvidia/version: missing"
    assert "Install the NVIDIA driver on the host" in finding["fix"]
    assert "nvidia-smi" in finding["fix"]
    assert doc["area_status"]["gpu"].startswith("no NVIDIA driver: ")
    node = doc["nodes"][0]
    assert node["gpu"]["nvml_available"] is False and node["gpu"]["nvml_error"]
    assert node["software"]["python"] and node["container"]["shm_source"] == "statvfs"


def test_this_machine_terminal_output_shows_the_fix():
    result = runner.invoke(app, ["preflight", "--check", "gpu.no-gpu", "--verbose"])
    if _has_nvidia_driver():
        assert result.exit_code == 0
        return
    assert result.exit_code in (0, 1)
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
        "docker, bridge network, /dev/shm 64 MiB, memlock 8 MiB"
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


def test_garbled_tree_ends_in_findings_not_a_traceback(tmp_path):
    """Binary junk where the GPU, software and container probes read: a report, exit 0 or 1."""
    junk = b"\x00\xff\xfe garbage \n\x7fELF - - -\n"
    for path in (
        "proc/self/mountinfo",
        "proc/self/status",
        "proc/self/limits",
        "proc/self/cgroup",
        "proc/1/cgroup",
        "proc/net/route",
        "proc/driver/nvidia/version",
        "proc/sys/kernel/osrelease",
        "etc/os-release",
        "etc/ld.so.conf",
        "usr/lib/python3.10/site-packages/torch/__init__.py",
        "usr/lib/python3.10/site-packages/torch/version.py",
        "usr/lib/python3.10/site-packages/torch-2.4.1.dist-info/METADATA",
        "usr/lib/x86_64-linux-gnu/libnccl.so.2",
        "sys/class/net/eth0/ifindex",
        "sys/class/net/eth0/iflink",
    ):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(junk)
    (tmp_path / "proc/self/ns").mkdir(parents=True)
    (tmp_path / "proc/self/ns/ipc").symlink_to("not-a-namespace")
    result = runner.invoke(app, ["preflight", "--json", "--root", str(tmp_path)])
    assert result.exit_code in (0, 1), result.output
    doc = json.loads(result.stdout)
    mine = ("gpu", "software", "container")
    assert not [e for e in doc["nodes"][0]["probe_errors"] if e["probe"] in mine]
    assert not [f for f in doc["findings"] if f["id"].endswith(".crashed") and f["area"] in mine]
    node = doc["nodes"][0]
    assert node["software"]["nccl_libraries"][0]["version"] is None
    assert node["gpu"]["torch"]["installed"] is True and node["gpu"]["torch"]["version"] is None


def _preflight(*args: str, env: dict[str, str]) -> dict:
    result = runner.invoke(app, ["preflight", "--json", *args], env=env)
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def test_preflight_alone_and_with_a_master_give_one_answer_about_a_node():
    """A hostname on 127.0.1.1 breaks a multi-node job; preflight without a master says so too,
    as what the node has as one of several, and with one it is the finding itself."""
    tree = str(FIXTURES / "hosts-loopback")
    alone_env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "WORLD_SIZE")}
    alone = _preflight("--root", tree, env=alone_env)
    (said,) = [f for f in alone["findings"] if f["id"] == "preflight.judged-alone"]
    assert said["severity"] == "warn" and "--master" in said["fix"]
    assert any("(host.hostname-loopback)" in line for line in said["evidence"])
    several = _preflight("--root", tree, "--master", "198.18.0.1", env=alone_env)
    ids = {f["id"] for f in several["findings"]}
    assert "host.hostname-loopback" in ids and "preflight.judged-alone" not in ids
    # the launcher's own world on this node: a single-node job, nothing more to say
    single = _preflight(
        "--root", tree, env={**alone_env, "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
    )
    assert not {"preflight.judged-alone", "host.hostname-loopback"} & {
        f["id"] for f in single["findings"]
    }
