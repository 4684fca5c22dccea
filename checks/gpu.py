"""GPU and driver checks: is there a GPU NCCL can use, and does the job get to see it?

References are to docs/failures.md (F26 GPU not usable, F10 device mapping).
"""

from __future__ import annotations

from checks import Problem, check
from nccldoctor.facts import NodeFacts
from nccldoctor.facts.gpu import GpuFacts
from nccldoctor.model import Severity

# Values launchers write to mean "no GPU for you" (Slurm without a GPU gres writes NoDevFiles).
_HIDING_VALUES = ("", "-1", "none", "NoDevFiles", "void")


def visible_gpu_count(gpu: GpuFacts) -> int:
    """How many GPUs a CUDA process on this node gets (NVML's count narrowed by the env)."""
    if gpu.visible_nvml_indices is not None:
        return len(gpu.visible_nvml_indices)
    return len(gpu.devices)


def _problem(
    facts: NodeFacts, severity: Severity, title: str, evidence: list[str], fix: str
) -> Problem:
    """A GPU problem as the node's run meets it: a run on gloo needs no GPU, so there a failure
    is a warning (the report still shows what NCCL would lack), and information where the user
    asked for gloo (``--backend gloo``): a CPU-only run can be healthy."""
    if facts.backend == "gloo" and severity is Severity.FAIL:
        severity = Severity.INFO if facts.backend_asked else Severity.WARN
        title = f"{title} (this check ran on gloo)"
    return Problem(severity, title, evidence, fix)


@check("gpu.no-gpu", area="gpu", category="gpu_visibility")
def no_gpu(facts: NodeFacts) -> Problem | None:
    """No NVIDIA driver or no GPU: NCCL cannot run on this node (gloo still can)."""
    gpu = facts.gpu
    if gpu.nvml_available and gpu.devices:
        return None
    evidence = [f"NVML: {gpu.nvml_error}" if gpu.nvml_error else "NVML: 0 GPUs"]
    evidence.append(f"/proc/driver/nvidia/version: {gpu.kernel_driver or 'missing'}")
    evidence.append(f"/dev/nvidia*: {', '.join(gpu.device_files) or 'none'}")
    evidence.append(f"torch: {gpu.torch.version or 'not installed'}")
    driver_traces = gpu.nvml_available or gpu.kernel_driver or gpu.device_files
    if driver_traces and not gpu.nvml_read:
        return None  # a captured tree with the driver in it: which GPUs work was NVML's to say
    if driver_traces:
        fix = (
            "The driver is there but this environment cannot use it. In a container, run it with\n"
            "the NVIDIA runtime:\n"
            "  docker run --gpus all ...            # Kubernetes: resources.limits nvidia.com/gpu\n"
            "After a driver update ('Driver/library version mismatch'): sudo reboot"
        )
    else:
        fix = (
            "Install the NVIDIA driver on the host and check it with:\n"
            "  nvidia-smi\n"
            "On a CPU-only node use the gloo backend: torch.distributed.init_process_group('gloo')"
        )
    # A node with driver traces or a CUDA build of torch was meant to run GPUs: broken. A node
    # with neither is a CPU node, where DDP runs on gloo: worth saying, not a warning.
    meant_for_gpus = driver_traces or gpu.torch.cuda_build
    return _problem(
        facts,
        Severity.FAIL if meant_for_gpus else Severity.INFO,
        "No usable NVIDIA GPU or driver: NCCL cannot run here",
        evidence,
        fix,
    )


@check("gpu.visible-devices-hide-all", area="gpu", category="gpu_visibility")
def visible_devices_hide_all(facts: NodeFacts) -> Problem | None:
    """CUDA_VISIBLE_DEVICES leaves the job no GPU."""
    gpu = facts.gpu
    value = gpu.cuda_visible_devices
    if value is None:
        return None
    if gpu.nvml_available:
        if not gpu.devices or gpu.visible_nvml_indices:
            return None
    elif not (gpu.kernel_driver or gpu.device_files):
        return None  # a CPU node: hiding GPUs there is how people ask for CPU
    elif value.split(",")[0].strip() not in _HIDING_VALUES:
        return None
    seen = f"NVML sees {len(gpu.devices)} GPU(s)" if gpu.nvml_available else "NVML not usable"
    return _problem(
        facts,
        Severity.FAIL,
        f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU from CUDA",
        [f"CUDA_VISIBLE_DEVICES={value!r}", seen],
        "Unset it, or list the GPUs this job should use:\n"
        "  unset CUDA_VISIBLE_DEVICES\n"
        "  export CUDA_VISIBLE_DEVICES=0,1   # indices from nvidia-smi -L",
    )


@check("gpu.visible-devices-missing", area="gpu", category="gpu_visibility")
def visible_devices_missing(facts: NodeFacts) -> Problem | None:
    """CUDA_VISIBLE_DEVICES names GPUs this node does not have."""
    gpu = facts.gpu
    if not gpu.visible_unresolved or not gpu.visible_nvml_indices:
        return None
    kept = ",".join(str(i) for i in gpu.visible_nvml_indices)
    existing = ", ".join(f"{d.index} ({d.uuid})" for d in gpu.devices)
    return _problem(
        facts,
        Severity.FAIL,
        f"CUDA_VISIBLE_DEVICES names {', '.join(gpu.visible_unresolved)}, which this node does not have",
        [
            f"CUDA_VISIBLE_DEVICES={gpu.cuda_visible_devices!r}",
            f"GPUs on this node: {existing}",
            f"CUDA stops at the first unknown entry: the job gets NVML GPU(s) {kept} only",
        ],
        "Name only GPUs that exist here (nvidia-smi -L lists indices and UUIDs):\n"
        f"  export CUDA_VISIBLE_DEVICES={kept}",
    )


