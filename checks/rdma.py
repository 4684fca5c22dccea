"""InfiniBand / RoCE checks: HCA selection, port state, RoCE GIDs, GPUDirect RDMA, modules.

Background: docs/failures.md F13-F19. NCCL (transport/net_ib/init.cc) uses every ACTIVE
port of every HCA that NCCL_IB_HCA matches (a prefix list unless written ``=``), skipping the
rest silently; RoCE needs a GID that routes (RoCE v2, not link-local).
"""

from __future__ import annotations

import ipaddress

from checks import Problem, check
from nccldoctor.facts import NodeFacts
from nccldoctor.facts.rdma import Gid, Hca, IbPort
from nccldoctor.model import Severity
from nccldoctor.nccl.rules import if_list_matches, strtoll


def _ib_disabled(facts: NodeFacts) -> bool:
    value = facts.env.effective.get("NCCL_IB_DISABLE")
    return value is not None and strtoll(value)[0] != 0


def _selected(facts: NodeFacts) -> list[tuple[Hca, IbPort]]:
    """The HCA ports NCCL_IB_HCA lets NCCL consider (all of them when it is unset)."""
    wanted = facts.env.ib_hca
    return [
        (h, p)
        for h in facts.rdma.hcas
        for p in h.ports
        if wanted is None or if_list_matches(wanted, h.name, p.number)
    ]


def _port_line(hca: Hca, port: IbPort) -> str:
    return (
        f"{hca.name}:{port.number} state '{port.state_raw}' phys_state '{port.phys_state_raw}' "
        f"rate '{port.rate}' link_layer {port.link_layer or '?'}"
    )


def _hca_names(facts: NodeFacts) -> str:
    return "HCAs on this node: " + (", ".join(h.name for h in facts.rdma.hcas) or "none")


def _exact_list(names: list[str]) -> str:
    return "=" + ",".join(names)


@check("ib.hca-missing", area="rdma", category="ib_error")
def hca_missing(facts: NodeFacts) -> Problem | None:
    """NCCL_IB_HCA names an HCA this node does not have."""
    wanted = facts.env.ib_hca
    if wanted is None or wanted.exclude or not wanted.entries:
        return None
    names = [h.name for h in facts.rdma.hcas]
    missing = [e for e in wanted.entries if not _named(e, names, wanted.exact)]
    if not missing:
        return None
    none_left = len(missing) == len(wanted.entries)
    active = [
        f"{h.name}:{p.number}" for h in facts.rdma.hcas for p in h.ports if p.state == "ACTIVE"
    ]
    return Problem(
        Severity.FAIL if none_left else Severity.WARN,
        f"NCCL_IB_HCA={wanted.raw} names {', '.join(missing)}, not present on this node"
        + (": NCCL will fall back to TCP sockets" if none_left else ""),
        evidence=[f"NCCL_IB_HCA={wanted.raw}", _hca_names(facts)],
        fix=f"export NCCL_IB_HCA={_exact_list(active)}" if active else "unset NCCL_IB_HCA",
    )


def _named(entry: str, names: list[str], exact: bool) -> list[str]:
    """The HCA names one NCCL_IB_HCA entry selects (misc/utils.cc matchIf)."""
    return [n for n in names if (n == entry if exact else n.startswith(entry))]


@check("ib.hca-prefix-trap", area="rdma", category="ib_error")
def hca_prefix_trap(facts: NodeFacts) -> Problem | None:
    """A bare NCCL_IB_HCA entry is a prefix that also matches other HCAs (mlx5_1 -> mlx5_10)."""
    wanted = facts.env.ib_hca
    if wanted is None or wanted.exact or wanted.exclude:
        return None
    names = [h.name for h in facts.rdma.hcas]
    broad = {e: _named(e, names, exact=False) for e in wanted.entries}
    broad = {e: hits for e, hits in broad.items() if any(n != e for n in hits) and len(hits) > 1}
    if not broad:
        return None
    return Problem(
        Severity.WARN,
        f"NCCL_IB_HCA={wanted.raw} is a prefix list: it also selects "
        + ", ".join(n for e, hits in broad.items() for n in hits if n != e),
        evidence=[f"'{e}' matches {', '.join(hits)}" for e, hits in broad.items()],
        fix=f"export NCCL_IB_HCA=={wanted.raw}  # a leading = makes the names exact",
    )


@check("ib.port-not-active", area="rdma", category="ib_error")
def port_not_active(facts: NodeFacts) -> Problem | None:
    """An HCA port NCCL would use is not ACTIVE / LinkUp (NCCL skips it silently)."""
    if _ib_disabled(facts):
        return None
    selected = _selected(facts)
    down = [(h, p) for h, p in selected if p.state != "ACTIVE" or p.phys_state != "LinkUp"]
    if not down:
        return None
    none_active = all(p.state != "ACTIVE" for _, p in selected)
    return Problem(
        Severity.FAIL if none_active else Severity.WARN,
        ", ".join(f"{h.name}:{p.number}" for h, p in down)
        + (
            " not ACTIVE: no usable port, NCCL falls back to TCP sockets"
            if none_active
            else " not ACTIVE/LinkUp: NCCL skips it, fewer rails than the other nodes may have"
        ),
        evidence=[_port_line(h, p) for h, p in down],
        fix="ibstat; ibv_devinfo  # check cable and switch port, or exclude it: "
        f"export NCCL_IB_HCA=^={','.join(h.name for h, _ in down)}",
    )


