"""Hosts in Linux network namespaces on one bridge: the demo's (and the tests') cluster on one box.

Addresses come from 198.18.0.0/15 only (RFC 2544 benchmarking space), names carry a short tag so
that several labs can coexist, and ``close`` removes everything it made (processes in the
namespaces, the namespaces, the bridge, cgroups, mount points) even after a failure; it is safe
to call twice.

With ``docker`` every host runs one Docker container the way dockerd sets it up
(docs/docker.md#lab): "bridge" gives each host a ``docker0`` bridge on the same private subnet
and a container namespace with the same address behind MASQUERADE, the master's host publishing
``publish`` with DNAT (hairpin included, as ``--userland-proxy=false`` does); "host" runs the
container in the host's own namespace (``--network host``). Either way the container has its
own hostname (UTS namespace), a ``/.dockerenv`` in a private root (mount namespace) and a
``docker/<id>`` cgroup, the markers nccldoctor's container probe reads.
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
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_TEST_NET = ipaddress.ip_network("198.18.0.0/15")
# Each host's docker0 subnet: the same on every host, as Docker's 172.17.0.0/16 is.
DOCKER0_PREFIX = "198.18.17"
DOCKER_MODES = ("bridge", "host")


class NetLabError(RuntimeError):
    """The lab could not be built (no root, no ``ip``, a kernel without namespaces)."""


def netlab_possible(docker: bool = False) -> bool:
    tools = ("ip", "unshare", "iptables") if docker else ("ip",)
    return os.geteuid() == 0 and all(shutil.which(tool) for tool in tools)


@dataclass
class Container:
    """What makes a process on a lab host a Docker container's."""

    id: str  # 12 hex digits, as `docker ps` shows; the default hostname too
    hostname: str
    root: str  # an empty directory: the mount point of the container's private root
    cgroup: str  # its cgroup directory, named …/docker/<id> as dockerd's cgroupfs driver does
    address: str | None  # its address on docker0; None on the host's network


@dataclass
class LabHost:
    name: str
    ns: str  # where the node's processes run (the container's namespace on a bridge)
    address: str  # the host's address on the LAN
    host_ns: str = ""  # the host's own namespace (= ns unless a bridge container)
    container: Container | None = None


