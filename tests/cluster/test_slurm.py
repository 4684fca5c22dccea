"""`nccldoctor check` launched by a real Slurm (munged, slurmctld, one slurmd per netns node).

``srun`` and ``sbatch`` run on the lab's controller host like on a login node; the assertions are
on the exit status a pipeline sees (srun's, a batch job's as ``sbatch --wait`` gives it), then on
the reports the tasks wrote.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nccldoctor.lab.slurm import SlurmLab, slurm_possible
from tests.cluster.test_check_netns import EXPIRE_S, FAST, HEALTHY_DEADLINE, STALL_S, WAIT

pytestmark = [pytest.mark.netns, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def slurm_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmLab]:
    """One Slurm for the module's jobs, run one after another as on a cluster."""
    if not slurm_possible():
        pytest.skip("needs root, ip netns and slurm-wlm + munge (scripts/setup-tests.sh)")
    folder = tmp_path_factory.mktemp("slurm")
    lab = SlurmLab(2, folder, prefix=f"198.18.{20 + secrets.randbelow(200)}")
    try:
        yield lab.build()
    finally:
        lab.close()


@pytest.fixture
def slurm(slurm_lab: SlurmLab) -> Iterator[SlurmLab]:
    """The module's Slurm, left for the next test as it was found: no job, no firewall."""
    yield slurm_lab
    slurm_lab.settle()


