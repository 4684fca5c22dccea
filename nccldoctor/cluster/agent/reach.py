"""Reach: can this node get to the master? Resolve it, ask the kernel for the route, connect.

Three answers are compared later (findings): the interface the kernel routes through, the one
NCCL's own selection picks (bootstrap probe) and the one the user forced. Every loop here runs
until a monotonic deadline and no further.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from nccldoctor.meet import is_local  # noqa: F401  (the agent imports it from here)
from nccldoctor.probes.netpath import hosts_entries


@dataclass
class ReachResult:
    master: str
    addresses: list[str] = field(default_factory=list)
    resolve_error: str | None = None
    hosts_lines: list[str] = field(default_factory=list)  # /etc/hosts lines naming the master
    interface: str | None = None  # the kernel's route to the master goes out here
    source: str | None = None  # with this source address: what this node advertises
    connected: bool = False
    attempts: int = 0
    error: str | None = None  # the last connect error
    refused: int = 0  # attempts answered with RST: the host is there, nobody listens (yet)
    timed_out: int = 0  # attempts that got no answer at all: a firewall dropping, or no route
    elapsed_s: float = 0.0

    @property
    def loopback(self) -> bool:
        """The master resolved, and only to loopback addresses (127.0.1.1, ::1)."""
        return bool(self.addresses) and all(
            ipaddress.ip_address(a.split("%")[0]).is_loopback for a in self.addresses
        )


def resolve(master: str) -> tuple[list[str], str | None]:
    """IPv4 addresses of ``master`` and the resolver's error, if any."""
    try:
        infos = socket.getaddrinfo(master, None, socket.AF_INET, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        return [], f"{master}: {exc}"
    return sorted({info[4][0] for info in infos}), None


def route_to(address: str) -> tuple[str | None, str | None]:
    """(interface, source address) the kernel picks for ``address``.

    A connected UDP socket makes the kernel do the route lookup (no packet is sent); the source
    address it chose names the interface.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((address, 9))
        except OSError:
            return None, None
        source = probe.getsockname()[0]
    return interface_of(source), source


def interface_of(address: str) -> str | None:
    """The local interface holding ``address``."""
    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == address for a in addrs):
            return name
    return None


def locate(master: str, root: Path = Path("/")) -> ReachResult:
    """Resolve ``master`` (and quote ``/etc/hosts`` on it) and ask the kernel for the route;
    no packet is sent."""
    result = ReachResult(master)
    result.addresses, result.resolve_error = resolve(master)
    result.hosts_lines = [line for _, names, line in hosts_entries(root) if master in names]
    if result.addresses:
        result.interface, result.source = route_to(result.addresses[0])
    return result


def connect(result: ReachResult, port: int, deadline: float, retry_s: float = 0.5) -> ReachResult:
    """TCP-connect to the located master's ``port``, retrying until ``deadline`` (monotonic)."""
    start = time.monotonic()
    address = result.addresses[0]
    while True:
        result.attempts += 1
        left = deadline - time.monotonic()
        exc = connect_once(address, port, max(0.2, min(3.0, left)))
        if exc is None:
            result.connected = True
            result.error = None
            break
        if isinstance(exc, TimeoutError):
            result.timed_out += 1
            result.error = f"connect to {address}:{port} timed out ({exc or 'no answer'})"
        else:
            result.refused += exc.errno == errno.ECONNREFUSED
            result.timed_out += exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH)
            result.error = f"connect to {address}:{port}: {exc.strerror or exc}"
        if time.monotonic() + retry_s >= deadline:
            break
        time.sleep(retry_s)
    result.elapsed_s = time.monotonic() - start
    return result


def still_listening(address: str, port: int, timeout_s: float = 2.0) -> str | None:
    """One TCP connect to ``address:port``: None when something answers, else the error."""
    exc = connect_once(address, port, timeout_s)
    if exc is None:
        return None
    if isinstance(exc, TimeoutError):
        return f"connect to {address}:{port} timed out after {timeout_s:.0f} s"
    return f"connect to {address}:{port}: {exc.strerror or exc}"


def connect_once(address: str, port: int, timeout_s: float) -> OSError | None:
    """One TCP connect with a deadline, closed at once: None when something answered."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return exc


def local_interfaces() -> dict[str, list[str]]:
    """Every local interface with its IPv4 addresses (empty list: none)."""
    import psutil

    return {
        name: [a.address for a in addrs if a.family == socket.AF_INET]
        for name, addrs in psutil.net_if_addrs().items()
    }
