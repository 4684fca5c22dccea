"""Container and host-limit checks: networking mode, /dev/shm, IPC, memlock, RDMA devices, caps.

References are to docs/failures.md (F01 bridge network, F14 RDMA devices, F15
memlock, F21/F22 /dev/shm, F23 SYS_NICE, F24 IPC across containers, F27 file descriptors).
"""

from __future__ import annotations

from checks import RANKS_STOPPED, Problem, check
from checks.gpu import visible_gpu_count
from nccldoctor.facts import NodeFacts
from nccldoctor.model import Severity

MiB = 2**20
GiB = 2**30

# F21: NCCL's SHM transport puts each local peer pair's buffers in /dev/shm (9.6 MB for one
# segment in pytorch/ci-infra#490), so Docker's 64 MB default fails as soon as several local
# ranks talk. Under 256 MiB with more than one local GPU: fail. Under 1 GiB (NCCL's own Docker
# advice, --shm-size=1g; also DataLoader workers): warn, or info on a node without GPUs that runs
# one rank (several ranks on CPU: warn, what NCCL would need on GPUs).
SHM_FAIL_BYTES = 256 * MiB
SHM_WARN_BYTES = 1 * GiB
# One SHM segment in the field (pytorch/ci-infra#490): NCCL_BUFFSIZE's 4 MiB for SIMPLE plus the
# LL and LL128 buffers of one connection.
NCCL_SHM_SEGMENT_BYTES = 9637888

# F15: RDMA registration pins host memory against RLIMIT_MEMLOCK. Docker's default is 8 MiB
# (64 KiB on older engines): registration fails at once. NCCL asks for unlimited.
MEMLOCK_FAIL_BYTES = 64 * MiB

# F27: a rank holds sockets per peer and channel (NET/Socket, bootstrap, proxies); the usual
# 1024 soft limit runs out on multi-GPU nodes. NCCL's guide asks for far more on large jobs.
NOFILE_WARN = 4096

_DOCKER_LIKE = ("docker", "podman", "containerd", "container")


def on_bridge_network(facts: NodeFacts) -> bool:
    """A container on a bridge network, in a multi-node job."""
    c = facts.container
    return c.runtime in _DOCKER_LIKE and c.network_mode == "bridge" and facts.multi_node


@check(
    "container.bridge-network", area="container", category="docker_network",
    explains=("master.nat-bridge", "cluster.advertised-address-shared",
              "run.ephemeral-port-blocked", "network.ephemeral-ports", *RANKS_STOPPED),
    remedy="run the containers with --network host",
)  # fmt: skip
def bridge_network(facts: NodeFacts) -> Problem | None:
    """A container on a bridge network in a multi-node job: peers cannot reach its address."""
    c = facts.container
    if not on_bridge_network(facts):
        return None
    return Problem(
        Severity.FAIL,
        f"{c.runtime} container on a bridge network in a multi-node job",
        [*c.runtime_evidence, *c.network_evidence],
        "NCCL advertises the container's private address (behind NAT) and opens random ports,\n"
        "so the other node's ranks cannot connect back. Run the container on the host's\n"
        "network on every node:\n"
        "  docker run --network host ...\n"
        "  # docker compose: network_mode: host",
    )


@check("container.shm-small", area="container", category="shm_docker")
def shm_small(facts: NodeFacts) -> Problem | None:
    """/dev/shm is smaller than 1 GiB (NCCL's SHM transport and DataLoader workers live there)."""
    c = facts.container
    size = c.shm_size_bytes
    if size is None or size >= SHM_WARN_BYTES:
        return None
    gpus = visible_gpu_count(facts.gpu)
    ranks = facts.local_ranks or gpus
    if gpus == 0 and ranks < 2:
        severity = Severity.INFO  # a CPU node with one rank: only DataLoader workers would use it
    elif size < SHM_FAIL_BYTES and ranks > 1 and gpus > 0:
        severity = Severity.FAIL
    else:
        severity = Severity.WARN
    evidence = [f"/dev/shm: {size / MiB:.0f} MiB ({c.shm_source})"]
    if c.shm_free_bytes is not None:
        evidence.append(f"/dev/shm free: {c.shm_free_bytes / MiB:.0f} MiB")
    evidence.append(f"GPUs visible to CUDA: {gpus}")
    title = f"/dev/shm is only {size / MiB:.0f} MiB"
    if ranks > 1:
        title += f" for {ranks} local ranks"
        evidence += _shm_segments(size, ranks, gpus)
    return Problem(
        severity,
        title,
        evidence,
        "NCCL fails with 'failed to extend /dev/shm/nccl-... No space left on device' or 'Error\n"
        "while creating shared memory segment' when local ranks use shared memory. Give the\n"
        "container more, or the host's IPC namespace:\n"
        "  docker run --shm-size=1g ...        # or: docker run --ipc=host ...\n"
        "  # Kubernetes: an emptyDir {medium: Memory} volume mounted at /dev/shm\n"
        "  # last resort, slower: export NCCL_SHM_DISABLE=1",
    )


