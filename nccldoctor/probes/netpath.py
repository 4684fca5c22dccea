"""How this node reaches the master: name resolution (with a deadline) and the route.

Live (root is ``/``): ``getaddrinfo`` in a worker thread bounded by a deadline, and the kernel's
own route lookup (``ip -j route get``). A captured tree: the tree's ``/etc/hosts`` and a
longest-prefix match over its ``/proc/net/route``, since its kernel is not the one running.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import socket
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

from nccldoctor.facts.network import Route
from nccldoctor.probes.sysfs import read_text

RESOLVE_DEADLINE_S = 2.0
ROUTE_DEADLINE_S = 3.0

_RTF_UP, _RTF_GATEWAY, _RTF_REJECT = 0x1, 0x2, 0x200  # include/uapi/linux/route.h


def hosts_entries(root: Path) -> list[tuple[str, list[str], str]]:
    """(address, names, line) for each address line of ``<root>/etc/hosts``."""
    entries = []
    for line in (read_text(root, "/etc/hosts") or "").splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2 and _is_address(fields[0]):
            entries.append((fields[0], fields[1:], line.strip()))
    return entries


def resolve(name: str, root: Path, live: bool) -> tuple[list[str], str | None]:
    """Addresses of ``name`` (IPv4 first) and the error, if it did not resolve."""
    if _is_address(name):
        return [name], None
    if not live:
        found = [addr for addr, names, _ in hosts_entries(root) if name in names]
        return (_ordered(found), None) if found else ([], f"{name} is not in {root}/etc/hosts")
    return _getaddrinfo(name, RESOLVE_DEADLINE_S)


def _getaddrinfo(name: str, deadline_s: float) -> tuple[list[str], str | None]:
    """getaddrinfo cannot be cancelled, so it runs in a daemon thread we stop waiting for."""
    result: dict[str, object] = {}

    def lookup() -> None:
        try:
            infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
            result["addresses"] = [str(info[4][0]) for info in infos]
        except (OSError, UnicodeError) as exc:
            result["error"] = f"{type(exc).__name__}: {exc}"

    worker = threading.Thread(target=lookup, name=f"resolve-{name}", daemon=True)
    worker.start()
    worker.join(deadline_s)
    if worker.is_alive():
        return [], f"resolving {name} took longer than {deadline_s:g} s"
    if "error" in result:
        return [], str(result["error"])
    return _ordered(list(dict.fromkeys(result["addresses"]))), None  # type: ignore[arg-type]


def route_to(
    address: str, root: Path, live: bool, local_addresses: Sequence[str], loopback: str | None
) -> Route:
    """The interface the kernel sends ``address`` through."""
    if live and shutil.which("ip"):
        return _ip_route_get(address)
    return _table_lookup(address, root, local_addresses, loopback)


def _ip_route_get(address: str) -> Route:
    try:
        out = subprocess.run(
            ["ip", "-j", "route", "get", address],
            capture_output=True,
            text=True,
            timeout=ROUTE_DEADLINE_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Route(address, error=f"ip route get: {exc}")
    if out.returncode != 0:
        return Route(address, error=out.stderr.strip() or f"ip route get exited {out.returncode}")
    try:
        (answer, *_) = json.loads(out.stdout)
        return Route(
            address,
            interface=answer.get("dev"),
            source=answer.get("prefsrc"),
            gateway=answer.get("gateway"),
        )
    except (ValueError, TypeError, AttributeError) as exc:
        return Route(address, error=f"unreadable `ip -j route get` output: {exc}")


def _table_lookup(
    address: str, root: Path, local_addresses: Sequence[str], loopback: str | None
) -> Route:
    """Longest prefix, then lowest metric, over the captured main table."""
    target = ipaddress.ip_address(address)
    own = {a.split("/")[0] for a in local_addresses}
    if target.is_loopback or address in own:  # the local table answers before the main one
        return Route(address, interface=loopback, source=address, method="table")
    path = "/proc/net/route" if target.version == 4 else "/proc/net/ipv6_route"
    text = read_text(root, path)
    if text is None:
        return Route(address, error=f"{root}{path} is missing", method="table")
    rows = _ipv4_routes(text) if target.version == 4 else _ipv6_routes(text)
    best: tuple[int, int, str, str | None] | None = None
    for iface, net, gateway, metric, flags in rows:
        if not flags & _RTF_UP or flags & _RTF_REJECT or target not in net:
            continue
        key = (net.prefixlen, -metric)
        if best is None or key > best[:2]:
            best = (*key, iface, gateway if flags & _RTF_GATEWAY else None)
    if best is None:
        return Route(address, error="Network is unreachable (no matching route)", method="table")
    return Route(address, interface=best[2], gateway=best[3], method="table")


_Row = tuple[str, "ipaddress.IPv4Network | ipaddress.IPv6Network", str, int, int]


def _ipv4_routes(text: str) -> list[_Row]:
    """/proc/net/route (fib_route_seq_show): Iface Destination Gateway Flags RefCnt Use Metric
    Mask ..., addresses as little-endian hex (``010200C0`` is 192.0.2.1)."""
    rows = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        try:
            dest, gateway, mask = (_le_ip(f) for f in (fields[1], fields[2], fields[7]))
            net = ipaddress.ip_network(f"{dest}/{mask}", strict=False)
            rows.append((fields[0], net, gateway, int(fields[6]), int(fields[3], 16)))
        except (IndexError, ValueError, OverflowError):
            continue
    return rows


def _ipv6_routes(text: str) -> list[_Row]:
    """/proc/net/ipv6_route (ipv6_route_native_seq_show): dest plen src plen next_hop metric
    refcnt use flags devname, addresses as 32 hex digits, numbers in hex."""
    rows = []
    for line in text.splitlines():
        fields = line.split()
        try:
            dest = ipaddress.IPv6Address(int(fields[0], 16))
            net = ipaddress.IPv6Network(f"{dest}/{int(fields[1], 16)}", strict=False)
            gateway = str(ipaddress.IPv6Address(int(fields[4], 16)))
            rows.append((fields[9], net, gateway, int(fields[5], 16), int(fields[8], 16)))
        except (IndexError, ValueError, OverflowError):
            continue
    return rows


def _le_ip(hex_le: str) -> str:
    """A /proc/net/route address: little-endian hex."""
    return str(ipaddress.IPv4Address(int(hex_le, 16).to_bytes(4, "little")))


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text.split("%")[0])
        return True
    except ValueError:
        return False


def _ordered(addresses: list[str]) -> list[str]:
    return sorted(addresses, key=lambda a: ":" in a)
