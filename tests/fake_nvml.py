"""pynvml's API surface as a two-GPU H100 node answers it, for the GPU probe's hardware read.

The test machine has no GPU. This object answers the calls the probe makes with the values an
HGX H100 node reports (nvidia-smi -q), and raises pynvml's own error classes where a real board
says "Not Supported". It stands in for the hardware only; the probe code runs unchanged.
"""

from __future__ import annotations

import pynvml


class _Handle:
    def __init__(self, **info):
        self.__dict__.update(info)


class _Struct:
    def __init__(self, **fields):
        self.__dict__.update(fields)


class FakeNvml:
    """pynvml's calls as a two-GPU node answers them (nvidia-smi -q of an HGX H100 node)."""

    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = pynvml.NVML_VOLATILE_ECC
    NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS
    NVML_FEATURE_ENABLED = pynvml.NVML_FEATURE_ENABLED

    def __init__(self, init_error: int | None = None, **overrides):
        self.init_error = init_error
        self.shutdown_called = False
        self.gpus = [
            _Handle(
                name="NVIDIA H100 80GB HBM3",
                uuid="GPU-5b2e7c1a-3f0d-4e8a-9c61-0d2b7f4a8e15",
                bus="00000000:18:00.0",
                total=85520809984,
                mode=0,
                mig=[0, 0],
                ecc=0,
                links=18,
            ),
            _Handle(
                name="NVIDIA H100 80GB HBM3",
                uuid="GPU-9a41d3e0-77c2-4b5f-8e1d-6c0f2a9b3d47",
                bus="00000000:2A:00.0",
                total=85520809984,
                mode=0,
                mig=[0, 0],
                ecc=0,
                links=18,
            ),
        ]
        for index, fields in overrides.items():
            self.gpus[int(index.removeprefix("gpu"))].__dict__.update(fields)

    def nvmlInit(self):
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)

    def nvmlShutdown(self):
        self.shutdown_called = True

    def nvmlSystemGetDriverVersion(self):
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12040

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return self.gpus[index]

    def nvmlDeviceGetName(self, h):
        return h.name

    def nvmlDeviceGetUUID(self, h):
        return h.uuid

    def nvmlDeviceGetPciInfo(self, h):
        return _Struct(busId=h.bus.encode())  # older pynvml returns bytes

    def nvmlDeviceGetMemoryInfo(self, h):
        return _Struct(total=h.total, free=h.total, used=0)

    def nvmlDeviceGetComputeMode(self, h):
        return h.mode

    def nvmlDeviceGetMigMode(self, h):
        if h.mig is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return h.mig

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, i):
        if i >= 2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return _Handle(uuid=f"MIG-0c5e{i}a8b-1d2f-5e3a-8b7c-{h.uuid[-12:]}")

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter_type):
        assert (error_type, counter_type) == (1, 0)
        if h.ecc is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return h.ecc

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= h.links:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_ENABLED
