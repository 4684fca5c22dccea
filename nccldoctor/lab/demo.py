"""`nccldoctor demo`: the whole multi-node check on one machine.

As root, each node runs the real CLI (``python -m nccldoctor check``) in its own network
namespace on a bridge (198.18.7.0/24); without root, node agents share the loopback interface.
A scenario other than "plain" runs the check as users run it in Docker (docs/docker.md#lab):
"docker-bridge", one container per host on Docker's default bridge with the rendezvous ports
published on the master's host, each started with nothing but ``--master <that host>``;
"docker-host", the same containers on the host's network (the fix).
The namespaces are removed on every way out. Progress goes through a callback (no rich here).
Every node gets the same ``--out`` (as nodes sharing an NFS folder do) and the demo's own run
name, so the run's files are ``<out>/<node>/<run>/`` and what each node printed is
``<out>/<node>/<run>.log``: a rerun in the same folder reads nothing of the one before.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nccldoctor.cluster.rundir import cannot_write, new_run_name
from nccldoctor.cluster.timeouts import Timeouts
from nccldoctor.lab.netns import NetLab, NetLabError, netlab_possible
from nccldoctor.lab.start import free_port_pair, start_check
from nccldoctor.report import Report, load_report


@dataclass
class DemoResult:
    mode: str  # netns | loopback
    report: Report | None  # the master's cluster report
    report_path: Path
    node_logs: list[Path]
    exit_code: int


# scenario -> NetLab's docker mode
SCENARIOS = {"plain": None, "docker-bridge": "bridge", "docker-host": "host"}
PORT = 29400  # the store's; the master's listener is the next one


def run_demo(
    nodes: int,
    out: Path,
    check_args: Sequence[str],
    timeouts: Timeouts,
    env: Mapping[str, str],
    progress: Callable[[str], None] = lambda message: None,
    use_netns: bool | None = None,
    scenario: str = "plain",
) -> DemoResult:
    """Start ``nodes`` node agents, wait for them (bounded), and read the cluster report.

    Raises:
        NetLabError: the namespaces cannot be built.
        RunFolderError: ``out`` cannot be written to.
    """
    docker = SCENARIOS[scenario]
    asked_loopback = use_netns is False
    use_netns = netlab_possible(bool(docker)) if use_netns is None else use_netns
    if docker and not use_netns:
        raise NetLabError(f"the {scenario} scenario needs root, ip, unshare and iptables")
    run = new_run_name()
    logs = _node_logs(out, [f"node{i}" for i in range(nodes)], run)
    budget = (timeouts.reach + timeouts.rendezvous + timeouts.bootstrap + timeouts.workers_total()
              + timeouts.heartbeat + timeouts.exit_barrier + 60)  # fmt: skip
    lab = NetLab(nodes, docker=docker, publish=(PORT, PORT + 1)) if use_netns else None
    procs: list[subprocess.Popen] = []
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        if lab:
            progress(
                f"building {nodes} network namespaces on bridge {lab.bridge} (198.18.7.0/24)"
                + (f", one Docker container per host ({docker} network)" if docker else "")
            )
            lab.build()
            master, port = lab.hosts[0].address, PORT
        else:
            why = "--loopback" if asked_loopback else "no network namespaces here (root and ip)"
            progress(
                f"{why}: the node agents share the loopback interface; the check fails its "
                "master 127.0.0.1 as it would between real hosts (master.loopback)"
            )
            master, port = "127.0.0.1", free_port_pair()
        for i in range(nodes):
            name = f"node{i}"
            args = ["--master", master, "--nodes", str(nodes), "--port", str(port),
                    "--run-name", run, *([] if lab else ["--node-rank", str(i)]),
                    *check_args]  # fmt: skip
            with open(logs[i], "ab") as log:
                procs.append(start_check(args, out=out, node_name=name, env=env, lab=lab,
                                         host=lab.hosts[i] if lab else None, stdout=log,
                                         stderr=subprocess.STDOUT))  # fmt: skip
            progress(f"{name}: started (nccldoctor check {' '.join(args)})")
        _wait(procs, time.monotonic() + budget, progress, _PhaseLines(logs[0]))
    finally:
        for proc in procs:
            _end(proc)
        if lab:
            lab.close()
            progress("network namespaces removed")
        signal.signal(signal.SIGTERM, previous)
    path = out / "node0" / run / "check-cluster.json"
    try:
        report = load_report(path)
    except (OSError, ValueError):
        return DemoResult("netns" if lab else "loopback", None, path, logs, 3)
    return DemoResult("netns" if lab else "loopback", report, path, logs, report.exit_code)


def _node_logs(out: Path, names: Sequence[str], run: str) -> list[Path]:
    """Where each node's output goes, a first line written: a folder that cannot be written to
    (a file, read-only, full) is said before any namespace is built.

    Raises:
        RunFolderError: naming the folder and why.
    """
    logs = [out / name / f"{run}.log" for name in names]
    try:
        for log in logs:
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "x", encoding="utf-8") as f:
                f.write(f"nccldoctor demo: {log.parent.name} of run {run}\n")
    except OSError as exc:
        for written in logs:  # a full disk's empty logs: nothing to take for a run's
            with contextlib.suppress(OSError):
                written.unlink(missing_ok=True)
        raise cannot_write(out, log.parent, exc) from None
    return logs


class _PhaseLines:
    """The master's phase lines as its agent writes them to its output ("workers ...",
    "workers ok (3.1 s) ..."), read as they come: the demo's own live line shows where the run
    is, instead of half a minute of silence while a phase waits out its deadline."""

    _LAST = "cluster report:"  # the agent's last line before its report

    def __init__(self, path: Path) -> None:
        # past the demo's own first line, written before the node started
        self.path, self.offset, self.done = path, path.stat().st_size, False

    def new(self) -> list[str]:
        if self.done:
            return []
        try:
            with open(self.path, "rb") as log:
                log.seek(self.offset)
                data = log.read()
        except OSError:
            return []
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits
        self.offset += len(complete)
        shown = []
        for line in complete.decode("utf-8", "replace").splitlines():
            shown.append(line)
            if line.startswith(self._LAST):
                self.done = True
                break
        return shown


def _wait(
    procs: list[subprocess.Popen],
    deadline: float,
    progress: Callable[[str], None],
    phases: _PhaseLines,
) -> None:
    pending = list(enumerate(procs))
    while pending and time.monotonic() < deadline:
        for line in phases.new():
            progress(line)
        for item in list(pending):
            i, proc = item
            if proc.poll() is not None:
                progress(f"node{i}: exited with {proc.returncode}")
                pending.remove(item)
        if pending:  # the live line every half second; the first pending node's exit is sooner
            with contextlib.suppress(subprocess.TimeoutExpired):
                pending[0][1].wait(timeout=0.5)
    for i, _ in pending:
        progress(f"node{i}: still running at the demo's deadline; stopping it")


def _end(proc: subprocess.Popen) -> None:
    """SIGTERM (the agent writes its report), then SIGKILL after a few seconds."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait)
            return
        except (OSError, subprocess.TimeoutExpired):
            continue


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)
