"""What the software probe reads: Python, torch, CUDA runtime, NCCL library, OS."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class NcclLibrary:
    path: str  # as the node sees it (absolute, without a fixture root)
    origin: str  # LD_PRELOAD | LD_LIBRARY_PATH | torch | nvidia wheel | system
    version: str | None = None  # "2.21.5", from ncclGetVersion (or the file name under a fixture)
    error: str | None = None


@dataclass
class SoftwareFacts:
    python: str = ""
    platform: str = ""
    os_release: str | None = None  # PRETTY_NAME
    kernel: str | None = None
    torch_version: str | None = None
    torch_cuda: str | None = None
    torch_nccl: str | None = None
    cuda_runtime: str | None = None  # "12.4", from cudaRuntimeGetVersion (or the file name)
    cuda_runtime_path: str | None = None
    nccl_libraries: list[NcclLibrary] = field(default_factory=list)
    packages: dict[str, str] = field(default_factory=dict)  # psutil, pynvml ... versions