@check("ib.mixed-link-layers", area="rdma", category="ib_error")
def mixed_link_layers(facts: NodeFacts) -> Problem | None:
    """NCCL would use InfiniBand and RoCE (Ethernet) ports together."""
    active = [(h, p) for h, p in _selected(facts) if p.state == "ACTIVE"]
    layers = {p.link_layer for _, p in active if p.link_layer}
    if len(layers) < 2 or _ib_disabled(facts):
        return None
    ib = [h.name for h, p in active if p.link_layer == "InfiniBand"]
    return Problem(
        Severity.WARN,
        "NCCL would mix InfiniBand and RoCE ports: "
        + ", ".join(f"{h.name}:{p.number}/{p.link_layer}" for h, p in active),
        evidence=[_port_line(h, p) for h, p in active],
        fix=f"export NCCL_IB_HCA={_exact_list(sorted(set(ib)))}  # one link layer",
    )


def _usable_gid(gid: Gid) -> bool:
    """A RoCE v2 GID that routes beyond the link (IPv4-mapped or global IPv6)."""
    return gid.type == "RoCE v2" and not ipaddress.IPv6Address(gid.gid).is_link_local


def _roce_ports(facts: NodeFacts) -> list[tuple[Hca, IbPort]]:
    return [
        (h, p)
        for h, p in _selected(facts)
        if p.link_layer == "Ethernet" and p.state == "ACTIVE" and not _ib_disabled(facts)
    ]


def _gid_line(hca: Hca, port: IbPort) -> str:
    gids = "; ".join(f"[{g.index}] {g.gid} {g.type} {g.ndev or ''}".strip() for g in port.gids)
    return f"{hca.name}:{port.number} GIDs: {gids or 'none'}"


@check("roce.gid-index-unusable", area="rdma", category="ib_error")
def gid_index_unusable(facts: NodeFacts) -> list[Problem] | None:
    """NCCL_IB_GID_INDEX points at an empty, RoCE v1 or link-local GID, or one in another netns."""
    raw = facts.env.effective.get("NCCL_IB_GID_INDEX")
    if raw is None or strtoll(raw)[0] < 0:
        return None
    index = strtoll(raw)[0]
    netdevs = {i.name for i in facts.network.interfaces}
    problems = []
    for hca, port in _roce_ports(facts):
        gid = next((g for g in port.gids if g.index == index), None)
        good = next((g.index for g in port.gids if _usable_gid(g) and g.ipv4), None)
        if gid is None:
            why = "is empty"
        elif gid.type != "RoCE v2":
            why = f"is {gid.type}"
        elif not _usable_gid(gid):
            why = f"is link-local {gid.gid}"
        elif gid.ndev and netdevs and gid.ndev not in netdevs:
            why = f"belongs to {gid.ndev}, which is not in this network namespace"
        else:
            continue
        problems.append(
            Problem(
                Severity.FAIL,
                f"NCCL_IB_GID_INDEX={raw} on {hca.name}:{port.number} {why}: "
                "ibv_modify_qp will fail or time out",
                evidence=[_gid_line(hca, port)],
                fix=f"export NCCL_IB_GID_INDEX={good}"
                if good is not None
                else "unset NCCL_IB_GID_INDEX  # NCCL >= 2.21 picks a RoCE v2 GID itself",
            )
        )
    return problems


@check("roce.gid-index-forced", area="rdma", category="ib_error")
def gid_index_forced(facts: NodeFacts) -> Problem | None:
    """NCCL_IB_GID_INDEX is forced although NCCL (2.21+) picks a RoCE v2 GID itself."""
    raw = facts.env.effective.get("NCCL_IB_GID_INDEX")
    versions = [lib.version for lib in facts.software.nccl_libraries if lib.version]
    if raw is None or strtoll(raw)[0] < 0 or not _roce_ports(facts):
        return None
    if not versions or not all(_at_least(v, (2, 21)) for v in versions):
        return None
    return Problem(
        Severity.INFO,
        f"NCCL_IB_GID_INDEX={raw} is forced; NCCL {', '.join(versions)} selects the GID itself",
        evidence=[f"NCCL_IB_GID_INDEX={raw}", *(_gid_line(h, p) for h, p in _roce_ports(facts))],
        fix="unset NCCL_IB_GID_INDEX  # or keep it identical on every node",
    )


