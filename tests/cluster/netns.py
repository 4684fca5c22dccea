"""The tests' cluster: a NetLab (hosts in network namespaces on a bridge, 198.18.0.0/15 only)
running the real CLI, with each node's process, output and reports kept for the assertions.
Everything is removed in ``Lab.close``, which the fixture calls even when a test failed."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from nccldoctor.lab.netns import LabHost, NetLab, netlab_possible
from nccldoctor.lab.start import start_check

REPO = Path(__file__).resolve().parents[2]


def run_folder(out: Path, node: str) -> Path:
    """The folder of ``node``'s newest run under ``out``, by its own name (cluster/rundir.py):
    what the reports' paths say, where ``latest`` would be resolved by the next run."""
    return out / node / os.readlink(out / node / "latest")


def netns_available() -> bool:
    if not netlab_possible():
        return False
    try:
        NetLab(1, prefix="198.19.254").build().close()
    except Exception:
        return False
    return True


@dataclass
class Host:
    lab_host: LabHost
    net: NetLab

    @property
    def name(self) -> str:
        return self.lab_host.name

    @property
    def address(self) -> str:
        return self.lab_host.address

    def exec(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.net.exec(self.lab_host, *args, check=check)

    def write_etc(self, name: str, text: str) -> None:
        """This host's own /etc/NAME (e.g. hosts), seen by every process started in it."""
        self.net.write_etc(self.lab_host, name, text)

    def set_mtu(self, mtu: int) -> None:
        """This host's eth0 only. Its veth peer on the bridge keeps 1500, as a switch port that
        never got jumbo frames: it drops bigger frames without a word (no ICMP).

        One segment per packet (gso_max_segs 1): a veth hands a GSO super-packet to its peer
        whole, and the peer's MTU check waves GSO through; a NIC cuts it into MSS-sized frames
        before the wire, which is what the switch port sees, and so does the peer now."""
        self.exec("ip", "link", "set", "eth0", "mtu", str(mtu), "gso_max_segs", "1")


@dataclass
class NodeRun:
    host: Host
    proc: subprocess.Popen
    out: Path
    started: float
    ended: float | None = None
    stdout: str = ""
    stderr: str = ""

    @property
    def rc(self) -> int | None:
        return self.proc.returncode

    @property
    def elapsed(self) -> float:
        return (self.ended or time.monotonic()) - self.started

    @property
    def run_dir(self) -> Path:
        """This run's own folder (its node's newest under ``out``)."""
        return run_folder(self.out, self.host.name)

    def node_report(self) -> dict:
        return json.loads((self.run_dir / f"check-{self.host.name}.json").read_text())

    def cluster_report(self) -> dict:
        return json.loads((self.run_dir / "check-cluster.json").read_text())


@dataclass
class Lab:
    reports: Path  # each node's --out goes under it
    subnet: int = field(default_factory=lambda: 20 + secrets.randbelow(200))  # never 17 (docker0)
    hosts: list[Host] = field(default_factory=list)
    runs: list[NodeRun] = field(default_factory=list)
    net: NetLab | None = None

    @property
    def tag(self) -> str:
        return self.net.tag if self.net else ""

    def build(self, n: int, **docker: object) -> Lab:
        """``docker``: NetLab's docker, publish and hostname (one Docker container per host)."""
        self.net = NetLab(n, prefix=f"198.18.{self.subnet}", **docker)  # type: ignore[arg-type]
        self.net.build()
        self.hosts = [Host(h, self.net) for h in self.net.hosts]
        return self

    def start(
        self,
        host: Host,
        args: list[str],
        out: Path,
        env: dict | None = None,
        shm_size: str | None = None,
        hostname: str | None = None,
        command: str = "check",
    ) -> NodeRun:
        """`nccldoctor COMMAND --out OUT ARGS` inside ``host``'s namespace, with ``env`` on top
        of the lab's (on a /dev/shm of ``shm_size``, under ``hostname``: see NetLab.popen)."""
        proc = start_check(args, out=out, node_name=host.name, env=os.environ, extra_env=env,
                           lab=self.net, host=host.lab_host, shm_size=shm_size, hostname=hostname,
                           command=command,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        run = NodeRun(host, proc, out, time.monotonic())
        self.runs.append(run)
        return run

    def wait(self, runs: list[NodeRun], timeout: float) -> None:
        """Wait for every run; a run still going at ``timeout`` is killed (and the test fails)."""
        deadline = time.monotonic() + timeout
        for run in runs:
            try:
                run.stdout, run.stderr = run.proc.communicate(
                    timeout=max(0.1, deadline - time.monotonic())
                )
            except subprocess.TimeoutExpired:
                os.killpg(run.proc.pid, signal.SIGKILL)
                run.stdout, run.stderr = run.proc.communicate()
            run.ended = run.ended or time.monotonic()

    def kill_host(self, host: Host) -> None:
        self.net.kill_host(host.lab_host)

    def close(self) -> None:
        for run in self.runs:
            if run.proc.poll() is None:
                with contextlib.suppress(OSError):
                    os.killpg(run.proc.pid, signal.SIGKILL)
                run.proc.communicate()
        if self.net:
            self.net.close()
