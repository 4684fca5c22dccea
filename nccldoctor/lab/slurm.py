"""A real Slurm cluster on network-namespace hosts: the tests' and the benchmark's `srun`/`sbatch`.

One ``munged`` for all (its socket in the lab's folder, which every namespace sees: a pathname
Unix socket is found through the file system, not the network namespace), ``slurmctld`` in a
namespace of its own (the "login node", where ``srun`` and ``sbatch`` run too), and one
``slurmd -N nodeN`` per node namespace, each under ``unshare --uts --mount`` so that it and its
tasks see their own hostname and /dev/shm (its spool is ``%n``-named in the lab's folder).

The configuration is the smallest Slurm that runs tasks without systemd or a cgroup hierarchy of
its own: ``proctrack/linuxproc`` (finds a job's processes through /proc), ``task/none``, no
accounting, ``cgroup.conf`` naming ``cgroup/v1`` rather than leaving it to autodetection on a
hybrid hierarchy (docs/launch/slurm.md#the-lab). Addresses come from :class:`NetLab` (198.18.0.0/15).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nccldoctor.lab.netns import LabHost, NetLab, NetLabError
from nccldoctor.lab.start import check_env

DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sbatch")


def slurm_possible() -> bool:
    """root, ``ip``, and the distribution's slurm-wlm and munge (scripts/setup-tests.sh)."""
    return os.geteuid() == 0 and all(shutil.which(tool) for tool in ("ip", *DAEMONS))