def run(lab: SlurmLab, argv: list[str], cwd: Path, extra: dict | None = None):
    proc = lab.popen(argv, lab.env(os.environ, extra), cwd=cwd, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=HEALTHY_DEADLINE + WAIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return proc.returncode, out, err


def sbatch(lab: SlurmLab, script: str, cwd: Path, extra: dict | None = None) -> tuple[int, str]:
    """Submit ``script`` and wait for it to end: (its exit code, sbatch's stderr), as
    ``sbatch --wait`` gives them. Polled every half second: ``sbatch --wait`` asks the controller
    2, 10 and 42 s after the submission, so a job done in 20 s returned at 42."""
    proc = lab.popen(["sbatch", "--parsable", script], lab.env(os.environ, extra), cwd=cwd,
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    out, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 0, err
    job = out.strip().split(";")[0]
    deadline, fields = time.monotonic() + HEALTHY_DEADLINE + WAIT, {}
    while time.monotonic() < deadline:
        shown = lab.run(["scontrol", "-o", "show", "job", job]).stdout
        fields = dict(item.split("=", 1) for item in shown.split() if "=" in item)
        if fields.get("JobState") in JOB_ENDED:
            return int(fields["ExitCode"].split(":")[0]), err
        time.sleep(0.5)
    lab.run(["scancel", job])
    pytest.fail(f"job {job} still {fields.get('JobState')} after {HEALTHY_DEADLINE + WAIT:.0f} s")


JOB_ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
             "BOOT_FAIL", "DEADLINE", "PREEMPTED"}  # fmt: skip


def srun_check(
    lab: SlurmLab, out: Path, *extra: str, per_node: int = 1, env: dict | None = None
) -> tuple[int, str, str]:
    argv = ["srun", "-N2", f"--ntasks-per-node={per_node}", "--label", "python", "-m",
            "nccldoctor", "check", "--out", str(out), *FAST, *extra]  # fmt: skip
    return run(lab, argv, out.parent, env)


def reported_by(out: str) -> list[int]:
    """The tasks (``srun --label``'s prefix) that printed a report's path."""
    return sorted({int(task) for task in re.findall(r"^\s*(\d+): Report: ", out, re.M)})


def firewall_ephemeral_ports(lab: SlurmLab, host: int) -> None:
    """Node ``host`` drops new TCP connections except to slurmd and the check's two ports."""
    for rule in (["-i", "lo", "-j", "ACCEPT"],
                 ["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
                 ["-p", "tcp", "--dport", "6818", "-j", "ACCEPT"],  # slurmd's own port
                 ["-p", "tcp", "--dport", "29400:29401", "-j", "ACCEPT"],
                 ["-p", "tcp", "--syn", "-j", "DROP"]):  # fmt: skip
        assert lab.net is not None
        lab.net.exec(lab.compute[host], "iptables", "-A", "INPUT", *rule)


def reports(out: Path) -> dict[str, dict]:
    """Every report under ``out`` by its name: the nodes' newest runs (``latest``), and the
    run folders of the tasks other than local rank 0, where such a task writes its own."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*/*/check-*.json"))}


def test_srun_two_tasks_per_node_healthy(slurm, tmp_path):
    rc, out, err = srun_check(slurm, tmp_path / "out", per_node=2)
    assert rc == 0, err[-3000:]
    found = reports(tmp_path / "out")
    assert sorted(found) == ["check-cluster", "check-node0", "check-node1"]
    ranks = found["check-cluster"]["ranks"]
    # No flag given: the master, the nodes and each task's rank come from Slurm's variables.
    # Each task is the rank srun gave it (SLURM_PROCID), two per node, none forked twice.
    assert [(r["rank"], r["node"], r["local_rank"], r["state"]) for r in ranks] == [
        (0, "node0", 0, "ok"), (1, "node0", 1, "ok"), (2, "node1", 0, "ok"), (3, "node1", 1, "ok"),
    ]  # fmt: skip
    assert reported_by(out) == [0, 1, 2, 3]  # every task showed the verdict and exited 0


def test_srun_two_tasks_per_node_with_a_firewalled_node(slurm, tmp_path):
    # The fault under srun once, with the tasks per node that make the launch harder: one task
    # per node meets it the same way (its launch is the docs' sbatch script's, which meets it too)
    firewall_ephemeral_ports(slurm, 1)
    out = tmp_path / "out"
    rc, stdout, err = srun_check(slurm, out, "--phase-timeout", f"init={EXPIRE_S}", per_node=2)
    assert rc == 1, err[-3000:]  # every task exits with the check's verdict, none with its own
    blocked = [f["node"] for f in reports(out)["check-node1"]["findings"]
               if f["id"] == "run.ephemeral-port-blocked"]  # fmt: skip
    assert blocked == ["node1"]
    assert reports(out)["check-cluster"]["exit_code"] == 1
    assert reported_by(stdout) == [0, 1, 2, 3]


def task_pid(procid: int, out: Path) -> int | None:
    """The pid of the check's task ``procid`` (SLURM_PROCID) writing to ``out``: the oldest
    such process, not the worker a local rank 0 forked (it inherits the task's env)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if str(out).encode() in argv and f"SLURM_PROCID={procid}".encode() in environ:
            found.append(int(proc.name))
    return min(found, default=None)


def kill_when_in(
    out: Path, procid: int, node: str, phase: str, timeout: float, sig: int = signal.SIGTERM
) -> int | None:
    """``sig`` to task ``procid`` once its rank's events say it entered ``phase``; its pid."""
    events = out / node / "latest" / f"rank{procid}" / "events.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if f'"phase": "{phase}", "status": "start"' in events.read_text():
                pid = task_pid(procid, out)
                if pid is not None:
                    os.kill(pid, sig)
                return pid
        time.sleep(0.2)
    return None


def test_srun_task_killed_mid_run_every_other_task_reports_it(slurm, tmp_path):
    # Bad input: rank 3 (node1's second task) gets SIGTERM in the DDP step, as from scancel or
    # srun's time limit; held there by a hang so that the signal lands mid-collective. The
    # others' DDP step waits for it in vain until STALL_S (gloo's timeout first, as before).
    out = tmp_path / "out"
    stalls = [f"--phase-timeout={name}={STALL_S}" for name in ("ddp", "collective")]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        killed = pool.submit(kill_when_in, out, 3, "node1", "ddp", HEALTHY_DEADLINE)
        started = time.monotonic()
        rc, stdout, err = srun_check(slurm, out, *stalls, per_node=2,
                                     env={"NCCLDOCTOR_FAULT": "hang:ddp:rank=3"})  # fmt: skip
        elapsed = time.monotonic() - started
    assert killed.result() is not None, err[-3000:]
    assert rc in (1, 3), err[-3000:]
    cluster = reports(out)["check-cluster"]
    assert rc == cluster["exit_code"]  # every task, the killed one too, exits with the verdict
    assert reported_by(stdout) == [0, 1, 2, 3], stdout[-3000:]
    row = next(r for r in cluster["ranks"] if r["rank"] == 3)
    assert (row["node"], row["phase_reached"]) == ("node1", "ddp")
    assert "stopped by SIGTERM" in row["error"]
    assert cluster["hang"]["verdict"].startswith(
        "rank 3 on node node1 failed in ddp: stopped by SIGTERM"
    ), cluster["hang"]
    assert elapsed < HEALTHY_DEADLINE, elapsed  # the survivors' deadlines, not srun's patience


def scancel_when_in(lab: SlurmLab, out: Path, node: str, rank: int, phase: str) -> float | None:
    """``scancel`` the lab's job once rank ``rank`` entered ``phase``; when (time.time())."""
    events = out / node / "latest" / f"rank{rank}" / "events.jsonl"
    deadline = time.monotonic() + HEALTHY_DEADLINE
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if f'"phase": "{phase}", "status": "start"' in events.read_text():
                jobs = lab.run(["squeue", "-h", "-o", "%i"]).stdout.split()
                sent = time.time()
                lab.run(["scancel", *jobs])
                return sent
        time.sleep(0.2)
    return None


def test_scancel_mid_run_every_task_writes_its_report_before_the_kill(slurm, tmp_path):
    # scancel: SIGTERM to every task, SIGKILL KillWait (5 s in the lab) later.
    out = tmp_path / "out"
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        sent = pool.submit(scancel_when_in, slurm, out, "node1", 3, "ddp")
        rc, stdout, err = srun_check(slurm, out, per_node=2,
                                     env={"NCCLDOCTOR_FAULT": "hang:ddp:rank=3"})  # fmt: skip
    scancelled = sent.result()
    assert scancelled is not None, err[-3000:]
    assert rc != 0
    found = reports(out)
    assert sorted(found) == ["check-cluster", "check-node0", "check-node1"], sorted(found)
    for name in ("check-node0", "check-node1"):
        assert found[name]["run"]["aborted"] == "interrupted by SIGTERM"
        (path,) = out.glob(f"*/latest/{name}.json")
        assert path.stat().st_mtime < scancelled + 5  # before the SIGKILL
    ranks = {r["rank"]: r for r in found["check-node1"]["ranks"]}
    assert "stopped by SIGTERM" in ranks[3]["error"], ranks[3]
    assert reported_by(stdout) == [0, 1, 2, 3], stdout[-3000:]


def test_srun_local_rank_0_killed_its_other_task_reports_it(slurm, tmp_path):
    # Bad input: node1's first task (local rank 0, its node agent) dies without a word in the
    # DDP step. Its second task hears it from the closed connection, writes its own report
    # naming it and exits 3; node0's tasks name node1 as lost. What only waits for the lost
    # node ends at STALL_S: the DDP step (gloo's timeout first, as under --timeout alone) and
    # the master's exit barrier, which has nothing to wait for but the lost node (EXPIRE_S).
    out = tmp_path / "out"
    stalls = [f"--phase-timeout={name}={STALL_S}" for name in ("ddp", "collective")]
    stalls.append(f"--phase-timeout=exit_barrier={EXPIRE_S}")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        killed = pool.submit(kill_when_in, out, 2, "node1", "ddp", HEALTHY_DEADLINE,
                             signal.SIGKILL)  # fmt: skip
        started = time.monotonic()
        rc, stdout, err = srun_check(slurm, out, *stalls, per_node=2,
                                     env={"NCCLDOCTOR_FAULT": "hang:ddp:rank=2"})  # fmt: skip
        elapsed = time.monotonic() - started
    assert killed.result() is not None, err[-3000:]
    found = reports(out)
    own = found["check-node1-rank3"]
    assert own["exit_code"] == 3
    assert own["run"]["aborted"].startswith(
        "rank 3 (local rank 1 on node1): local rank 0 of this node ended (its connection closed)"
    ), own["run"]["aborted"]
    assert [f["id"] for f in own["findings"] if f["severity"] == "fail"] == ["run.incomplete"]
    assert "node1" in json.dumps(found["check-cluster"]["hang"])  # the master names it lost
    assert reported_by(stdout) == [0, 1, 3], stdout[-3000:]
    assert rc != 0
    assert elapsed < HEALTHY_DEADLINE, elapsed


def docs_script() -> str:
    """The sbatch script of docs/launch/slurm.md, as written there."""
    text = (REPO / "docs" / "launch" / "slurm.md").read_text()
    return re.search(r"```bash\n(#!/bin/bash\n#SBATCH.*?)```", text, re.S).group(1)


def lab_script(script: str) -> str:
    """The docs' script on the lab: no GPUs to request, one torchrun worker per node (the
    machine has two cores), and 8 CPUs per node."""
    script = re.sub(r"#SBATCH --gpus-per-node=\d+\n", "", script)
    script = script.replace("--cpus-per-task=32", "--cpus-per-task=8")
    assert "--nproc-per-node 8" in script
    return script.replace("--nproc-per-node 8", "--nproc-per-node 1")


TRAIN = "import os\nprint('trained on', os.environ['GROUP_RANK'], flush=True)\n"


@pytest.mark.parametrize("broken", [False, True], ids=["healthy", "firewalled-node"])
def test_sbatch_script_of_the_docs(slurm, tmp_path, broken):
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "job.sh").write_text(lab_script(docs_script()))
    if broken:
        firewall_ephemeral_ports(slurm, 1)
    # The script passes no timeouts: the check reads them from the job's environment.
    timeouts = {"NCCLDOCTOR_TIMEOUT": str(WAIT), "NCCLDOCTOR_TIMEOUT_BANDWIDTH_BUDGET": "2",
                "NCCLDOCTOR_TIMEOUT_SETTLE": "2"}  # fmt: skip
    if broken:  # init waits in vain on the firewalled node's ports
        timeouts["NCCLDOCTOR_TIMEOUT_INIT"] = str(EXPIRE_S)
    rc, err = sbatch(slurm, "job.sh", tmp_path, timeouts)
    log = next(tmp_path.glob("ddp-*.out")).read_text()
    if broken:
        assert rc == 1, log[-3000:]
        assert "nccldoctor found problems (report above); not starting training" in log
        assert "trained on" not in log
    else:
        assert rc == 0, (err, log[-3000:])
        assert sorted(re.findall(r"trained on (\d)", log)) == ["0", "1"]
    found = reports(tmp_path / "nccldoctor-check")
    assert sorted(found) == ["check-cluster", "check-node0", "check-node1"]
    # One task per node: each is its node's agent and found its node rank in SLURM_NODEID
    # (that the master needs no flag either is the two-tasks-per-node test's).
    assert [found[f"check-node{i}"]["nodes"][0]["node"] for i in (0, 1)] == ["node0", "node1"]
    assert found["check-cluster"]["exit_code"] == rc


def test_uneven_tasks_are_a_usage_error_on_every_task(slurm, tmp_path):
    argv = ["srun", "-N2", "-n3", "python", "-m", "nccldoctor", "check", "--out",
            str(tmp_path / "out"), *FAST]  # fmt: skip
    rc, _, err = run(slurm, argv, tmp_path)
    assert rc == 2, err[-3000:]
    said = "SLURM_STEP_NUM_TASKS=3 is not a multiple of SLURM_STEP_NUM_NODES=2 (tasks per node: "
    assert err.count(said) == 3, err[-3000:]
    assert not (tmp_path / "out").exists()  # refused before anything ran


def test_check_in_the_batch_shell_without_srun_is_a_usage_error(slurm, tmp_path):
    (tmp_path / "job.sh").write_text(
        "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --output=job.out\nnccldoctor check\n"
    )
    rc, err = sbatch(slurm, "job.sh", tmp_path)
    log = (tmp_path / "job.out").read_text()
    assert rc == 2, (err, log[-3000:])
    assert "is set but SLURM_STEP_ID is not" in log