@dataclass
class NetLab:
    """``nodes`` hosts ``<prefix>.1``, ``<prefix>.2`` … on a bridge; ``eth0`` in each."""

    nodes: int
    prefix: str = "198.18.7"  # the /24 the hosts live in
    # names every namespace and link of the lab: "ca" + 6 hex digits + "h0" fits a link name's
    # 15 characters, and two labs on one machine (concurrent test runs) do not meet
    tag: str = field(default_factory=lambda: f"ca{secrets.token_hex(3)}")
    docker: str | None = None  # "bridge" | "host": one Docker container per host
    publish: Sequence[int] = ()  # ports the master's host (host 0) publishes (-p P:P)
    hostname: str | None = None  # every container's --hostname (else each its id)
    hosts: list[LabHost] = field(default_factory=list)
    # ("ns"|"link"|"etc"|"dir"|"cgroup", name)
    _made: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not ipaddress.ip_network(f"{self.prefix}.0/24").subnet_of(_TEST_NET):
            raise NetLabError(f"{self.prefix}.0/24 is outside 198.18.0.0/15")
        if not 1 <= self.nodes <= 250:
            raise NetLabError(f"{self.nodes} nodes: between 1 and 250")
        if self.docker not in (None, *DOCKER_MODES):
            raise NetLabError(f"docker={self.docker!r}: one of {', '.join(DOCKER_MODES)}")
        if self.docker and self.prefix == DOCKER0_PREFIX:
            raise NetLabError(f"{self.prefix}.0/24 is the containers' docker0 subnet")

    @property
    def bridge(self) -> str:
        return f"{self.tag}br"

    def build(self) -> NetLab:
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self._made.append(("link", self.bridge))
            _ip("link", "set", self.bridge, "up")
            for i in range(self.nodes):
                host = self._host(i)
                if self.docker:
                    self._container(host, i)
                self.hosts.append(host)
        except (OSError, subprocess.SubprocessError) as exc:
            self.close()
            raise NetLabError(f"could not build the network namespaces: {exc}") from exc
        return self

    def _host(self, i: int) -> LabHost:
        ns, outside, inside = f"{self.tag}n{i}", f"{self.tag}h{i}", f"{self.tag}p{i}"
        self._add_ns(ns)
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        self._made.append(("link", outside))  # a build that fails past here removes the pair
        _ip("link", "set", outside, "master", self.bridge, "up")
        _ip("link", "set", inside, "netns", ns)
        host = LabHost(f"node{i}", ns, f"{self.prefix}.{i + 1}", ns)
        run = self._in(ns)
        if self.docker:
            # A server's NIC is no veth end: the container probe takes a veth on the default
            # route for a bridge container. The host's LAN interface is a bridge "eth0" (an
            # interface of its own, as br0 on a hypervisor) with the veth as its port.
            run("ip", "link", "set", inside, "name", "lan0")
            run("ip", "link", "add", "eth0", "type", "bridge")
            run("ip", "link", "set", "lan0", "master", "eth0", "up")
        else:
            run("ip", "link", "set", inside, "name", "eth0")
        run("ip", "addr", "add", f"{host.address}/24", "dev", "eth0")
        run("ip", "link", "set", "eth0", "up")
        run("ip", "link", "set", "lo", "up")
        return host

    def _container(self, host: LabHost, i: int) -> None:
        """dockerd's work for one `docker run` on ``host`` (see the module docstring)."""
        cid = secrets.token_hex(6)
        cgroup = _make_cgroup(cid)
        self._made.append(("cgroup", cgroup))
        root = tempfile.mkdtemp(prefix=f"{self.tag}root{i}-")
        self._made.append(("dir", root))
        address = None
        if self.docker == "bridge":
            address = f"{DOCKER0_PREFIX}.2"
            host.ns = f"{self.tag}c{i}"
            self._add_ns(host.ns)
            outside, inside = f"{self.tag}v{i}", f"{self.tag}w{i}"
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            self._made.append(("link", outside))
            _ip("link", "set", outside, "netns", host.host_ns)
            _ip("link", "set", inside, "netns", host.ns)
            on_host, in_container = self._in(host.host_ns), self._in(host.ns)
            on_host("ip", "link", "add", "docker0", "type", "bridge")
            on_host("ip", "addr", "add", f"{DOCKER0_PREFIX}.1/24", "dev", "docker0")
            on_host("ip", "link", "set", "docker0", "up")
            on_host("ip", "link", "set", outside, "master", "docker0", "up")
            on_host("ip", "link", "set", outside, "type", "bridge_slave", "hairpin", "on")
            on_host("sysctl", "-qw", "net.ipv4.ip_forward=1")
            nat = ("iptables", "-w", "5", "-t", "nat", "-A")
            on_host(*nat, "POSTROUTING", "-s", f"{DOCKER0_PREFIX}.0/24", "!", "-o", "docker0",
                    "-j", "MASQUERADE")  # fmt: skip
            for port in self.publish if i == 0 else ():
                to, match = f"{address}:{port}", ("-p", "tcp", "--dport", str(port))
                local = ("-m", "addrtype", "--dst-type", "LOCAL", *match)
                on_host(*nat, "PREROUTING", *local, "-j", "DNAT", "--to-destination", to)
                on_host(*nat, "OUTPUT", "!", "-d", "127.0.0.0/8", *local, "-j", "DNAT",
                        "--to-destination", to)  # fmt: skip
                on_host(*nat, "POSTROUTING", "-s", address, "-d", address, *match,
                        "-j", "MASQUERADE")  # fmt: skip
            in_container("ip", "link", "set", inside, "name", "eth0")
            in_container("ip", "addr", "add", f"{address}/24", "dev", "eth0")
            in_container("ip", "link", "set", "eth0", "up")
            in_container("ip", "link", "set", "lo", "up")
            in_container("ip", "route", "add", "default", "via", f"{DOCKER0_PREFIX}.1")
        host.container = Container(cid, self.hostname or cid, root, cgroup, address)
        # dockerd writes each container's own hosts (its hostname → its address) and
        # resolv.conf. No DNS server is reachable on this LAN: without a local one, a reverse
        # lookup (TCPStore's of each client) fails at once instead of timing out for seconds.
        own = address or host.address
        self.write_etc(host, "hosts", f"127.0.0.1\tlocalhost\n{own}\t{host.container.hostname}\n")
        self.write_etc(host, "resolv.conf", "nameserver 127.0.0.1\n")

    def _add_ns(self, ns: str) -> None:
        _ip("netns", "add", ns)
        self._made.append(("ns", ns))

    def _in(self, ns: str) -> Callable[..., subprocess.CompletedProcess]:
        return lambda *args: _ip("netns", "exec", ns, *args)

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
        c = host.container
        if c is None:
            command = ["ip", "netns", "exec", host.ns, *isolated(argv, shm_size, hostname)]
        else:  # into the container's cgroup first: everything it starts stays there
            inner = isolated(argv, shm_size, hostname or c.hostname, root=c.root)
            command = ["sh", "-c", 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"', "sh",
                       c.cgroup, "ip", "netns", "exec", host.ns, *inner]  # fmt: skip
        return subprocess.Popen(
            command,
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
        """The node dies: every process in its namespaces gets SIGKILL."""
        for ns in dict.fromkeys([host.ns, host.host_ns or host.ns]):
            for pid in _ip("netns", "pids", ns, check=False).stdout.split():
                with contextlib.suppress(OSError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)

    def close(self) -> None:
        for kind, name in reversed(self._made):
            if kind == "ns":
                self.kill_host(LabHost("", name, ""))
                _ip("netns", "del", name, check=False)
            elif kind == "etc":
                shutil.rmtree(name, ignore_errors=True)
            elif kind == "dir":
                with contextlib.suppress(OSError):
                    os.rmdir(name)
            elif kind == "cgroup":
                _remove_cgroup(name)
            else:
                _ip("link", "del", name, check=False)
        self._made.clear()


# A container's root: a tmpfs whose top-level entries are the machine's own (each directory
# bound recursively, so every path and write is the real one), plus an empty /.dockerenv.
_CONTAINER_ROOT = '''mount -t tmpfs -o mode=755 tmpfs "$R" && for e in /* /.[!.]*; do
  n=${e#/}; { [ -e "$e" ] || [ -L "$e" ]; } && [ "$n" != .dockerenv ] || continue
  if [ -L "$e" ]; then ln -s "$(readlink "$e")" "$R/$n"
  elif [ -d "$e" ]; then mkdir "$R/$n" && mount --rbind "$e" "$R/$n"
  else : > "$R/$n" && mount --bind "$e" "$R/$n"; fi || exit 1
done && : > "$R/.dockerenv"'''


def isolated(
    argv: Sequence[str], shm_size: str | None, hostname: str | None, root: str | None = None
) -> list[str]:
    """``argv`` run through ``unshare``: a private mount namespace with a /dev/shm tmpfs of
    ``shm_size``, a UTS namespace named ``hostname``, a container's root mounted on the empty
    directory ``root``; ``argv`` itself when none is asked."""
    if shm_size is None and hostname is None and root is None:
        return list(argv)
    flags, steps, run = [], [], 'exec "$@"'
    if shm_size is not None or root is not None:
        flags += ["--mount", "--propagation", "private"]
    if shm_size is not None:
        steps.append(f"mount -t tmpfs -o size={shlex.quote(shm_size)} tmpfs /dev/shm")
    if hostname is not None:
        flags.append("--uts")
        steps.append(f"hostname {shlex.quote(hostname)}")
    if root is not None:
        steps.append(f"R={shlex.quote(root)} && {_CONTAINER_ROOT}")
        run = 'exec chroot "$R" sh -c \'cd "$0" && exec "$@"\' "$PWD" "$@"'
    script = " && ".join([*steps, run])
    return ["unshare", *flags, "sh", "-c", script, "sh", *argv]


def _make_cgroup(cid: str) -> str:
    """``<this process's cgroup>/docker/<cid>`` in the unified (v2) hierarchy: nested, so the
    container stays within whatever limits the caller runs under."""
    mounts = Path("/proc/self/mounts").read_text().splitlines()
    point = next((f.split()[1] for f in mounts if f.split()[2:3] == ["cgroup2"]), None)
    own = next((line[3:] for line in Path("/proc/self/cgroup").read_text().splitlines()
                if line.startswith("0::")), None)  # fmt: skip
    if point is None or own is None:
        raise OSError("no cgroup v2 hierarchy mounted (a container's cgroup goes there)")
    path = Path(point) / own.lstrip("/") / "docker" / cid
    path.mkdir(parents=True)
    return str(path)


def _remove_cgroup(path: str) -> None:
    """rmdir succeeds once the killed processes are gone (a moment after SIGKILL); the shared
    docker/ parent goes when no other lab still uses it."""
    for _ in range(50):
        try:
            os.rmdir(path)
            break
        except FileNotFoundError:
            break
        except OSError:
            time.sleep(0.1)
    with contextlib.suppress(OSError):
        os.rmdir(Path(path).parent)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)
