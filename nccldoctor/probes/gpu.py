"""Probe: the GPUs as NVML sees them, CUDA_VISIBLE_DEVICES, and torch's view of CUDA.

NVML is the driver's own management library (``libnvidia-ml.so.1``), reached through
nvidia-ml-py (``import pynvml``). It comes in as a parameter so that a node without a driver,
and tests, can hand another NVML-shaped object in; a missing library or driver is recorded as
``nvml_error``, never raised. Under a fixture root only files are read (no NVML of this machine).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from nccldoctor.facts import GpuFacts
from nccldoctor.facts.gpu import GpuDevice
from nccldoctor.probes.python_env import is_live
from nccldoctor.probes.sysfs import list_dir, read_text
from nccldoctor.probes.torch_files import read_torch

# nvml.h: nvmlComputeMode_t
_COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}


def probe(root: Path, env: Mapping[str, str], nvml: Any = None) -> GpuFacts:
    facts = GpuFacts(cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"))
    facts.cuda_device_order = env.get("CUDA_DEVICE_ORDER")
    version = read_text(root, "/proc/driver/nvidia/version")
    facts.kernel_driver = version.splitlines()[0].strip() if version else None
    facts.device_files = [f"/dev/{n}" for n in list_dir(root, "/dev") if n.startswith("nvidia")]
    if nvml is None and not is_live(root):
        facts.nvml_error = f"not read: {root} is a captured tree, not this machine"
        facts.nvml_read = False
    else:
        try:
            nvml = nvml if nvml is not None else _default_nvml()
        except OSError as exc:
            facts.nvml_error = f"NVML Shared Library Not Found ({exc})"
        except ImportError as exc:
            facts.nvml_error = f"nvidia-ml-py is not installed ({exc})"
        else:
            _read_nvml(facts, nvml)
    if facts.nvml_available:
        facts.visible_nvml_indices, facts.visible_unresolved = map_visible_devices(
            facts.cuda_visible_devices, facts.devices
        )
    facts.torch = read_torch(root)
    return facts


def _default_nvml() -> Any:
    """pynvml, once the library it loads is known to open (importing pynvml alone costs ~0.1 s;
    pynvml's _LoadNvmlLibrary opens libnvidia-ml.so.1 the same way). Raises OSError/ImportError."""
    ctypes.CDLL("libnvidia-ml.so.1")
    import pynvml

    return pynvml


def _read_nvml(facts: GpuFacts, nvml: Any) -> None:
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, _LibRmVersionMismatch
        facts.nvml_error = _nvml_message(exc)
        return
    try:
        facts.nvml_available = True
        facts.driver_version = _text(nvml.nvmlSystemGetDriverVersion())
        cuda = nvml.nvmlSystemGetCudaDriverVersion()  # 12040 -> "12.4"
        facts.cuda_driver_version = f"{cuda // 1000}.{cuda % 1000 // 10}"
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                facts.devices.append(_read_device(nvml, index))
            except Exception as exc:  # NVML_ERROR_GPU_IS_LOST and the like: keep the others
                facts.devices.append(GpuDevice(index, read_errors=[_nvml_message(exc)]))
    except Exception as exc:
        facts.nvml_error = _nvml_message(exc)
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception as exc:
            facts.nvml_error = facts.nvml_error or _nvml_message(exc)


def _read_device(nvml: Any, index: int) -> GpuDevice:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    device = GpuDevice(index=index, name=_text(nvml.nvmlDeviceGetName(handle)))
    device.uuid = _text(nvml.nvmlDeviceGetUUID(handle))

    def optional(what: str, read: Callable[[], Any]) -> Any:
        """Many queries are 'Not Supported' on some boards (ECC on GeForce, MIG before A100)."""
        try:
            return read()
        except Exception as exc:
            device.read_errors.append(f"{what}: {_nvml_message(exc)}")
            return None

    device.pci_bus_id = optional("pci", lambda: _text(nvml.nvmlDeviceGetPciInfo(handle).busId))
    total = optional("memory", lambda: nvml.nvmlDeviceGetMemoryInfo(handle).total)
    device.memory_total_mib = total // 2**20 if total is not None else None
    mode = optional("compute mode", lambda: nvml.nvmlDeviceGetComputeMode(handle))
    device.compute_mode = _COMPUTE_MODES.get(mode, str(mode)) if mode is not None else None
    mig = optional("mig", lambda: nvml.nvmlDeviceGetMigMode(handle))
    device.mig_enabled = bool(mig[0]) if mig is not None else None
    if device.mig_enabled:
        device.mig_uuids = optional("mig devices", lambda: _mig_uuids(nvml, handle)) or []
    device.ecc_uncorrected_volatile = optional(
        "ecc",
        lambda: nvml.nvmlDeviceGetTotalEccErrors(
            handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
        ),
    )
    device.nvlink_links_up = _nvlink_up(nvml, handle)
    return device


def _mig_uuids(nvml: Any, handle: Any) -> list[str]:
    uuids = []
    for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
        except Exception:  # NVML_ERROR_NOT_FOUND for unused slots
            continue
        uuids.append(_text(nvml.nvmlDeviceGetUUID(mig)))
    return uuids


def _nvlink_up(nvml: Any, handle: Any) -> int | None:
    """Links in state NVML_FEATURE_ENABLED; None when the board has no NVLink at all."""
    up, supported = 0, False
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except Exception:  # NotSupported / InvalidArgument past the board's last link
            continue
        supported = True
        up += state == nvml.NVML_FEATURE_ENABLED
    return up if supported else None


def map_visible_devices(value: str | None, devices: list[GpuDevice]) -> tuple[list[int], list[str]]:
    """CUDA_VISIBLE_DEVICES as CUDA reads it: CUDA index i -> NVML index, and what named nothing.

    Entries are indices, ``GPU-``/``MIG-`` UUIDs or unique UUID prefixes; CUDA stops at the first
    entry that names no device and ignores the rest, so the rest are reported unresolved too.
    Integer indices follow NVML's PCI order, which CUDA uses with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``
    (its default, fastest first, agrees when the GPUs are all the same model).
    """
    if value is None:
        return [d.index for d in devices], []
    entries = [e.strip() for e in value.split(",")] if value.strip() else []
    mapped: list[int] = []
    for position, entry in enumerate(entries):
        index = _resolve(entry, devices)
        if index is None:
            return mapped, entries[position:]
        mapped.append(index)
    return mapped, []


def _resolve(entry: str, devices: list[GpuDevice]) -> int | None:
    if entry.isdigit():
        index = int(entry)
        return index if any(d.index == index for d in devices) else None
    prefix = entry if entry.startswith(("GPU-", "MIG-")) else f"GPU-{entry}"
    if len(prefix) <= 4:
        return None
    owners = {d.index for d in devices for u in (d.uuid, *d.mig_uuids) if u.startswith(prefix)}
    return owners.pop() if len(owners) == 1 else None


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _nvml_message(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
