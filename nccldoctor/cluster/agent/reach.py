"""Reach: can this node get to the master? Where it is (the network probe resolved it and asked
the kernel for the route), then connect.

Three answers are compared later (findings): the interface the kernel routes through, the one
NCCL's own selection picks (bootstrap probe) and the one the user forced. Every loop here runs
until a monotonic deadline and no further.
"""

from __future__ import annotations

import errno
import socket
import time

from nccldoctor.facts.network import NetworkFacts
from nccldoctor.facts.run import ReachResult


def locate(network: NetworkFacts) -> ReachResult:
    """Where the master is, from what the network probe read of it (``network.master`` resolved
    through netpath with a deadline, /etc/hosts's lines naming it, the kernel's route); no
    packet is sent."""
    master = network.master or ""
    result = ReachResult(master, resolve_error=network.master_resolve_error)
    result.addresses = [a for a in network.master_addresses if ":" not in a]  # the store is IPv4
    if network.master_addresses and not result.addresses:
        result.resolve_error = f"{master} resolves to no IPv4 address"
    result.hosts_lines = list(network.master_hosts_entries)
    route = network.route_to_master
    if result.addresses and route is not None and not route.error:
        result.source = route.source
        # The interface holding the source: on the master, the kernel routes its own address
        # through lo, yet what it advertises lives on the interface that holds it.
        holder = next(
            (
                i.name
                for i in network.interfaces
                if any(a.split("/")[0] == route.source for a in i.ipv4)
            ),
            None,
        )
        result.interface = holder or route.interface
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
