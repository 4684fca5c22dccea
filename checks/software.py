"""Software checks: a torch that can use the GPUs, and which libnccl a process really loads.

References are to docs/failures.md (F11 "which libnccl is loaded?", F26).
"""

from __future__ import annotations

from checks import Problem, check
from nccldoctor.facts import NodeFacts
from nccldoctor.model import Severity


@check("software.torch-cpu-build", area="software", category="version_mismatch")
def torch_cpu_build(facts: NodeFacts) -> Problem | None:
    """torch is a CPU-only build on a node with NVIDIA GPUs."""
    torch, gpu = facts.gpu.torch, facts.gpu
    if not torch.installed or torch.cuda_build or not (gpu.nvml_available and gpu.devices):
        return None
    version = (torch.version or "").split("+")[0]
    return Problem(
        Severity.FAIL,
        f"torch {torch.version} is a CPU-only build; this node has {len(gpu.devices)} GPU(s)",
        [
            f"torch/version.py: __version__ = {torch.version!r}, cuda = None",
            f"NVML: {len(gpu.devices)} × {gpu.devices[0].name}, driver {gpu.driver_version}",
        ],
        "init_process_group('nccl') fails with 'Distributed package doesn't have NCCL built in'.\n"
        "Install a CUDA build (PyPI's default on Linux x86_64 is one):\n"
        f"  pip install --force-reinstall torch=={version}",
    )


@check("nccl.library-overrides-torch", area="nccl", category="version_mismatch")
def library_overrides_torch(facts: NodeFacts) -> list[Problem]:
    """LD_PRELOAD or LD_LIBRARY_PATH brings a libnccl whose version differs from torch's."""
    sw = facts.software
    if not sw.torch_nccl:
        return []
    problems = []
    for lib in sw.nccl_libraries:
        if lib.origin not in ("LD_PRELOAD", "LD_LIBRARY_PATH") or not lib.version:
            continue
        if lib.version == sw.torch_nccl:
            continue
        preload = lib.origin == "LD_PRELOAD"
        problems.append(
            Problem(
                Severity.WARN if preload else Severity.INFO,
                f"{lib.origin} {'puts' if preload else 'may put'} NCCL {lib.version} "
                f"in place of torch's NCCL {sw.torch_nccl}",
                [
                    f"{lib.path}: ncclGetVersion {lib.version} (found through {lib.origin})",
                    f"torch {sw.torch_version} uses NCCL {sw.torch_nccl}",
                ],
                (
                    "A preloaded libnccl.so.2 replaces torch's in every process"
                    if preload
                    else "LD_LIBRARY_PATH is searched before a library's RUNPATH, so it can win"
                )
                + "; nodes then run different NCCL versions ('Message truncated', hangs).\n"
                "Unless this NCCL is deliberate and the same on every node, drop it:\n"
                + (
                    "  unset LD_PRELOAD"
                    if preload
                    else f"  export LD_LIBRARY_PATH=$(echo \"$LD_LIBRARY_PATH\" | tr ':' '\\n' "
                    f"| grep -vx '{lib.path.rsplit('/', 1)[0]}' | paste -sd:)"
                ),
            )
        )
    return problems
