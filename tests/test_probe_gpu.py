"""The GPU probe: NVML through an NVML-shaped object, CUDA_VISIBLE_DEVICES, torch from its files.

There is no GPU on the test machine, so only the NVML hardware read is fed by ``FakeNvml``
(fake_nvml.py). Everything else (no driver, torch's files, CUDA_VISIBLE_DEVICES) runs for real.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import pynvml
import pytest
from fake_nvml import FakeNvml

from nccldoctor.facts.gpu import GpuDevice
from nccldoctor.probes import gpu
from nccldoctor.probes.python_env import dist_version

FIXTURES = Path(__file__).parent / "fixtures" / "hosts"


def test_reads_every_gpu_through_nvml():
    nvml = FakeNvml()
    facts = gpu.probe(Path("/"), {}, nvml=nvml)
    assert facts.nvml_available and facts.nvml_error is None
    assert (facts.driver_version, facts.cuda_driver_version) == ("550.54.15", "12.4")
    first = facts.devices[0]
    assert first == GpuDevice(
        index=0,
        name="NVIDIA H100 80GB HBM3",
        uuid="GPU-5b2e7c1a-3f0d-4e8a-9c61-0d2b7f4a8e15",
        pci_bus_id="00000000:18:00.0",
        memory_total_mib=81559,
        compute_mode="Default",
        mig_enabled=False,
        ecc_uncorrected_volatile=0,
        nvlink_links_up=18,
    )
    assert facts.visible_nvml_indices == [0, 1]
    assert nvml.shutdown_called


def test_unsupported_queries_are_recorded_not_raised():
    nvml = FakeNvml(gpu1={"name": "NVIDIA GeForce RTX 4090", "ecc": None, "mig": None, "links": 0})
    device = gpu.probe(Path("/"), {}, nvml=nvml).devices[1]
    assert device.ecc_uncorrected_volatile is None and device.mig_enabled is None
    assert device.nvlink_links_up is None
    assert device.read_errors == [
        "mig: NVMLError_NotSupported: Not Supported",
        "ecc: NVMLError_NotSupported: Not Supported",
    ]


def test_mig_instances_and_modes():
    nvml = FakeNvml(gpu0={"mig": [1, 1], "mode": 3, "ecc": 2})
    device = gpu.probe(Path("/"), {}, nvml=nvml).devices[0]
    assert device.mig_enabled and device.compute_mode == "Exclusive_Process"
    assert device.ecc_uncorrected_volatile == 2
    assert [u[:9] for u in device.mig_uuids] == ["MIG-0c5e0", "MIG-0c5e1"]


def test_driver_not_loaded_is_data():
    facts = gpu.probe(Path("/"), {}, nvml=FakeNvml(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    assert not facts.nvml_available and facts.devices == []
    assert facts.nvml_error == "NVMLError_DriverNotLoaded: Driver Not Loaded"


def test_this_machine_has_no_driver():
    """The real pynvml on the real (GPU-less) machine: an error recorded, nothing raised."""
    facts = gpu.probe(Path("/"), {"CUDA_VISIBLE_DEVICES": "0"})
    if facts.nvml_available:
        pytest.skip("this machine has an NVIDIA driver")
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        expected = "NVMLError_"  # the library is there, the driver is not
    except OSError:
        expected = "NVML Shared Library Not Found (libnvidia-ml.so.1: cannot open shared object"
    assert facts.nvml_error.startswith(expected)
    assert facts.cuda_visible_devices == "0" and facts.visible_nvml_indices is None


def test_fixture_root_reads_files_not_this_machines_nvml():
    facts = gpu.probe(FIXTURES / "cpu-host", {})
    assert not facts.nvml_available
    assert "captured tree" in facts.nvml_error
    assert facts.kernel_driver is None and facts.device_files == []
    assert not facts.torch.installed


DEVICES = [
    GpuDevice(0, uuid="GPU-5b2e7c1a-3f0d", mig_uuids=["MIG-aaaa-1"]),
    GpuDevice(1, uuid="GPU-9a41d3e0-77c2"),
    GpuDevice(2, uuid="GPU-9a7700ff-0000"),
]


@pytest.mark.parametrize(
    ("value", "mapped", "unresolved"),
    [
        (None, [0, 1, 2], []),
        ("", [], []),
        ("1,0", [1, 0], []),
        (" 2 , 0 ", [2, 0], []),
        ("0,5,1", [0], ["5", "1"]),
        ("-1", [], ["-1"]),
        ("NoDevFiles", [], ["NoDevFiles"]),
        ("GPU-9a41", [1], []),
        ("9a41d3e0", [1], []),
        ("GPU-9a", [], ["GPU-9a"]),  # ambiguous prefix
        ("MIG-aaaa-1", [0], []),
        ("GPU-", [], ["GPU-"]),
    ],
)
def test_map_visible_devices(value, mapped, unresolved):
    assert gpu.map_visible_devices(value, DEVICES) == (mapped, unresolved)


def _fake_torch(root: Path, version_py: str, requires: list[str]) -> None:
    site = root / "usr/local/lib/python3.10/dist-packages"
    (site / "torch").mkdir(parents=True)
    (site / "torch/__init__.py").write_text("")
    (site / "torch/version.py").write_text(version_py)
    meta = site / "torch-2.4.1.dist-info"
    meta.mkdir()
    lines = ["Metadata-Version: 2.1", "Name: torch", "Version: 2.4.1"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    (meta / "METADATA").write_text("\n".join(lines) + "\n")
    nccl = site / "nvidia_nccl_cu12-2.20.5.dist-info"
    nccl.mkdir()
    (nccl / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: nvidia-nccl-cu12\nVersion: 2.20.5\n"
    )


def test_torch_cuda_build_and_its_nccl_wheel_from_files(tmp_path):
    _fake_torch(
        tmp_path,
        "from typing import Optional\n__version__ = '2.4.1+cu121'\ndebug = False\n"
        "cuda: Optional[str] = '12.1'\ngit_version = 'ee1b6804381c57161c477caa380a840a84167676'\n",
        [
            "filelock",
            'nvidia-nccl-cu12==2.20.5; platform_system == "Linux" and platform_machine == "x86_64"',
        ],
    )
    view = gpu.probe(tmp_path, {}).torch
    assert (view.installed, view.version, view.cuda_build) == (True, "2.4.1+cu121", "12.1")
    assert (view.nccl_version, view.nccl_source) == ("2.20.5", "nvidia-nccl-cu12 2.20.5")


def test_torch_cpu_build_has_no_nccl(tmp_path):
    _fake_torch(tmp_path, "__version__ = '2.4.1+cpu'\ncuda = None\n", [])
    view = gpu.probe(tmp_path, {}).torch
    assert view.installed and view.cuda_build is None and view.nccl_version is None


def test_garbled_torch_version_file(tmp_path):
    _fake_torch(tmp_path, "__version__ = (\n\x00garbage", [])
    view = gpu.probe(tmp_path, {}).torch
    assert view.installed and view.version is None


def test_installed_torch_read_without_importing_it():
    view = gpu.probe(Path("/"), {}, nvml=FakeNvml()).torch
    assert view.installed
    assert view.version == dist_version(Path("/"), "torch")