@check("roce.default-gid-link-local", area="rdma", category="ib_error")
def default_gid_link_local(facts: NodeFacts) -> list[Problem] | None:
    """No NCCL_IB_GID_INDEX and GID 0 is link-local/RoCE v1: NCCL before 2.21 uses it."""
    if facts.env.effective.get("NCCL_IB_GID_INDEX") is not None:
        return None
    versions = [lib.version for lib in facts.software.nccl_libraries if lib.version]
    if versions and all(_at_least(v, (2, 21)) for v in versions):
        return None  # 2.21+ selects a RoCE v2 GID by NCCL_IB_ADDR_FAMILY / ROCE_VERSION_NUM
    problems = []
    for hca, port in _roce_ports(facts):
        first = min(port.gids, key=lambda g: g.index, default=None)
        good = next((g.index for g in port.gids if _usable_gid(g) and g.ipv4), None)
        if first is None or _usable_gid(first) or good is None:
            continue
        known = f"NCCL {', '.join(versions)}" if versions else "NCCL version unknown"
        problems.append(
            Problem(
                Severity.WARN,
                f"{hca.name}:{port.number} GID {first.index} is {first.type} {first.gid}: "
                f"NCCL before 2.21 uses it by default ({known})",
                evidence=[_gid_line(hca, port)],
                fix=f"export NCCL_IB_GID_INDEX={good}  # the RoCE v2 IPv4 GID; or use NCCL >= 2.21",
            )
        )
    return problems


def _at_least(version: str, minimum: tuple[int, int]) -> bool:
    parts = version.split(".")
    try:
        return (int(parts[0]), int(parts[1])) >= minimum
    except (IndexError, ValueError):
        return False


@check("roce.no-routable-gid", area="rdma", category="ib_error")
def no_routable_gid(facts: NodeFacts) -> list[Problem] | None:
    """An ACTIVE RoCE port has no RoCE v2 GID beyond link-local (no IP on its netdev?)."""
    return [
        Problem(
            Severity.FAIL,
            f"{hca.name}:{port.number} (RoCE) has no routable RoCE v2 GID: NCCL cannot connect over it",
            evidence=[_gid_line(hca, port)],
            fix=f"ip addr add <IP>/<len> dev {port.netdev or '<netdev>'}  # a GID appears per IP"
            "; in a container: docker run --network host",
        )
        for hca, port in _roce_ports(facts)
        if not any(_usable_gid(g) for g in port.gids)
    ]


@check("rdma.no-peer-memory", area="rdma", category="ib_error")
def no_peer_memory(facts: NodeFacts) -> Problem | None:
    """HCAs are ACTIVE but no peer-memory module is loaded: no GPUDirect RDMA."""
    rdma = facts.rdma
    active = [f"{h.name}:{p.number}" for h, p in _selected(facts) if p.state == "ACTIVE"]
    if not active or rdma.peer_memory_module or rdma.peer_memory_evidence:
        return None
    if not rdma.modules_readable or (facts.gpu.nvml_available and not facts.gpu.devices):
        return None
    return Problem(
        Severity.WARN,
        "no nvidia_peermem/nv_peer_mem: NCCL runs without GPUDirect RDMA (copies through host memory)",
        evidence=[
            f"ACTIVE ports: {', '.join(active)}",
            f"RDMA modules loaded: {', '.join(rdma.modules) or 'none'}",
            "none of /sys/kernel/mm/memory_peers/nv_mem*/version, /sys/module/nvidia_peermem",
        ],
        fix="modprobe nvidia-peermem  # on the host; persist: echo nvidia-peermem > /etc/modules-load.d/nvidia-peermem.conf",
    )


@check("rdma.uverbs-module-missing", area="rdma", category="ib_error")
def uverbs_module_missing(facts: NodeFacts) -> Problem | None:
    """HCAs are present but ib_uverbs is not loaded: userspace (NCCL) cannot open them."""
    rdma = facts.rdma
    if not rdma.hcas or not rdma.modules_readable or "ib_uverbs" in rdma.modules:
        return None
    return Problem(
        Severity.WARN,
        "HCAs present but ib_uverbs is not loaded: NCCL cannot open them and uses TCP sockets",
        evidence=[_hca_names(facts), f"RDMA modules loaded: {', '.join(rdma.modules) or 'none'}"],
        fix="modprobe ib_uverbs rdma_ucm  # on the host",
    )


@check("rdma.sysfs-unreadable", area="rdma", category="other")
def sysfs_unreadable(facts: NodeFacts) -> Problem | None:
    """Some InfiniBand sysfs files or /proc/modules were missing or garbled."""
    errors = facts.rdma.read_errors
    if not errors:
        return None
    return Problem(
        Severity.WARN,
        f"{len(errors)} RDMA file(s) missing or unreadable: the InfiniBand facts are incomplete",
        evidence=errors[:10],
        fix="ls -lR /sys/class/infiniband/; cat /proc/modules  # compare with a healthy node",
    )
