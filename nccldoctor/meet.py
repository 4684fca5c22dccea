"""Where processes on several nodes meet: a torch TCPStore on the master, and who the master is.

`check`'s node agents and `watch`'s watchers both meet this way; neither imports the other.
torch is imported only when a store is made.
"""

from __future__ import annotations

import ipaddress
import socket
from datetime import timedelta
from typing import Any


class RendezvousError(RuntimeError):
    """The node could not join: the store was unreachable, the world never came, or no place."""


def is_local(address: str) -> bool:
    """Does this node own ``address``? (The master is the node that can bind to it.)"""
    try:
        if ipaddress.ip_address(address).is_loopback:
            return True
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((address, 0))
        return True
    except (OSError, ValueError):
        return False


def host_store(port: int, timeout_s: float) -> Any:
    """The master's TCPStore, listening on every interface at ``port``."""
    from torch.distributed import TCPStore

    return TCPStore(
        "127.0.0.1",
        port,
        is_master=True,
        wait_for_workers=False,
        timeout=timedelta(seconds=timeout_s),
    )


def connect_store(master: str, port: int, timeout_s: float) -> Any:
    from torch.distributed import TCPStore

    try:
        return TCPStore(master, port, is_master=False, timeout=timedelta(seconds=timeout_s))
    except Exception as exc:  # torch raises DistNetworkError/RuntimeError/TimeoutError
        raise RendezvousError(f"could not connect to the store at {master}:{port}: {exc}") from exc
