"""Probe: InfiniBand/RoCE HCAs from /sys/class/infiniband, RDMA kernel modules from /proc/modules.

Formats as drivers/infiniband/core/sysfs.c writes them: ``state`` "4: ACTIVE", ``phys_state``
"5: LinkUp", ``rate`` "200 Gb/sec (4X HDR)", ``link_layer`` "InfiniBand" | "Ethernet",
``gids/N`` "fe80:0000:...", ``gid_attrs/types/N`` "IB/RoCE v1" | "RoCE v2", ``gid_attrs/ndevs/N``
the netdev name. Reading an unpopulated GID's attributes fails with EINVAL on a live system.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path

from nccldoctor.facts import RdmaFacts
from nccldoctor.facts.rdma import Gid, Hca, IbPort
from nccldoctor.probes.sysfs import list_dir, read_line, read_text, under

IB = "/sys/class/infiniband"
RDMA_MODULES = (
    "mlx5_ib", "mlx5_core", "mlx4_ib", "ib_uverbs", "ib_core", "rdma_ucm", "rdma_cm",
    "nvidia_peermem", "nv_peer_mem",
)  # fmt: skip
PEER_MEMORY_MODULES = ("nvidia_peermem", "nv_peer_mem")
# transport/net_ib/gdr.cc: NCCL enables GPUDirect RDMA when one of these exists.
PEER_MEMORY_FILES = (
    "/sys/kernel/mm/memory_peers/nv_mem/version",
    "/sys/kernel/mm/memory_peers/nv_mem_nc/version",
    "/sys/module/nvidia_peermem/version",
)
_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def probe(root: Path, env: Mapping[str, str]) -> RdmaFacts:
    facts = RdmaFacts()
    facts.hcas = [_hca(root, name, facts.read_errors) for name in list_dir(root, IB)]
    _modules(root, facts)
    return facts


def _hca(root: Path, name: str, errors: list[str]) -> Hca:
    base = f"{IB}/{name}"
    hca = Hca(
        name=name,
        node_guid=read_line(root, f"{base}/node_guid"),
        fw_ver=read_line(root, f"{base}/fw_ver"),
        netdevs=list_dir(root, f"{base}/device/net"),
    )
    for port in list_dir(root, f"{base}/ports"):
        if port.isdigit():
            hca.ports.append(_port(root, name, int(port), hca.netdevs, errors))
        else:
            errors.append(f"{base}/ports/{port}: not a port number")
    if not hca.ports:
        errors.append(f"{base}/ports: no ports")
    return hca


def _port(root: Path, hca: str, number: int, netdevs: list[str], errors: list[str]) -> IbPort:
    base = f"{IB}/{hca}/ports/{number}"
    values = {}
    for attr in ("state", "phys_state", "rate", "link_layer"):
        value = read_line(root, f"{base}/{attr}")
        if value is None:
            errors.append(f"{base}/{attr}: missing or unreadable")
        values[attr] = value or ""
    port = IbPort(
        number=number,
        state=_enum_name(values["state"]),
        phys_state=_enum_name(values["phys_state"]),
        rate=values["rate"],
        link_layer=values["link_layer"],
        state_raw=values["state"],
        phys_state_raw=values["phys_state"],
    )
    for index in sorted(int(i) for i in list_dir(root, f"{base}/gids") if i.isdigit()):
        gid = _gid(root, base, index, errors)
        if gid is not None:
            port.gids.append(gid)
    ndevs = [g.ndev for g in port.gids if g.ndev]
    port.netdev = ndevs[0] if ndevs else (netdevs[0] if netdevs else None)
    return port


def _enum_name(raw: str) -> str:
    """``4: ACTIVE`` -> ``ACTIVE`` (ib_port_state_str / phys_state_to_str in core/sysfs.c)."""
    return raw.split(":", 1)[1].strip() if ":" in raw else raw.strip()


def _gid(root: Path, port_base: str, index: int, errors: list[str]) -> Gid | None:
    raw = read_line(root, f"{port_base}/gids/{index}")
    if not raw or raw == _ZERO_GID:
        return None
    try:
        mapped = ipaddress.IPv6Address(raw).ipv4_mapped
    except ValueError:
        errors.append(f"{port_base}/gids/{index}: not a GID: {raw[:60]!r}")
        return None
    gid = Gid(
        index=index,
        gid=raw,
        type=read_line(root, f"{port_base}/gid_attrs/types/{index}") or None,
        ndev=read_line(root, f"{port_base}/gid_attrs/ndevs/{index}") or None,
    )
    gid.ipv4 = str(mapped) if mapped else None
    return gid


def _modules(root: Path, facts: RdmaFacts) -> None:
    text = read_text(root, "/proc/modules")
    loaded = set()
    if text is not None:
        for line in text.splitlines():
            fields = line.split()
            if fields and fields[0].isidentifier():
                loaded.add(fields[0])
        facts.modules_readable = bool(loaded)
        if not loaded:
            facts.read_errors.append("/proc/modules: no module lines could be read")
    facts.modules = [m for m in RDMA_MODULES if m in loaded]
    facts.peer_memory_evidence = [p for p in PEER_MEMORY_FILES if under(root, p).exists()]
    facts.peer_memory_evidence += [
        f"/proc/modules: {m}" for m in PEER_MEMORY_MODULES if m in loaded
    ]
    module = next((m for m in PEER_MEMORY_MODULES if m in loaded), None)
    if module is None and facts.peer_memory_evidence:
        module = (
            "nv_peer_mem" if "memory_peers" in facts.peer_memory_evidence[0] else "nvidia_peermem"
        )
    facts.peer_memory_module = module
