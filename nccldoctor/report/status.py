"""One-line status per area ("2 × H100, driver 550.54"), computed from Facts for every view."""

from __future__ import annotations

from nccldoctor.facts import NodeFacts
from nccldoctor.model import AreaState
from nccldoctor.units import format_bytes


def area_status(facts: NodeFacts) -> dict[str, str]:
    """The status line of each area that has something to say about this node."""
    lines = {
        "gpu": _gpu(facts),
        "software": _software(facts),
        "network": _network(facts),
        "rdma": _rdma(facts),
        "container": _container(facts),
        "environment": _environment(facts),
    }
    return {area: line for area, line in lines.items() if line}


def area_state(facts: NodeFacts) -> dict[str, AreaState]:
    """The areas whose status line says there is nothing of them on this node to judge."""
    absent = {"gpu": not facts.gpu.nvml_available, "rdma": not facts.rdma.hcas}
    return {area: AreaState.NOT_APPLICABLE for area, none in absent.items() if none}


def _gpu(facts: NodeFacts) -> str:
    gpu = facts.gpu
    if not gpu.nvml_available:
        return f"no NVIDIA driver: {gpu.nvml_error}" if gpu.nvml_error else "no NVIDIA driver"
    names = sorted({d.name for d in gpu.devices if d.name})
    line = f"{len(gpu.devices)} × {', '.join(names)}" if names else "no GPU"
    line += f", driver {gpu.driver_version}"
    if gpu.cuda_driver_version:
        line += f" (CUDA {gpu.cuda_driver_version})"
    if gpu.cuda_visible_devices is not None:
        line += f", CUDA_VISIBLE_DEVICES={gpu.cuda_visible_devices}"
    return line


def _software(facts: NodeFacts) -> str:
    sw = facts.software
    parts = [f"Python {sw.python}"] if sw.python else []
    if sw.torch_version:
        build = f"CUDA {sw.torch_cuda}" if sw.torch_cuda else "CPU build"
        parts.append(f"torch {sw.torch_version} ({build})")
    versions = sorted({lib.version for lib in sw.nccl_libraries if lib.version})
    if versions:
        parts.append(f"NCCL {', '.join(versions)}")
    return ", ".join(parts)


def _network(facts: NodeFacts) -> str:
    net = facts.network
    route = net.route_to_master
    if net.master_resolve_error:
        return f"master {net.master} does not resolve"
    if route and route.error:
        return f"no route to {route.destination}"
    holder = next(
        (
            i.name
            for i in net.interfaces
            if i.kind != "loopback"
            and any(a.split("/")[0] in net.master_addresses for a in i.ipv4 + i.ipv6)
        ),
        None,
    )
    if holder:
        return f"this node is the master ({holder} {net.master_addresses[0]})" + (
            f", NCCL picks {net.nccl_pick}" if net.nccl_pick and net.nccl_pick != holder else ""
        )
    if route and route.interface:
        mtu = next((i.mtu for i in net.interfaces if i.name == route.interface), None)
        line = f"{route.interface} → {route.destination}" + (f", MTU {mtu}" if mtu else "")
        if net.nccl_pick and net.nccl_pick != route.interface:
            line += f", NCCL picks {net.nccl_pick}"
        return line
    up = [i.name for i in net.interfaces if i.up and i.kind != "loopback"]
    line = f"interfaces up: {', '.join(up)}" if up else ""
    return f"{line}, NCCL picks {net.nccl_pick}" if line and net.nccl_pick else line


def _rdma(facts: NodeFacts) -> str:
    hcas = facts.rdma.hcas
    if not hcas:
        return "no HCA"
    active = sum(p.state == "ACTIVE" for h in hcas for p in h.ports)
    ports = sum(len(h.ports) for h in hcas)
    layers = sorted({p.link_layer for h in hcas for p in h.ports if p.link_layer})
    kind = f" ({', '.join('RoCE' if x == 'Ethernet' else x for x in layers)})" if layers else ""
    gdr = facts.rdma.peer_memory_module or "no peer memory"
    return f"{len(hcas)} HCA{kind}, {active}/{ports} ports ACTIVE, {gdr}"


def _container(facts: NodeFacts) -> str:
    c = facts.container
    where = c.runtime or "bare host"
    if c.network_mode and c.runtime:
        where += f", {c.network_mode} network"
    if c.shm_size_bytes:
        where += f", /dev/shm {format_bytes(c.shm_size_bytes)}"
    if c.memlock_soft is not None:
        where += ", memlock " + (
            "unlimited" if c.memlock_soft == -1 else format_bytes(c.memlock_soft)
        )
    return where


def _environment(facts: NodeFacts) -> str:
    n = len(facts.env.variables)
    line = f"{n} relevant variable{'s' if n != 1 else ''} set"
    files = len(facts.env.nccl_conf_files)
    if files:
        line += f", {files} nccl.conf file{'s' if files != 1 else ''}"
    problems = len(facts.env.problems)
    return line + (f", {problems} not understood by NCCL" if problems else "")
