"""Probe: container runtime, network mode, /dev/shm, IPC namespace, limits, capabilities.

Everything comes from files the kernel and the runtimes write (``/proc``, ``/sys``, marker
files), read under ``root`` so that a captured container is judged like a live one. Addresses
are only read (``/proc/net/route``); nothing here connects anywhere.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from nccldoctor.facts import ContainerFacts
from nccldoctor.probes.python_env import is_live
from nccldoctor.probes.sysfs import list_dir, read_int, read_text, under

# include/uapi/linux/capability.h, bit number -> name
CAPABILITIES = (
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
    "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
    "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
    "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
    "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
    "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
)  # fmt: skip

# include/linux/proc_ns.h: the initial namespaces have fixed inode numbers.
_INIT_IPC_NS = "ipc:[4026531839]"  # PROC_IPC_INIT_INO 0xEFFFFFFF
_INIT_PID_NS = "pid:[4026531836]"  # PROC_PID_INIT_INO 0xEFFFFFFC

# Docker's default bridge network (docker0), 172.17.0.0/16.
_DOCKER_BRIDGE_NET = ("172.17.0.0", 16)

# What cgroup paths and mount sources name, per runtime (most specific first).
_CGROUP_MARKERS = (
    ("kubepods", "kubernetes"),
    ("libpod", "podman"),
    ("docker", "docker"),
    ("cri-containerd", "containerd"),
    ("containerd", "containerd"),
)
_MOUNT_MARKERS = (
    ("/var/lib/kubelet/pods/", "kubernetes"),
    ("/var/lib/containers/storage/", "podman"),
    ("/var/lib/docker/", "docker"),
    ("/run/containerd/", "containerd"),
    ("/var/lib/containerd/", "containerd"),
)
_RUNTIME_ORDER = ("kubernetes", "podman", "docker", "containerd", "container")


def probe(root: Path, env: Mapping[str, str]) -> ContainerFacts:
    facts = ContainerFacts()
    mounts = _mountinfo(root)
    facts.runtime, facts.runtime_evidence = _runtime(root, env, mounts)
    _network(root, facts)
    _shm(root, facts, mounts)
    facts.ipc_namespace = _readlink(under(root, "/proc/self/ns/ipc"))
    facts.ipc_host = facts.ipc_namespace == _INIT_IPC_NS if facts.ipc_namespace else None
    limits = _limits(root)
    facts.memlock_soft, facts.memlock_hard = limits.get("Max locked memory", (None, None))
    facts.nofile_soft, facts.nofile_hard = limits.get("Max open files", (None, None))
    status = read_text(root, "/proc/self/status") or ""
    match = re.search(r"^CapEff:\s*([0-9a-fA-F]+)\s*$", status, re.MULTILINE)
    if match:
        facts.cap_eff = match.group(1)
        facts.capabilities = decode_capabilities(int(match.group(1), 16))
    facts.dev_infiniband_present = under(root, "/dev/infiniband").is_dir()
    facts.dev_infiniband = list_dir(root, "/dev/infiniband")
    return facts


def decode_capabilities(mask: int) -> list[str]:
    """``CapEff`` bits as ``CAP_*`` names (unknown high bits as ``CAP_<bit>``)."""
    names = []
    for bit in range(mask.bit_length()):
        if mask >> bit & 1:
            names.append(f"CAP_{CAPABILITIES[bit] if bit < len(CAPABILITIES) else bit}")
    return names


def _mountinfo(root: Path) -> list[tuple[str, str, str, str, str]]:
    """(root, mount point, fs type, source, super options) per line of /proc/self/mountinfo."""
    mounts = []
    for line in (read_text(root, "/proc/self/mountinfo") or "").splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 10:
            continue
        tail = line.split(" - ", 1)[1].split()
        if len(tail) < 3:
            continue
        mounts.append((fields[3], fields[4], tail[0], tail[1], tail[2]))
    return mounts


def _runtime(root: Path, env: Mapping[str, str], mounts: list) -> tuple[str | None, list[str]]:
    seen: dict[str, list[str]] = {}
    sources: set[tuple[str, str]] = set()

    def saw(runtime: str, evidence: str, source: str = "") -> None:
        """Keep the first line of each kind of evidence (one cgroup line, one bind mount)."""
        if (runtime, source or evidence) not in sources:
            sources.add((runtime, source or evidence))
            seen.setdefault(runtime, []).append(evidence)

    if under(root, "/.dockerenv").exists():
        saw("docker", "/.dockerenv exists")
    if under(root, "/run/.containerenv").exists():
        saw("podman", "/run/.containerenv exists")
    if env.get("KUBERNETES_SERVICE_HOST"):
        saw("kubernetes", f"KUBERNETES_SERVICE_HOST={env['KUBERNETES_SERVICE_HOST']}")
    for path in ("/proc/1/cgroup", "/proc/self/cgroup"):
        for line in (read_text(root, path) or "").splitlines():
            runtime = next((r for m, r in _CGROUP_MARKERS if m in line), None)
            if runtime:
                saw(runtime, f"{path}: {line.strip()}", "cgroup")
                break
    for mount_root, point, fstype, _source, options in mounts:
        # A bind mount's root names where its file lives on the host; "/" also names its layers.
        # (The host's own view of container mounts has other mount points, so it never matches.)
        text = f"{mount_root} {options}" if point == "/" else mount_root
        marker, runtime = next(((m, r) for m, r in _MOUNT_MARKERS if m in text), (None, None))
        if runtime and point == "/":
            saw(runtime, f"mountinfo: / is {fstype} with layers under {marker}")
        elif runtime:
            saw(runtime, f"mountinfo: {point} is bound from {mount_root}", "bind")
        elif point == "/" and fstype == "overlay":
            saw("container", "mountinfo: / is an overlay filesystem")
    if not seen:
        return None, []
    evidence = [e for r in _RUNTIME_ORDER for e in seen.get(r, [])]
    pid_ns = _readlink(under(root, "/proc/self/ns/pid"))
    if pid_ns == _INIT_PID_NS and set(seen) <= {"docker", "podman"} and len(evidence) == 1:
        # A marker file alone, in the initial PID namespace: an image booted as a VM or host.
        return None, [*evidence, f"but /proc/self/ns/pid is {pid_ns}, the host's"]
    return next(r for r in _RUNTIME_ORDER if r in seen), evidence


def _network(root: Path, facts: ContainerFacts) -> None:
    """Bridge: the default-route interface is a veth end or sits on docker0's subnet."""
    routes = _routes(root)
    default = next((r for r in routes if r[1] == 0), None)
    iface = default[0] if default else None
    if iface is None and "eth0" in list_dir(root, "/sys/class/net"):
        iface = "eth0"
    facts.default_interface = iface
    evidence = []
    ifindex = read_int(root, f"/sys/class/net/{iface}/ifindex") if iface else None
    iflink = read_int(root, f"/sys/class/net/{iface}/iflink") if iface else None
    if ifindex is not None and iflink is not None and ifindex != iflink:
        evidence.append(f"{iface} is one end of a veth pair (iflink {iflink} != ifindex {ifindex})")
    net, bits = _DOCKER_BRIDGE_NET
    for name, dest, _gateway, mask in routes:
        if name == iface and dest and _in_net(dest, net, bits):
            prefix = f"{_ip(dest)}/{mask.bit_count()}"
            evidence.append(f"{iface} is on {prefix}, the subnet of Docker's default bridge")
            break
    if evidence:
        facts.network_mode = "bridge"
        if default and default[2]:
            evidence.append(f"default route via {_ip(default[2])} dev {iface}")
    elif facts.runtime is None or os.path.lexists(under(root, f"/sys/class/net/{iface}/device")):
        facts.network_mode = "host"  # a NIC with a device behind it is the host's own
    elif under(root, f"/sys/class/net/{iface}/bridge").is_dir():
        # A bridge lives on the host (a bridge network gives its containers a veth end)
        facts.network_mode = "host"
        evidence.append(f"{iface}, on the default route, is a bridge: the host's own interface")
    else:
        facts.network_mode = "unknown"
    facts.network_evidence = evidence


