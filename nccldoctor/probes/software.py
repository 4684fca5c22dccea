"""Probe: Python, torch, CUDA runtime, the NCCL libraries with their versions, OS and kernel.

Nothing here imports torch: its version and build come from its files (``torch_files``). On the
live machine each libnccl and libcudart is asked its version through ctypes (no GPU needed);
under a fixture root the version comes from the file name (``libnccl.so.2.21.5``).
"""

from __future__ import annotations

import ctypes
import platform
import re
from collections.abc import Mapping
from pathlib import Path

from nccldoctor.facts import SoftwareFacts
from nccldoctor.facts.software import NcclLibrary
from nccldoctor.probes.libnccl import Candidate, find_libnccl, find_libraries, nccl_version
from nccldoctor.probes.python_env import dist_version, is_live
from nccldoctor.probes.sysfs import read_line, read_text
from nccldoctor.probes.torch_files import read_torch

# Distributions whose versions matter to NCCL and DDP runs (reported when installed).
PACKAGES = (
    "torch",
    "nvidia-nccl-cu12",
    "nvidia-nccl-cu13",
    "nvidia-cuda-runtime-cu12",
    "nvidia-ml-py",
    "psutil",
    "numpy",
    "nccldoctor",
)


def probe(root: Path, env: Mapping[str, str]) -> SoftwareFacts:
    facts = SoftwareFacts(python=platform.python_version(), platform=platform.platform())
    facts.kernel = read_line(root, "/proc/sys/kernel/osrelease")
    for line in (read_text(root, "/etc/os-release") or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            facts.os_release = line.split("=", 1)[1].strip().strip('"')
    torch = read_torch(root)
    facts.torch_version, facts.torch_cuda, facts.torch_nccl = (
        torch.version,
        torch.cuda_build,
        torch.nccl_version,
    )
    facts.nccl_libraries = [_nccl_library(root, c) for c in find_libnccl(root, env)]
    cudart = find_libraries(root, env, "libcudart", "libcudart.so")
    if cudart:
        facts.cuda_runtime_path = _shown(root, cudart[0].path)
        facts.cuda_runtime = _cudart_version(root, cudart[0].path)
    for name in PACKAGES:
        version = dist_version(root, name)
        if version:
            facts.packages[name] = version
    return facts


def _nccl_library(root: Path, candidate: Candidate) -> NcclLibrary:
    library = NcclLibrary(path=_shown(root, candidate.path), origin=candidate.origin)
    if is_live(root):
        try:
            library.version = nccl_version(candidate.path)
        except (OSError, AttributeError) as exc:  # not loadable, or no ncclGetVersion symbol
            library.error = f"{type(exc).__name__}: {exc}"
    else:
        library.version = _version_in_name(candidate.path, r"libnccl\.so\.(\d+\.\d+\.\d+)$")
    return library


def _cudart_version(root: Path, path: Path) -> str | None:
    if not is_live(root):
        return _version_in_name(path, r"libcudart\.so\.(\d+\.\d+)")
    try:
        code = ctypes.c_int(0)
        if ctypes.CDLL(str(path)).cudaRuntimeGetVersion(ctypes.byref(code)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return f"{code.value // 1000}.{code.value % 1000 // 10}"  # 12040 -> 12.4 (CUDART_VERSION)


def _version_in_name(path: Path, pattern: str) -> str | None:
    try:
        name = path.resolve().name
    except OSError:
        name = path.name
    match = re.search(pattern, name)
    return match.group(1) if match else None


def _shown(root: Path, path: Path) -> str:
    """``path`` as the node itself would write it (the fixture root cut off)."""
    try:
        return "/" + path.relative_to(root).as_posix() if not is_live(root) else str(path)
    except ValueError:
        return str(path)
