"""Probe: network interfaces, the route to the master, name resolution, NCCL's interface pick.

Flags, MTU and kind clues come from ``/sys/class/net`` under ``root``. Addresses come from psutil
on the live machine; a captured tree carries them as ``ip -j -d addr show`` output in
``<root>/run/nccldoctor/ip-addr.json`` (psutil cannot see a tree). The link kind the kernel
reports (rtnetlink IFLA_INFO_KIND, ``linkinfo.info_kind``: veth, bridge, ...) comes from the same
JSON: ``ip -j -d link show`` live, the capture otherwise, parsed by one function. It is needed
because sysfs cannot always tell a veth: its ``iflink`` is the peer's index in the peer's
namespace, which can equal its own.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from nccldoctor.facts import NetworkFacts
from nccldoctor.facts.network import Interface
from nccldoctor.nccl.rules import (
    candidates,
    default_pick,
    find_interfaces,
    parse_if_list,
    socket_family,
)
from nccldoctor.probes import netpath
from nccldoctor.probes.env import effective_nccl_env
from nccldoctor.probes.python_env import is_live
from nccldoctor.probes.sysfs import list_dir, read_int, read_line, read_text, under

CAPTURED_ADDRESSES = "/run/nccldoctor/ip-addr.json"  # `ip -j -d addr show` of a captured machine
LINK_DEADLINE_S = 3.0

_IFF_UP, _IFF_LOOPBACK = 0x1, 0x8  # include/uapi/linux/if.h
_ARPHRD_LOOPBACK, _ARPHRD_NONE = 772, 65534


@dataclass
class _Link:
    """What the address source says about one interface (psutil or `ip -j addr`)."""

    ipv4: list[str] = field(default_factory=list)
    ipv6: list[str] = field(default_factory=list)
    up: bool | None = None
    running: bool | None = None
    mtu: int | None = None
    speed_mbps: int | None = None
    index: int | None = None
    info_kind: str | None = None  # rtnetlink's link kind: veth, bridge, bond, vlan, tun ...


def probe(root: Path, env: Mapping[str, str], master: str | None) -> NetworkFacts:
    live = is_live(root)
    facts = NetworkFacts(live=live, master=master)
    links = _live_links(facts) if live else _captured_links(root, facts)
    facts.interfaces = sorted(
        (_interface(root, name, links.get(name, _Link())) for name in _names(root, links)),
        key=lambda i: (i.index is None, i.index or 0, i.name),
    )
    _hostname(root, live, facts)
    _master_path(root, live, facts)
    facts.ip_local_port_range = _port_range(root)
    _nccl_picks(root, env, facts)
    return facts


def _names(root: Path, links: Mapping[str, _Link]) -> list[str]:
    # /sys/class/net also holds the file bonding_masters when the bonding driver is loaded
    in_sysfs = {
        n for n in list_dir(root, "/sys/class/net") if under(root, f"/sys/class/net/{n}").is_dir()
    }
    return sorted(in_sysfs | set(links))


def _interface(root: Path, name: str, link: _Link) -> Interface:
    base = f"/sys/class/net/{name}"
    index, iflink = read_int(root, f"{base}/ifindex"), read_int(root, f"{base}/iflink")
    flags = read_int(root, f"{base}/flags", 16)
    operstate = read_line(root, f"{base}/operstate")
    up = bool(flags & _IFF_UP) if flags is not None else bool(link.up)
    # dev_get_flags(): IFF_RUNNING is netif_oper_up(), i.e. operstate up or unknown.
    running = (up and operstate in ("up", "unknown")) if operstate else link.running
    speed = read_int(root, f"{base}/speed")
    return Interface(
        name=name,
        index=index if index is not None else link.index,
        up=up,
        running=running,
        mtu=read_int(root, f"{base}/mtu") or link.mtu,
        speed_mbps=speed if speed and speed > 0 else link.speed_mbps,
        ipv4=link.ipv4,
        ipv6=link.ipv6,
        kind=_kind(root, base, flags, index, iflink, link.info_kind),
        driver=_link_name(root, f"{base}/device/driver"),
        veth_peer_ifindex=iflink if iflink not in (None, index) else None,
        operstate=operstate,
        mac=read_line(root, f"{base}/address"),
        bridge_ports=list_dir(root, f"{base}/brif"),
        bond_slaves=(read_line(root, f"{base}/bonding/slaves") or "").split(),
    )


_INFO_KINDS = {"veth": "veth", "bridge": "bridge", "bond": "bond", "vlan": "vlan", "tun": "tun",
               "wireguard": "tun"}  # fmt: skip


def _kind(
    root: Path,
    base: str,
    flags: int | None,
    index: int | None,
    iflink: int | None,
    info_kind: str | None,
) -> str:
    if info_kind:
        return _INFO_KINDS.get(info_kind, "virtual")
    devtype = ""
    for line in (read_text(root, f"{base}/uevent") or "").splitlines():
        if line.startswith("DEVTYPE="):
            devtype = line.split("=", 1)[1]
    arphrd = read_int(root, f"{base}/type")
    if (flags or 0) & _IFF_LOOPBACK or arphrd == _ARPHRD_LOOPBACK:
        return "loopback"
    if devtype == "bridge" or under(root, f"{base}/bridge").is_dir():
        return "bridge"
    if devtype == "bond" or under(root, f"{base}/bonding").is_dir():
        return "bond"
    if devtype == "vlan":
        return "vlan"
    if under(root, f"{base}/tun_flags").exists() or arphrd == _ARPHRD_NONE:
        return "tun"
    if under(root, f"{base}/device").exists():
        return "physical"
    if iflink is not None and index is not None and iflink != index:
        return "veth"  # the peer's index: a veth (or macvlan) with its other end elsewhere
    return "virtual"


def _link_name(root: Path, path: str) -> str | None:
    try:
        return os.path.basename(os.readlink(under(root, path)))
    except OSError:
        return None


def _live_links(facts: NetworkFacts) -> dict[str, _Link]:
    import psutil

    facts.address_source = "psutil"
    links: dict[str, _Link] = {}
    for name, addrs in psutil.net_if_addrs().items():
        link = links.setdefault(name, _Link())
        for addr in addrs:
            if addr.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            ip = ipaddress.ip_address(addr.address.split("%")[0])
            mask = addr.netmask  # None on some point-to-point links: a host address
            bits = bin(int(ipaddress.ip_address(mask))).count("1") if mask else ip.max_prefixlen
            (link.ipv4 if ip.version == 4 else link.ipv6).append(f"{ip}/{bits}")
    for name, kind in _live_link_kinds().items():
        links.setdefault(name, _Link()).info_kind = kind
    for name, stats in psutil.net_if_stats().items():
        link = links.setdefault(name, _Link())
        link.up, link.mtu = stats.isup, stats.mtu or None
        link.running = "running" in getattr(stats, "flags", "").split(",")
        link.speed_mbps = stats.speed or None
    return links


def _live_link_kinds() -> dict[str, str]:
    """name -> info_kind from ``ip -j -d link show`` (empty when ip is missing or fails)."""
    try:
        out = subprocess.run(
            ["ip", "-j", "-d", "link", "show"],
            capture_output=True,
            text=True,
            timeout=LINK_DEADLINE_S,
        )
        links = parse_ip_addr_json(out.stdout) if out.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, ValueError, TypeError, KeyError, AttributeError):
        return {}
    return {name: link.info_kind for name, link in links.items() if link.info_kind}


def _captured_links(root: Path, facts: NetworkFacts) -> dict[str, _Link]:
    text = read_text(root, CAPTURED_ADDRESSES)
    if text is None:
        facts.read_errors.append(f"{CAPTURED_ADDRESSES}: missing, addresses unknown")
        return {}
    try:
        links = parse_ip_addr_json(text)
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        facts.read_errors.append(f"{CAPTURED_ADDRESSES}: unreadable ({exc})")
        return {}
    facts.address_source = f"{root}{CAPTURED_ADDRESSES}"
    return links


def parse_ip_addr_json(text: str) -> dict[str, _Link]:
    """``ip -j [-d] addr|link show`` (iproute2's JSON: ifname, ifindex, flags, mtu, addr_info,
    linkinfo).

    Raises ValueError/TypeError/KeyError on anything that is not that shape.
    """
    links = {}
    for entry in json.loads(text):
        name, flags = entry["ifname"], entry.get("flags", [])
        if not isinstance(name, str) or not isinstance(flags, list):
            raise ValueError(f"not an interface entry: {str(entry)[:80]}")
        link = _Link(
            up="UP" in flags,
            running="LOWER_UP" in flags and entry.get("operstate") in ("UP", "UNKNOWN"),
            mtu=_int_or_none(entry.get("mtu")),
            index=_int_or_none(entry.get("ifindex")),
            info_kind=_str_or_none((entry.get("linkinfo") or {}).get("info_kind")),
        )
        for addr in entry.get("addr_info", []):
            text_addr = str(ipaddress.ip_interface(f"{addr['local']}/{addr['prefixlen']}"))
            {"inet": link.ipv4, "inet6": link.ipv6}.get(addr.get("family"), []).append(text_addr)
        links[name] = link
    return links


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _hostname(root: Path, live: bool, facts: NetworkFacts) -> None:
    if live:
        facts.hostname = socket.gethostname()
    else:
        facts.hostname = (
            read_line(root, "/etc/hostname") or read_line(root, "/proc/sys/kernel/hostname") or ""
        )
    if not facts.hostname:
        return
    short = facts.hostname.split(".")[0]
    naming = [
        (names, line)
        for _, names, line in netpath.hosts_entries(root)
        if {facts.hostname, short} & {*names}
    ]
    facts.hosts_file_entries = [line for _, line in naming]
    # glibc's getfqdn answer from /etc/hosts: the canonical (first) name of the first line
    facts.fqdn = next((names[0] for names, _ in naming if "." in names[0]), None)
    facts.hostname_addresses, _ = netpath.resolve(facts.hostname, root, live)


def _master_path(root: Path, live: bool, facts: NetworkFacts) -> None:
    if not facts.master:
        return
    facts.master_addresses, facts.master_resolve_error = netpath.resolve(facts.master, root, live)
    facts.master_hosts_entries = [
        line for _, names, line in netpath.hosts_entries(root) if facts.master in names
    ]
    if not facts.master_addresses:
        return
    own = [a for i in facts.interfaces for a in (*i.ipv4, *i.ipv6)]
    loopback = next((i.name for i in facts.interfaces if i.kind == "loopback"), "lo")
    route = netpath.route_to(facts.master_addresses[0], root, live, own, loopback)
    if route is None:
        facts.read_errors.append(
            "no routing table in the capture: the route to the master is unknown"
        )
        return
    if route.interface and not route.source:
        iface = next((i for i in facts.interfaces if i.name == route.interface), None)
        route.source = iface.ipv4[0].split("/")[0] if iface and iface.ipv4 else None
    facts.route_to_master = route


def _port_range(root: Path) -> list[int] | None:
    fields = (read_line(root, "/proc/sys/net/ipv4/ip_local_port_range") or "").split()
    if len(fields) == 2 and all(f.isdigit() for f in fields):
        return [int(fields[0]), int(fields[1])]
    return None


def _nccl_picks(root: Path, env: Mapping[str, str], facts: NetworkFacts) -> None:
    """What NCCL's bootstrap would choose: by its default order, and with this env."""
    nccl_env = effective_nccl_env(root, env)
    family = socket_family(nccl_env.get("NCCL_SOCKET_FAMILY"))
    cands = candidates(facts.interfaces)
    default = default_pick(cands, family, nccl_env.get("NCCL_COMM_ID"))
    facts.nccl_default_pick, facts.nccl_default_pick_address = default or (None, None)
    ifname = nccl_env.get("NCCL_SOCKET_IFNAME")
    if ifname is None or len(ifname) <= 1:
        facts.nccl_pick, facts.nccl_pick_address = (
            facts.nccl_default_pick,
            facts.nccl_default_pick_address,
        )
        return
    forced = find_interfaces(cands, parse_if_list(ifname), family, 1)
    facts.nccl_pick, facts.nccl_pick_address = forced[0] if forced else (None, None)
