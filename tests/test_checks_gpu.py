"""GPU checks: each one made to fire by a real-shaped node, and kept quiet by a healthy one."""

from __future__ import annotations

from pathlib import Path

import pynvml
from fake_nvml import FakeNvml

from checks import get_check
from nccldoctor.facts import NodeFacts
from nccldoctor.facts.gpu import GpuDevice, TorchCuda
from nccldoctor.model import Finding, Severity
from nccldoctor.probes import gpu
from tests.hostfacts import copy_host

FIXTURES = Path(__file__).parent / "fixtures" / "hosts"


def node(env: dict[str, str] | None = None, **gpus) -> NodeFacts:
    """A node whose GPUs NVML reports as FakeNvml(**gpus), under ``env``."""
    return NodeFacts(node="gpu-node", gpu=gpu.probe(Path("/"), env or {}, nvml=FakeNvml(**gpus)))


def run(check_id: str, facts: NodeFacts) -> list[Finding]:
    return get_check(check_id).run(facts, node=facts.node)


def test_no_gpu_fires_without_a_driver():
    facts = NodeFacts(
        gpu=gpu.probe(Path("/"), {}, nvml=FakeNvml(pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    )
    facts.gpu.torch = TorchCuda(True, "2.4.1+cu121", "12.1")
    (finding,) = run("gpu.no-gpu", facts)
    assert finding.severity is Severity.FAIL and finding.category == "gpu_visibility"
    assert finding.evidence[0] == "NVML: NVMLError_DriverNotLoaded: Driver Not Loaded"
    assert "nvidia-smi" in finding.fix


def test_no_gpu_with_device_files_points_at_the_container_runtime():
    facts = NodeFacts(
        gpu=gpu.probe(Path("/"), {}, nvml=FakeNvml(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    )
    facts.gpu.device_files = ["/dev/nvidia0", "/dev/nvidiactl"]
    (finding,) = run("gpu.no-gpu", facts)
    assert "docker run --gpus all" in finding.fix


def test_no_gpu_on_a_cpu_node_is_info():
    facts = NodeFacts(gpu=gpu.probe(FIXTURES / "cpu-host", {}))
    facts.gpu.torch = TorchCuda(True, "2.13.0+cpu")
    (finding,) = run("gpu.no-gpu", facts)
    assert finding.severity is Severity.INFO
    assert finding.evidence[1:] == [
        "/proc/driver/nvidia/version: missing",
        "/dev/nvidia*: none",
        "torch: 2.13.0+cpu",
    ]
    assert "init_process_group('gloo')" in finding.fix


def test_no_gpu_quiet_on_a_captured_tree_with_the_driver(tmp_path):
    """A GPU machine's captured tree (scripts/gpu_verify.py keeps one) holds the driver's files
    but no NVML, which answers for the live machine only: no GPU is not a finding there."""
    tree = copy_host("cpu-host", tmp_path)
    (tree / "proc" / "driver" / "nvidia").mkdir(parents=True)
    (tree / "proc" / "driver" / "nvidia" / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct 30 2025\n"
    )
    (tree / "dev").mkdir(exist_ok=True)
    (tree / "dev" / "nvidia0").touch()
    facts = NodeFacts(gpu=gpu.probe(tree, {}))
    assert facts.gpu.kernel_driver and not facts.gpu.nvml_read
    assert run("gpu.no-gpu", facts) == []
    # without the driver's files a tree is a CPU node's, as it says
    assert run("gpu.no-gpu", NodeFacts(gpu=gpu.probe(FIXTURES / "cpu-host", {})))


def test_no_gpu_quiet_with_gpus():
    assert run("gpu.no-gpu", node()) == []


def test_visible_devices_hide_all_fires_on_empty_value():
    (finding,) = run("gpu.visible-devices-hide-all", node({"CUDA_VISIBLE_DEVICES": ""}))
    assert finding.title == "CUDA_VISIBLE_DEVICES='' hides every GPU from CUDA"
    assert finding.evidence == ["CUDA_VISIBLE_DEVICES=''", "NVML sees 2 GPU(s)"]


def test_visible_devices_hide_all_without_nvml_reads_the_value():
    facts = NodeFacts(gpu=gpu.probe(FIXTURES / "cpu-host", {"CUDA_VISIBLE_DEVICES": "NoDevFiles"}))
    facts.gpu.device_files = ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"]
    (finding,) = run("gpu.visible-devices-hide-all", facts)
    assert finding.severity is Severity.FAIL
    assert finding.evidence == ["CUDA_VISIBLE_DEVICES='NoDevFiles'", "NVML not usable"]


def test_visible_devices_hide_all_quiet_on_a_cpu_node():
    facts = NodeFacts(gpu=gpu.probe(FIXTURES / "cpu-host", {"CUDA_VISIBLE_DEVICES": ""}))
    assert run("gpu.visible-devices-hide-all", facts) == []


def test_visible_devices_hide_all_quiet():
    assert run("gpu.visible-devices-hide-all", node({"CUDA_VISIBLE_DEVICES": "1"})) == []
    assert run("gpu.visible-devices-hide-all", node()) == []


def test_visible_devices_missing_fires():
    (finding,) = run("gpu.visible-devices-missing", node({"CUDA_VISIBLE_DEVICES": "0,3,1"}))
    assert finding.title == "CUDA_VISIBLE_DEVICES names 3, 1, which this node does not have"
    assert "export CUDA_VISIBLE_DEVICES=0" in finding.fix


def test_visible_devices_missing_quiet():
    uuid = "GPU-9a41d3e0-77c2-4b5f-8e1d-6c0f2a9b3d47"
    assert run("gpu.visible-devices-missing", node({"CUDA_VISIBLE_DEVICES": f"{uuid},0"})) == []


def test_compute_mode_exclusive_fires():
    (finding,) = run("gpu.compute-mode-exclusive", node(gpu1={"mode": 3}))
    assert finding.severity is Severity.WARN
    assert finding.title == "GPU 1 is in Exclusive_Process compute mode"
    assert "sudo nvidia-smi -i 1 -c DEFAULT" in finding.fix
    (prohibited,) = run("gpu.compute-mode-exclusive", node(gpu0={"mode": 2}))
    assert prohibited.severity is Severity.FAIL


def test_compute_mode_exclusive_quiet():
    assert run("gpu.compute-mode-exclusive", node()) == []


def test_mig_enabled_fires():
    (finding,) = run("gpu.mig-enabled", node(gpu0={"mig": [1, 1]}))
    assert finding.severity is Severity.WARN
    assert "sudo nvidia-smi -i 0 -mig 0" in finding.fix
    assert "MIG-0c5e0" in finding.evidence[0]


def test_mig_enabled_quiet():
    assert run("gpu.mig-enabled", node(gpu1={"mig": None})) == []


def test_ecc_uncorrected_fires():
    (finding,) = run("gpu.ecc-uncorrected", node(gpu1={"ecc": 4}))
    assert finding.severity is Severity.FAIL and finding.category == "cuda_error"
    assert finding.evidence == [
        "GPU 1 NVIDIA H100 80GB HBM3 00000000:2A:00.0: 4 uncorrected (volatile)"
    ]
    assert "sudo nvidia-smi -r -i 1" in finding.fix


def test_ecc_uncorrected_quiet():
    assert run("gpu.ecc-uncorrected", node(gpu0={"ecc": None})) == []


def test_driver_older_than_torch_cuda_fires():
    facts = node()
    facts.gpu.torch = TorchCuda(installed=True, version="2.13.0+cu130", cuda_build="13.0")
    (finding,) = run("gpu.driver-older-than-torch-cuda", facts)
    assert finding.title == "torch is built for CUDA 13.0, the driver supports CUDA 12.4 at most"
    assert (
        "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu124"
        in finding.fix
    )


def test_driver_older_than_torch_cuda_quiet():
    facts = node()
    facts.gpu.torch = TorchCuda(installed=True, version="2.4.1+cu121", cuda_build="12.1")
    assert run("gpu.driver-older-than-torch-cuda", facts) == []


def test_unresponsive_fires_for_a_lost_gpu():
    facts = node()
    facts.gpu.devices[1] = GpuDevice(1, read_errors=["NVMLError_GpuIsLost: GPU is lost"])
    (finding,) = run("gpu.unresponsive", facts)
    assert finding.title == "GPU 1 does not answer NVML"
    assert finding.evidence == ["GPU 1: NVMLError_GpuIsLost: GPU is lost"]
    assert "sudo nvidia-smi -r -i 1" in finding.fix


def test_unresponsive_quiet_when_only_optional_reads_fail():
    assert run("gpu.unresponsive", node(gpu0={"ecc": None, "mig": None})) == []


def test_a_run_on_gloo_judges_gpu_failures_as_warnings_or_information():
    """A run on gloo needs no GPU: what fails for NCCL warns where the run fell back to gloo,
    and only informs where the user asked for gloo; a warning stays a warning."""
    chosen = node(gpu1={"ecc": 4}, gpu0={"mode": 3})
    chosen.backend = "gloo"
    (ecc,) = run("gpu.ecc-uncorrected", chosen)
    assert ecc.severity is Severity.WARN
    assert ecc.title == "Uncorrectable ECC errors on GPU 1 (this check ran on gloo)"
    (mode,) = run("gpu.compute-mode-exclusive", chosen)
    assert mode.severity is Severity.WARN and "gloo" not in mode.title

    chosen.backend_asked = True
    (ecc,) = run("gpu.ecc-uncorrected", chosen)
    assert ecc.severity is Severity.INFO

    nccl = node(gpu1={"ecc": 4})
    nccl.backend, nccl.backend_asked = "nccl", True
    (ecc,) = run("gpu.ecc-uncorrected", nccl)
    assert ecc.severity is Severity.FAIL and "gloo" not in ecc.title
