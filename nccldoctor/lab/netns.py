"""Hosts in Linux network namespaces on one bridge: the demo's (and the tests') cluster on one box.

Addresses come from 198.18.0.0/15 only (RFC 2544 benchmarking space), names carry a short tag so
that several labs can coexist, and ``close`` removes everything it made (processes in the
namespaces, the namespaces, the bridge) even after a failure; it is safe to call twice.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import shlex
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_TEST_NET = ipaddress.ip_network("198.18.0.0/15")


class NetLabError(RuntimeError):
    """The lab could not be built (no root, no ``ip``, a kernel without namespaces)."""


def netlab_possible() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None


@dataclass
class LabHost:
    name: str
    ns: str
    address: str


@dataclass
class NetLab:
    """``nodes`` hosts ``<prefix>.1``, ``<prefix>.2`` … on a bridge; ``eth0`` in each."""

    nodes: int
    prefix: str = "198.18.7"  # the /24 the hosts live in
    tag: str = field(default_factory=lambda: f"ca{secrets.token_hex(2)}")
    hosts: list[LabHost] = field(default_factory=list)
    _made: list[tuple[str, str]] = field(default_factory=list)  # ("ns"|"link"|"etc", name)

    def __post_init__(self) -> None:
        if not ipaddress.ip_network(f"{self.prefix}.0/24").subnet_of(_TEST_NET):
            raise NetLabError(f"{self.prefix}.0/24 is outside 198.18.0.0/15")
        if not 1 <= self.nodes <= 250:
            raise NetLabError(f"{self.nodes} nodes: between 1 and 250")

    @property
    def bridge(self) -> str:
        return f"{self.tag}br"

    def build(self) -> NetLab:
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self._made.append(("link", self.bridge))
            _ip("link", "set", self.bridge, "up")
            for i in range(self.nodes):
                ns, outside, inside = f"{self.tag}n{i}", f"{self.tag}h{i}", f"{self.tag}p{i}"
                _ip("netns", "add", ns)
                self._made.append(("ns", ns))
                _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
                _ip("link", "set", outside, "master", self.bridge, "up")
                _ip("link", "set", inside, "netns", ns)
                host = LabHost(f"node{i}", ns, f"{self.prefix}.{i + 1}")
                self.exec(host, "ip", "link", "set", inside, "name", "eth0")
                self.exec(host, "ip", "addr", "add", f"{host.address}/24", "dev", "eth0")
                self.exec(host, "ip", "link", "set", "eth0", "up")
                self.exec(host, "ip", "link", "set", "lo", "up")
                self.hosts.append(host)
        except (OSError, subprocess.SubprocessError) as exc:
            self.close()
            raise NetLabError(f"could not build the network namespaces: {exc}") from exc
        return self

    def exec(self, host: LabHost, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return _ip("netns", "exec", host.ns, *args, check=check)

    def popen(
        self,
        host: LabHost,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        shm_size: str | None = None,
        hostname: str | None = None,
        **kwargs: object,
    ) -> subprocess.Popen:
        """Start ``argv`` inside ``host``'s namespace, in a session of its own; with ``shm_size``
        ("64m") on a /dev/shm tmpfs of that size, with ``hostname`` under that hostname (each in
        a namespace of the process's own, so the machine's are untouched)."""
        return subprocess.Popen(
            ["ip", "netns", "exec", host.ns, *isolated(argv, shm_size, hostname)],
            env=dict(env),
            start_new_session=True,
            **kwargs,
        )  # type: ignore[arg-type]

    def write_etc(self, host: LabHost, name: str, text: str) -> None:
        """A private ``/etc/<name>`` for ``host`` (``hosts``, ``resolv.conf``): ``ip netns exec``
        bind-mounts ``/etc/netns/<ns>/<name>`` over it for every process it starts."""
        folder = Path("/etc/netns") / host.ns
        if not folder.is_dir():
            folder.mkdir(parents=True)
            self._made.append(("etc", str(folder)))
        (folder / name).write_text(text)

    def kill_host(self, host: LabHost) -> None:
        """The node dies: every process in its namespace gets SIGKILL."""
        pids = _ip("netns", "pids", host.ns, check=False).stdout.split()
        for pid in pids:
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid), signal.SIGKILL)

    def close(self) -> None:
        for kind, name in reversed(self._made):
            if kind == "ns":
                self.kill_host(LabHost("", name, ""))
                _ip("netns", "del", name, check=False)
            elif kind == "etc":
                shutil.rmtree(name, ignore_errors=True)
            else:
                _ip("link", "del", name, check=False)
        self._made.clear()


def isolated(argv: Sequence[str], shm_size: str | None, hostname: str | None) -> list[str]:
    """``argv`` run through ``unshare``: a private mount namespace with a /dev/shm tmpfs of
    ``shm_size``, a UTS namespace named ``hostname``; ``argv`` itself when neither is asked."""
    if shm_size is None and hostname is None:
        return list(argv)
    flags, steps = [], []
    if shm_size is not None:
        flags += ["--mount", "--propagation", "private"]
        steps.append(f"mount -t tmpfs -o size={shlex.quote(shm_size)} tmpfs /dev/shm")
    if hostname is not None:
        flags.append("--uts")
        steps.append(f"hostname {shlex.quote(hostname)}")
    script = " && ".join([*steps, 'exec "$@"'])
    return ["unshare", *flags, "sh", "-c", script, "sh", *argv]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)
