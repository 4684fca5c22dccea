"""Software checks: torch's build against the node's GPUs, and libnccl copies that override it."""

from __future__ import annotations

from pathlib import Path

from fake_nvml import FakeNvml

from checks import get_check
from nccldoctor.facts import NodeFacts
from nccldoctor.facts.gpu import TorchCuda
from nccldoctor.facts.software import NcclLibrary, SoftwareFacts
from nccldoctor.model import Finding, Severity
from nccldoctor.probes import gpu


def run(check_id: str, facts: NodeFacts) -> list[Finding]:
    return get_check(check_id).run(facts)


def gpu_node(torch: TorchCuda) -> NodeFacts:
    facts = NodeFacts(gpu=gpu.probe(Path("/"), {}, nvml=FakeNvml()))
    facts.gpu.torch = torch
    return facts


def test_torch_cpu_build_fires_on_a_gpu_node():
    (finding,) = run("software.torch-cpu-build", gpu_node(TorchCuda(True, "2.13.0+cpu")))
    assert finding.severity is Severity.FAIL
    assert finding.title == "torch 2.13.0+cpu is a CPU-only build; this node has 2 GPU(s)"
    assert "pip install --force-reinstall torch==2.13.0" in finding.fix


def test_torch_cpu_build_quiet():
    assert run("software.torch-cpu-build", gpu_node(TorchCuda(True, "2.13.0", "12.8"))) == []
    # and on a node without GPUs a CPU build is what it should be
    assert run("software.torch-cpu-build", NodeFacts(gpu=gpu.probe(Path("/tmp"), {}))) == []


def _software(*libs: NcclLibrary) -> NodeFacts:
    return NodeFacts(
        software=SoftwareFacts(
            torch_version="2.4.1+cu121", torch_nccl="2.20.5", nccl_libraries=list(libs)
        )
    )


TORCH_LIB = NcclLibrary(
    "/usr/lib/python3/dist-packages/nvidia/nccl/lib/libnccl.so.2", "nvidia wheel", "2.20.5"
)


def test_library_overrides_torch_fires_for_preload():
    facts = _software(NcclLibrary("/opt/nccl/lib/libnccl.so.2", "LD_PRELOAD", "2.18.3"), TORCH_LIB)
    (finding,) = run("nccl.library-overrides-torch", facts)
    assert finding.severity is Severity.WARN and finding.category == "version_mismatch"
    assert finding.title == "LD_PRELOAD puts NCCL 2.18.3 in place of torch's NCCL 2.20.5"
    assert finding.fix.endswith("unset LD_PRELOAD")


def test_library_overrides_torch_library_path_is_info():
    facts = _software(NcclLibrary("/usr/local/nccl/lib/libnccl.so.2", "LD_LIBRARY_PATH", "2.23.4"))
    (finding,) = run("nccl.library-overrides-torch", facts)
    assert finding.severity is Severity.INFO
    assert "grep -vx '/usr/local/nccl/lib'" in finding.fix


def test_library_overrides_torch_quiet():
    same = NcclLibrary("/opt/nccl/lib/libnccl.so.2", "LD_PRELOAD", "2.20.5")
    system = NcclLibrary("/usr/lib/x86_64-linux-gnu/libnccl.so.2", "system", "2.18.3")
    assert run("nccl.library-overrides-torch", _software(same, system, TORCH_LIB)) == []