def _routes(root: Path) -> list[tuple[str, int, int, int]]:
    """(interface, destination, gateway, mask) of /proc/net/route; addresses as host-order ints."""
    routes = []
    for line in (read_text(root, "/proc/net/route") or "").splitlines()[1:]:
        fields = line.split()
        try:
            dest, gateway, mask = (_le32(fields[i]) for i in (1, 2, 7))
        except (IndexError, ValueError):
            continue
        routes.append((fields[0], dest, gateway, mask))
    return routes


def _le32(text: str) -> int:
    """/proc/net/route writes addresses as the hex of a little-endian 32-bit word."""
    return int.from_bytes(int(text, 16).to_bytes(4, "little"), "big")


def _ip(value: int) -> str:
    return ".".join(str(value >> shift & 0xFF) for shift in (24, 16, 8, 0))


def _in_net(value: int, net: str, bits: int) -> bool:
    base = int.from_bytes(bytes(int(p) for p in net.split(".")), "big")
    mask = (0xFFFFFFFF << (32 - bits)) & 0xFFFFFFFF
    return value & mask == base


def _shm(root: Path, facts: ContainerFacts, mounts: list) -> None:
    shm = under(root, "/dev/shm")
    line = next((m for m in reversed(mounts) if m[1] == "/dev/shm"), None)
    if is_live(root):
        try:
            st = os.statvfs(shm)
        except OSError:
            facts.shm_writable = False
            return
        facts.shm_size_bytes = st.f_blocks * st.f_frsize
        facts.shm_free_bytes = st.f_bavail * st.f_frsize
        facts.shm_source = "statvfs"
        facts.shm_writable = _can_create_file(shm)
    elif line is not None:
        size = re.search(r"(?:^|,)size=(\d+)([kmg]?)", line[4])
        if size:
            scale = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}[size.group(2)]
            facts.shm_size_bytes = int(size.group(1)) * scale
            facts.shm_source = f"mountinfo size={size.group(1)}{size.group(2)}"
        facts.shm_writable = "ro" not in line[4].split(",")
    elif not shm.is_dir():
        facts.shm_writable = False  # no /dev/shm mount and no folder: nothing to write to


def _can_create_file(folder: Path) -> bool:
    """NCCL creates and unlinks files in /dev/shm; try exactly that."""
    path = folder / f"nccldoctor-{os.getpid()}"
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        os.unlink(path)
    except OSError:
        return False
    return True


def _limits(root: Path) -> dict[str, tuple[int | None, int | None]]:
    """/proc/self/limits rows as (soft, hard); "unlimited" is -1."""
    limits = {}
    for line in (read_text(root, "/proc/self/limits") or "").splitlines()[1:]:
        match = re.match(r"(Max [a-z ]+?)\s{2,}(\S+)\s+(\S+)", line)
        if match:
            limits[match.group(1)] = (_limit(match.group(2)), _limit(match.group(3)))
    return limits


def _limit(text: str) -> int | None:
    if text == "unlimited":
        return -1
    return int(text) if text.isdigit() else None


def _readlink(path: Path) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None
