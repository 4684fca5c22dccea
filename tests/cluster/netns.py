"""Hosts in Linux network namespaces on one bridge (198.18.0.0/15 only), running the real CLI.

Every name carries a random ``ca`` tag, so parallel helpers and reruns never collide, and
``Lab.close`` removes all of it (processes, namespaces, bridge) even when a test failed.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, check=check, timeout=30)


def netns_available() -> bool:
    if os.geteuid() != 0:
        return False
    probe = f"ca{secrets.token_hex(3)}"
    try:
        sh("ip", "netns", "add", probe)
    except (OSError, subprocess.SubprocessError):
        return False
    sh("ip", "netns", "del", probe, check=False)
    return True


@dataclass
class Host:
    name: str  # the node name the agent reports (--node-name)
    ns: str
    address: str
    lab: Lab

    def exec(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return sh("ip", "netns", "exec", self.ns, *args, check=check)


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

    def node_report(self) -> dict:
        return json.loads((self.out / f"check-{self.host.name}.json").read_text())

    def cluster_report(self) -> dict:
        return json.loads((self.out / "check-cluster.json").read_text())


@dataclass
class Lab:
    """A bridge and ``n`` hosts 198.18.<subnet>.1.., each in its own namespace."""

    tag: str = field(default_factory=lambda: f"ca{secrets.token_hex(2)}")
    subnet: int = field(default_factory=lambda: 20 + secrets.randbelow(200))
    hosts: list[Host] = field(default_factory=list)
    runs: list[NodeRun] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"{self.tag}br"

    def build(self, n: int) -> Lab:
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "link", "set", self.bridge, "up")
        for i in range(n):
            ns, outside, inside = f"{self.tag}n{i}", f"{self.tag}h{i}", f"{self.tag}p{i}"
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
            sh("ip", "link", "set", outside, "master", self.bridge, "up")
            sh("ip", "link", "set", inside, "netns", ns)
            host = Host(f"node{i}", ns, f"198.18.{self.subnet}.{i + 1}", self)
            host.exec("ip", "link", "set", inside, "name", "eth0")
            host.exec("ip", "addr", "add", f"{host.address}/24", "dev", "eth0")
            host.exec("ip", "link", "set", "eth0", "up")
            host.exec("ip", "link", "set", "lo", "up")
            self.hosts.append(host)
        return self

    def start(self, host: Host, args: list[str], out: Path, env: dict | None = None) -> NodeRun:
        """``python -m nccldoctor check ARGS`` inside ``host``'s namespace."""
        full_env = {**os.environ, "PYTHONPATH": str(REPO), "NCCLDOCTOR_NODE_NAME": host.name,
                    **(env or {})}  # fmt: skip
        for name in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "NCCLDOCTOR_FAULT"):
            if env is None or name not in env:
                full_env.pop(name, None)
        proc = subprocess.Popen(
            ["ip", "netns", "exec", host.ns, sys.executable, "-m", "nccldoctor", "check",
             "--out", str(out), *args],
            env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True,
        )  # fmt: skip
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
        """The node dies: every process in its namespace gets SIGKILL."""
        pids = sh("ip", "netns", "pids", host.ns, check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                continue

    def close(self) -> None:
        for run in self.runs:
            if run.proc.poll() is None:
                try:
                    os.killpg(run.proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                run.proc.communicate()
        for host in self.hosts:
            self.kill_host(host)
            sh("ip", "netns", "del", host.ns, check=False)
        sh("ip", "link", "del", self.bridge, check=False)
