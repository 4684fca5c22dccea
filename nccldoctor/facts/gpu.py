"""What the GPU probe reads: NVML's view of the devices and torch's view of CUDA."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GpuDevice:
    index: int  # NVML index
    name: str = ""
    uuid: str = ""
    pci_bus_id: str = ""  # 00000000:18:00.0
    memory_total_mib: int | None = None
    compute_mode: str | None = None  # Default | Exclusive_Thread | Prohibited | Exclusive_Process
    mig_enabled: bool | None = None
    ecc_uncorrected_volatile: int | None = None
    nvlink_links_up: int | None = None
    mig_uuids: list[str] = field(default_factory=list)  # MIG-... of its MIG instances
    read_errors: list[str] = field(default_factory=list)  # "ecc: Not Supported" (NVML said no)


@dataclass
class TorchCuda:
    """torch's view, read from its files (no import) where possible."""

    installed: bool = False
    version: str | None = None
    cuda_build: str | None = None  # CUDA toolkit torch was built with; None for CPU builds
    nccl_version: str | None = None  # the NCCL bundled with torch
    nccl_source: str | None = None  # the file or wheel that NCCL version was read from
    available: bool | None = None  # torch.cuda.is_available(), only when it was asked
    device_count: int | None = None


@dataclass
class GpuFacts:
    nvml_available: bool = False
    nvml_error: str | None = None  # why NVML could not be used (no library, no driver ...)
    # False under a captured tree: NVML answers for this machine only, and a tree holds none
    nvml_read: bool = True
    kernel_driver: str | None = None  # first line of /proc/driver/nvidia/version
    device_files: list[str] = field(default_factory=list)  # /dev/nvidia* entries
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # e.g. "12.4"
    devices: list[GpuDevice] = field(default_factory=list)
    cuda_visible_devices: str | None = None  # raw value, None when unset
    visible_nvml_indices: list[int] | None = None  # CUDA index i -> NVML index
    visible_unresolved: list[str] = field(default_factory=list)  # entries naming no device
    cuda_device_order: str | None = None  # CUDA_DEVICE_ORDER (FASTEST_FIRST when unset)
    torch: TorchCuda = field(default_factory=TorchCuda)