def _shm_segments(size: int, ranks: int, gpus: int) -> list[str]:
    """How the local ranks would fill /dev/shm under NCCL: what a run on gloo cannot show."""
    fits = size // NCCL_SHM_SEGMENT_BYTES
    lines = [
        f"{ranks} local ranks: NCCL's SHM transport gives each connection between two of them a "
        f"/dev/shm segment sized by its buffers ({NCCL_SHM_SEGMENT_BYTES} bytes in "
        f"pytorch/ci-infra#490), one per channel and direction; {size / MiB:.0f} MiB holds "
        f"{fits} of them",
    ]
    if gpus == 0:
        lines.append(
            f"no GPU here: the {ranks} local ranks run gloo, which keeps no buffers in /dev/shm, "
            "so a run on this node passes; with GPUs NCCL would need the space"
        )
    return lines


@check("container.shm-not-writable", area="container", category="shm_docker")
def shm_not_writable(facts: NodeFacts) -> Problem | None:
    """NCCL cannot create files in /dev/shm."""
    c = facts.container
    if c.shm_writable is not False:
        return None
    return Problem(
        Severity.FAIL,
        "/dev/shm is missing or not writable",
        [f"creating a file in /dev/shm failed ({c.shm_source or 'no /dev/shm mount'})"],
        "NCCL's SHM transport fails with 'shm_open failed : Permission denied':\n"
        "  sudo chmod 1777 /dev/shm\n"
        "  # read-only or absent in a container: docker run --shm-size=1g ... (or --ipc=host)",
    )


@check("container.private-ipc-multi-gpu", area="container", category="p2p_error")
def private_ipc_multi_gpu(facts: NodeFacts) -> Problem | None:
    """A private IPC namespace on a multi-GPU node: local ranks must share this container."""
    c = facts.container
    gpus = visible_gpu_count(facts.gpu)
    if c.ipc_host is not False or gpus < 2:
        return None
    return Problem(
        Severity.INFO,
        f"Private IPC namespace with {gpus} GPUs: ranks in other containers cannot use CUDA IPC/SHM",
        [f"/proc/self/ns/ipc: {c.ipc_namespace} (the host's is ipc:[4026531839])"],
        "Fine when every local rank runs in this container. If ranks of this host run in separate\n"
        "containers, NCCL falls back to the network between them; share IPC:\n"
        "  docker run --ipc=host ...",
    )


@check("container.memlock-limited", area="container", category="ib_memlock")
def memlock_limited(facts: NodeFacts) -> Problem | None:
    """RLIMIT_MEMLOCK is limited while InfiniBand/RoCE HCAs are present."""
    c = facts.container
    hcas = facts.rdma.hcas
    if not hcas or c.memlock_soft is None or c.memlock_soft == -1:
        return None
    severity = Severity.FAIL if c.memlock_soft < MEMLOCK_FAIL_BYTES else Severity.WARN
    return Problem(
        severity,
        f"Locked memory is limited to {c.memlock_soft // 1024} KiB with {len(hcas)} HCA(s) present",
        [
            f"/proc/self/limits: Max locked memory {c.memlock_soft} {c.memlock_hard} bytes",
            f"HCAs: {', '.join(h.name for h in hcas)}",
        ],
        "RDMA registration fails with 'ibv_reg_mr failed ... Cannot allocate memory':\n"
        "  docker run --ulimit memlock=-1:-1 --cap-add IPC_LOCK ...\n"
        "  # host: '* soft memlock unlimited' and '* hard memlock unlimited' in\n"
        "  # /etc/security/limits.conf, then log in again; Slurm: PropagateResourceLimits",
    )