@check("gpu.compute-mode-exclusive", area="gpu", category="cuda_error")
def compute_mode_exclusive(facts: NodeFacts) -> list[Problem]:
    """A GPU in Exclusive_Process/Exclusive_Thread/Prohibited compute mode."""
    problems = []
    for device in facts.gpu.devices:
        if device.compute_mode in (None, "Default"):
            continue
        prohibited = device.compute_mode == "Prohibited"
        problems.append(
            _problem(
                facts,
                Severity.FAIL if prohibited else Severity.WARN,
                f"GPU {device.index} is in {device.compute_mode} compute mode",
                [
                    f"GPU {device.index} {device.name} {device.pci_bus_id}: compute mode {device.compute_mode}"
                ],
                "A second CUDA context on that GPU (a DataLoader worker, a leftover process, a rank\n"
                "mapped to the wrong device) fails with 'all CUDA-capable devices are busy or\n"
                "unavailable'. Return it to the default mode (root):\n"
                f"  sudo nvidia-smi -i {device.index} -c DEFAULT",
            )
        )
    return problems


@check("gpu.mig-enabled", area="gpu", category="gpu_visibility")
def mig_enabled(facts: NodeFacts) -> Problem | None:
    """MIG mode is on: a process sees one MIG instance and NCCL gets no NVLink/P2P between them."""
    migs = [d for d in facts.gpu.devices if d.mig_enabled]
    if not migs:
        return None
    return _problem(
        facts,
        Severity.WARN,
        f"MIG is enabled on {len(migs)} GPU(s): one instance per process, no P2P between instances",
        [
            f"GPU {d.index} {d.name}: MIG on, instances {', '.join(d.mig_uuids) or 'none'}"
            for d in migs
        ],
        "For NCCL across whole GPUs, turn MIG off (root; needs the GPU idle and a reset):\n"
        + "\n".join(f"  sudo nvidia-smi -i {d.index} -mig 0" for d in migs)
        + "\nor give each rank one instance: CUDA_VISIBLE_DEVICES=MIG-<uuid> (nvidia-smi -L)",
    )


@check("gpu.ecc-uncorrected", area="gpu", category="cuda_error")
def ecc_uncorrected(facts: NodeFacts) -> Problem | None:
    """A GPU counted uncorrectable ECC errors since the driver loaded."""
    bad = [d for d in facts.gpu.devices if (d.ecc_uncorrected_volatile or 0) > 0]
    if not bad:
        return None
    return _problem(
        facts,
        Severity.FAIL,
        f"Uncorrectable ECC errors on GPU {', '.join(str(d.index) for d in bad)}",
        [
            f"GPU {d.index} {d.name} {d.pci_bus_id}: {d.ecc_uncorrected_volatile} uncorrected (volatile)"
            for d in bad
        ],
        "Kernels on this GPU may crash (Xid 48/94) and take the whole job down. Drain the node,\n"
        "inspect and reset:\n"
        "  nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER\n"
        + "\n".join(f"  sudo nvidia-smi -r -i {d.index}" for d in bad)
        + "\nIf the count returns after a reset, the GPU needs service.",
    )


@check("gpu.driver-older-than-torch-cuda", area="gpu", category="cuda_error")
def driver_older_than_torch_cuda(facts: NodeFacts) -> Problem | None:
    """torch was built for a newer CUDA major version than the driver supports."""
    gpu = facts.gpu
    build, driver = gpu.torch.cuda_build, gpu.cuda_driver_version
    if not build or not driver:
        return None
    try:
        if int(build.split(".")[0]) <= int(driver.split(".")[0]):
            return None
    except ValueError:
        return None
    return _problem(
        facts,
        Severity.FAIL,
        f"torch is built for CUDA {build}, the driver supports CUDA {driver} at most",
        [
            f"torch {gpu.torch.version} CUDA build {build}",
            f"driver {gpu.driver_version}: CUDA {driver}",
        ],
        "CUDA fails with 'CUDA driver version is insufficient for CUDA runtime version'.\n"
        "Install a torch build for the driver's CUDA, e.g.:\n"
        f"  pip install torch=={(gpu.torch.version or '').split('+')[0]} "
        f"--index-url https://download.pytorch.org/whl/cu{driver.replace('.', '')}\n"
        f"(any cuXYZ wheel index not newer than CUDA {driver}), or upgrade the NVIDIA driver.",
    )


@check("gpu.unresponsive", area="gpu", category="cuda_error")
def unresponsive(facts: NodeFacts) -> Problem | None:
    """NVML lists a GPU but cannot read it (fallen off the bus, lost, in reset)."""
    lost = [d for d in facts.gpu.devices if not d.name and d.read_errors]
    if not lost:
        return None
    return _problem(
        facts,
        Severity.FAIL,
        f"GPU {', '.join(str(d.index) for d in lost)} does not answer NVML",
        [f"GPU {d.index}: {d.read_errors[0]}" for d in lost],
        "Any rank on this GPU fails or hangs in its first CUDA call. Check the kernel log for\n"
        "Xid 79 (fallen off the bus) and reset or reboot before running the job:\n"
        "  sudo dmesg | grep -i xid\n"
        + "\n".join(f"  sudo nvidia-smi -r -i {d.index}" for d in lost),
    )