@dataclass
class SlurmLab:
    """``nodes`` compute hosts ``node0``… and a controller host ``ctl`` on one bridge."""

    nodes: int
    folder: Path  # munge key and socket, slurm.conf, state, spools, logs
    prefix: str = "198.18.9"
    cpus: int = 8  # declared per node (config_overrides: the machine's own count does not matter)
    net: NetLab | None = None
    _procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.folder / "slurm.conf"

    @property
    def controller(self) -> LabHost:
        assert self.net is not None
        return self.net.hosts[-1]

    @property
    def compute(self) -> list[LabHost]:
        assert self.net is not None
        return self.net.hosts[:-1]

    def build(self, timeout: float = 60.0) -> SlurmLab:
        """Start munged, slurmctld and the slurmds; return once every node is idle."""
        self.net = NetLab(self.nodes + 1, prefix=self.prefix).build()
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._write_config()
            self._start_daemons()
            self._wait_idle(timeout)
        except BaseException:
            self.close()
            raise
        return self

    def env(self, base: Mapping[str, str], extra: Mapping[str, str] | None = None) -> dict:
        """The environment of ``srun``/``sbatch`` here: a check's (see ``check_env``, less the
        node name: each task's hostname is its node's) with this lab's ``SLURM_CONF``."""
        env = check_env(base, "", extra)
        del env["NCCLDOCTOR_NODE_NAME"]
        env["SLURM_CONF"] = str(self.conf)
        return env

    def popen(
        self, argv: Sequence[str], env: Mapping[str, str], **kwargs: object
    ) -> subprocess.Popen:
        """``argv`` (``srun …``, ``sbatch …``) on the controller host, in a session of its own."""
        assert self.net is not None
        return self.net.popen(self.controller, argv, env, **kwargs)

    def run(self, argv: Sequence[str], timeout: float = 30.0) -> subprocess.CompletedProcess:
        """A short Slurm command (``sinfo``, ``squeue``, ``scontrol``) on the controller host."""
        assert self.net is not None
        return subprocess.run(
            ["ip", "netns", "exec", self.controller.ns, *argv],
            env={**os.environ, "SLURM_CONF": str(self.conf)},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def settle(self, timeout: float = 60.0) -> None:
        """Ready for the next job: every job cancelled and gone, what its tasks left behind on
        the nodes killed (a worker whose task was SIGKILLed outlives it), each node's firewall
        and link shaping undone, and every node idle again."""
        assert self.net is not None
        deadline = time.monotonic() + timeout
        while jobs := self.run(["squeue", "-h", "-o", "%i"]).stdout.split():
            if time.monotonic() > deadline:
                raise NetLabError(f"jobs {jobs} still queued after {timeout:.0f} s")
            self.run(["scancel", *jobs])
            time.sleep(0.5)
        for host in self.compute:
            pids = subprocess.run(["ip", "netns", "pids", host.ns], capture_output=True,
                                  text=True, check=False).stdout.split()  # fmt: skip
            for pid in pids:
                with contextlib.suppress(OSError):
                    if b"SLURM_JOB_ID=" in Path(f"/proc/{pid}/environ").read_bytes():
                        os.kill(int(pid), signal.SIGKILL)
            self.net.exec(host, "iptables", "-F", "INPUT")
            self.net.exec(host, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
        self._wait_idle(max(1.0, deadline - time.monotonic()))

    def close(self) -> None:
        for proc in reversed(self._procs):
            if proc.poll() is None:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        self._procs.clear()
        if self.net is not None:
            self.net.close()  # also every task a slurmd left behind in a node's namespace

    def _write_config(self) -> None:
        folder = self.folder
        key = folder / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        for sub in ("state", "spool", "log", "munge"):
            (folder / sub).mkdir(exist_ok=True)
        # %n: each slurmd's own spool, pid file and log, under its -N name.
        nodes = "\n".join(
            f"NodeName={h.name} NodeAddr={h.address} NodeHostname={h.name} CPUs={self.cpus} "
            "State=UNKNOWN"
            for h in self.compute
        )
        names = ",".join(h.name for h in self.compute)
        self.conf.write_text(
            f"""ClusterName=lab
SlurmctldHost=ctl({self.controller.address})
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={folder / "munge" / "munge.socket"}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={folder / "state"}
SlurmdSpoolDir={folder / "spool"}/%n
SlurmctldPidFile={folder / "slurmctld.pid"}
SlurmdPidFile={folder / "spool"}/slurmd-%n.pid
SlurmctldLogFile={folder / "log" / "slurmctld.log"}
SlurmdLogFile={folder / "log"}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
KillWait=5
{nodes}
PartitionName=lab Nodes={names} Default=YES MaxTime=INFINITE State=UP
"""
        )
        (folder / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")
        hosts = "".join(f"{h.address} {h.name}\n" for h in self.compute)
        hosts += f"{self.controller.address} ctl\n127.0.0.1 localhost\n"
        assert self.net is not None
        for host in self.net.hosts:
            self.net.write_etc(host, "hosts", hosts)

    def _start_daemons(self) -> None:
        assert self.net is not None
        folder = self.folder
        munged = [
            "munged", "--foreground", "--force", f"--key-file={folder / 'munge.key'}",
            f"--socket={folder / 'munge' / 'munge.socket'}",
            f"--pid-file={folder / 'munge' / 'munged.pid'}",
            f"--seed-file={folder / 'munge' / 'munged.seed'}",
            f"--log-file={folder / 'log' / 'munged.log'}",
        ]  # fmt: skip
        self._spawn(None, munged, "munged")
        self._wait_for(folder / "munge" / "munge.socket", "munged's socket")
        ctl = ["slurmctld", "-D", "-i", "-f", str(self.conf)]
        self._spawn(self.controller, ctl, "slurmctld", hostname="ctl")  # SlurmctldHost's name
        for host in self.compute:
            (folder / "spool" / host.name).mkdir(exist_ok=True)
            slurmd = ["slurmd", "-D", "-N", host.name, "-f", str(self.conf)]
            self._spawn(host, slurmd, f"slurmd-{host.name}", shm_size="256m", hostname=host.name)

    def _spawn(self, host: LabHost | None, argv: list[str], log: str, **kwargs: object) -> None:
        """A daemon in the foreground, in ``host``'s namespace (here without one), its output
        in ``log/<log>.out``."""
        assert self.net is not None
        env = {**os.environ, "SLURM_CONF": str(self.conf)}
        with open(self.folder / "log" / f"{log}.out", "ab") as out:
            if host is None:
                proc = subprocess.Popen(argv, env=env, start_new_session=True, stdout=out,
                                        stderr=subprocess.STDOUT)  # fmt: skip
            else:
                proc = self.net.popen(host, argv, env, stdout=out, stderr=subprocess.STDOUT,
                                      **kwargs)  # fmt: skip
        self._procs.append(proc)

    def _wait_for(self, path: Path, what: str, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while not path.exists():
            self._fail_if_died()
            if time.monotonic() > deadline:
                raise NetLabError(f"{what} did not appear within {timeout:.0f} s")
            time.sleep(0.1)

    def _wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            self._fail_if_died()
            got = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=10)
            last = (got.stdout + got.stderr).strip()
            states = dict(
                line.split() for line in got.stdout.splitlines() if len(line.split()) == 2
            )
            if got.returncode == 0 and all(states.get(h.name) == "idle" for h in self.compute):
                return
            time.sleep(0.5)
        raise NetLabError(f"the Slurm nodes did not become idle within {timeout:.0f} s: {last}")

    def _fail_if_died(self) -> None:
        for proc in self._procs:
            if proc.poll() is not None:
                logs = "; ".join(
                    f"{p.name}: {p.read_text(errors='replace')[-400:]}"
                    for p in sorted((self.folder / "log").glob("*"))
                    if p.is_file()
                )
                raise NetLabError(f"{proc.args} exited with {proc.returncode}: {logs}")