@check("container.dev-infiniband-missing", area="container", category="ib_error")
def dev_infiniband_missing(facts: NodeFacts) -> Problem | None:
    """HCAs are visible in /sys but /dev/infiniband (uverbs) is not: NCCL cannot open them."""
    c = facts.container
    hcas = facts.rdma.hcas
    uverbs = [e for e in c.dev_infiniband if e.startswith("uverbs")]
    if not hcas or uverbs:
        return None
    return Problem(
        Severity.FAIL,
        f"{len(hcas)} HCA(s) in /sys/class/infiniband but no /dev/infiniband/uverbs*",
        [
            f"HCAs: {', '.join(h.name for h in hcas)}",
            f"/dev/infiniband: {', '.join(c.dev_infiniband) or ('empty' if c.dev_infiniband_present else 'missing')}",
        ],
        "NCCL logs 'NET/IB : No device found' and falls back to TCP sockets: slow, and a hang\n"
        "when another node uses IB. Pass the devices in:\n"
        "  docker run --device=/dev/infiniband --cap-add=IPC_LOCK --ulimit memlock=-1:-1 ...\n"
        "  # Kubernetes: the RDMA device plugin (rdma/ib resource) or SR-IOV",
    )


@check("container.cap-ipc-lock-missing", area="container", category="ib_memlock")
def cap_ipc_lock_missing(facts: NodeFacts) -> Problem | None:
    """HCAs present, memlock limited and no CAP_IPC_LOCK to pin memory beyond it."""
    c = facts.container
    if not facts.rdma.hcas or c.cap_eff is None or "CAP_IPC_LOCK" in c.capabilities:
        return None
    if c.memlock_soft == -1:
        return None
    return Problem(
        Severity.INFO,
        "No CAP_IPC_LOCK: RDMA memory pinning is bound by the memlock limit",
        [f"/proc/self/status CapEff: {c.cap_eff} (IPC_LOCK is bit 14)"],
        "  docker run --cap-add IPC_LOCK --ulimit memlock=-1:-1 ...",
    )


@check("container.cap-sys-nice-missing", area="container", category="shm_docker")
def cap_sys_nice_missing(facts: NodeFacts) -> Problem | None:
    """A multi-GPU container without CAP_SYS_NICE: NCCL's NUMA-aware host memory is denied."""
    c = facts.container
    gpus = visible_gpu_count(facts.gpu)
    if c.runtime is None or c.cap_eff is None or "CAP_SYS_NICE" in c.capabilities or gpus < 2:
        return None
    return Problem(
        Severity.INFO,
        "No CAP_SYS_NICE: NCCL 2.24+ cuMem host memory for SHM cannot set its NUMA policy",
        [f"/proc/self/status CapEff: {c.cap_eff} (SYS_NICE is bit 23)", f"{gpus} GPUs visible"],
        "NCCL 2.24 to 2.26.4 fail at SHM setup; 2.26.5+ fall back to /dev/shm:\n"
        "  docker run --cap-add SYS_NICE ...\n"
        "  # or on every rank: export NCCL_CUMEM_HOST_ENABLE=0",
    )


@check("container.nofile-low", area="container", category="other")
def nofile_low(facts: NodeFacts) -> Problem | None:
    """The open-files limit is low for a process holding NCCL's sockets."""
    c = facts.container
    if c.nofile_soft is None or c.nofile_soft == -1 or c.nofile_soft >= NOFILE_WARN:
        return None
    return Problem(
        Severity.WARN,
        f"Open files are limited to {c.nofile_soft}",
        [f"/proc/self/limits: Max open files {c.nofile_soft} {c.nofile_hard}"],
        "NCCL's sockets and proxies fail with 'Too many open files' on busy nodes:\n"
        f"  ulimit -n {c.nofile_hard if c.nofile_hard and c.nofile_hard > NOFILE_WARN else 65536}\n"
        "  # container: docker run --ulimit nofile=65536:65536 ...",
    )
