"""Run nccldoctor's NCCL paths once on this machine and keep everything they printed in one archive.

``scripts/gpu-verify.sh OUTDIR [--cpu]`` runs this; the recipe for a GPU machine is in that file's
header. On a machine with CUDA the backend is nccl; without (or with ``--cpu``) it is gloo and
there is no NVML: the dry run the tests replay (tests/test_gpu_verify.py). Steps, each a folder of
the archive ``gpu-verify/`` with its output and a row in ``manifest.json``:

- ``machine/``: versions (Python, torch, CUDA, NCCL, the GPU), ``nvidia-smi -q``, ``ip -j -d addr``.
- ``preflight/``: ``nccldoctor preflight --json`` on this machine, and ``tree/``: every file under
  /proc, /sys, /etc and /dev the probes read, copied as a fixture tree (links kept as links),
  with ``run/nccldoctor/ip-addr.json`` (docs/design.md#layers: probes read under a root).
- ``check/``: a two-node ``nccldoctor check`` on this one machine, one rank per node: two network
  namespaces where they can be built, loopback otherwise; each node a host of its own to NCCL
  (``NCCL_HOSTID``), so that both ranks share the GPU without NCCL's duplicate-GPU refusal and talk
  over NET/Socket. The check sets NCCL_DEBUG=INFO and the subsystems with TUNING itself.
- ``dup-gpu/``: ``nccldoctor watch`` over the example DDP job (tests/watch/example_job.py:
  Linear(784,10), DistributedSampler, SGD) with two ranks of one node on one GPU: NCCL's
  duplicate-GPU error, and the watch report's finding for it (skipped on CPU: gloo ranks share
  no GPU).
- ``watch-healthy/``, ``watch-stalled/``: the same job, each rank a host of its own to NCCL,
  healthy, then with rank 1 stalled at step 3 (and a 60 s process-group timeout): the hung rank
  named, the Flight Recorder dumps collected and matched.
- ``bare/``: the job's shape without nccldoctor (init, allreduce, one DDP step), timed: the
  baseline of the check's wall time (skipped on CPU).

Every step has a deadline inside the whole run's budget (``--budget-s``); a step that runs out
gets SIGTERM, then SIGKILL, and is recorded; the next still runs, and the archive is always
written.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nccldoctor.lab.netns import NetLab, NetLabError, netlab_possible  # noqa: E402
from nccldoctor.lab.start import check_env, free_port_pair, start_check  # noqa: E402
from nccldoctor.probes.rdma import PEER_MEMORY_FILES  # noqa: E402

EXAMPLE_JOB = REPO / "tests" / "watch" / "example_job.py"
ARCHIVE_ROOT = "gpu-verify"
# The lab's /24 for this run: inside 198.18.0.0/15 and apart from the tests' and benches' labs.
LAB_PREFIX = "198.18.93"
# What the probes read that a fixture tree keeps (docs/design.md#layers); the rest (Python's own
# files, libraries) belongs to the software, not to the machine's state.
TREE_PREFIXES = ("/proc/", "/sys/", "/etc/", "/dev/")
# What a probe looks at without opening it (a readlink, a stat) or reads only under a tree (live,
# gethostname answers), so the audit hook never sees it: copied whenever it exists.
TREE_ALWAYS = ("/etc/hostname", "/proc/sys/kernel/hostname", "/.dockerenv", "/run/.containerenv",
               "/dev/infiniband", "/dev/shm", *PEER_MEMORY_FILES)  # fmt: skip
TREE_ALWAYS_LISTED = ("/proc/self/ns",)
# The same per entry of a listed /sys/class/<class>/ folder: the links and folders that say what
# kind of device an entry is (the network probe's kind and driver).
SYSFS_ENTRY_MARKERS = ("device/driver", "bridge", "bonding", "tun_flags")
TREE_FILE_CAP = 1 << 20  # a sysfs or procfs file is far smaller; a larger one is not a probe's
MIN_STEP_S = 25.0  # a step started with less would be stopped before it showed anything
STOP_GRACE_S = 20.0  # a stopped check or watch writes its report (watch: the job's 10 s included)

BARE_JOB = """
import os, sys
from datetime import timedelta
import torch, torch.distributed as dist
backend, rank = sys.argv[1], int(os.environ["RANK"])
device = torch.device("cpu")
if backend == "nccl":
    os.environ["NCCL_HOSTID"] = f"bare-rank{rank}"
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
dist.init_process_group(backend, timeout=timedelta(seconds=60))
t = torch.ones(1024, device=device) * (rank + 1)
dist.all_reduce(t)
assert t[0].item() == 3
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(784, 10).to(device))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 784, device=device), torch.randint(0, 10, (64,), device=device)
torch.nn.functional.cross_entropy(model(x), y).backward()
opt.step()
dist.destroy_process_group()
"""


class Run:
    """The archive's folder, the manifest's rows and the whole run's deadline."""

    def __init__(self, work: Path, mode: str, budget_s: float) -> None:
        self.work = work
        self.mode = mode
        self.backend = "nccl" if mode == "gpu" else "gloo"
        self.deadline = time.monotonic() + budget_s
        self.steps: list[dict] = []

    def left(self, wanted: float) -> float:
        """Seconds a step may take: ``wanted``, or what is left before the deadline (5 s kept
        for the archive)."""
        return max(1.0, min(wanted, self.deadline - time.monotonic() - 5.0))

    def folder(self, name: str) -> Path:
        path = self.work / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def record(self, name: str, started: float, **row: object) -> None:
        row = {"step": name, "wall_s": round(time.monotonic() - started, 3), **row}
        self.steps.append(row)
        print(f"gpu-verify: {name}: {json.dumps(row)[:300]}", flush=True)


def run_to_files(
    argv: Sequence[str], env: Mapping[str, str], out: Path, stem: str, timeout_s: float
) -> dict:
    """``argv`` in a session of its own, stdout and stderr into ``out/stem.{stdout,stderr}``;
    killed (its whole group) at ``timeout_s``."""
    with open(out / f"{stem}.stdout", "wb") as stdout, open(out / f"{stem}.stderr", "wb") as stderr:
        proc = subprocess.Popen(
            argv, env=dict(env), stdout=stdout, stderr=stderr, start_new_session=True
        )
        return {"argv": list(argv), **wait_or_kill([proc], timeout_s)[0]}


def wait_or_kill(procs: Sequence[subprocess.Popen], timeout_s: float) -> list[dict]:
    """Each process's exit code, waited for together until ``timeout_s``. One still running
    then gets SIGTERM (check and watch write their report on it, a stopped watch ends its job)
    and, STOP_GRACE_S later, SIGKILL with its whole session; it is recorded as timed out."""
    deadline = time.monotonic() + timeout_s
    rows = []
    for proc in procs:
        try:
            rows.append({"rc": proc.wait(timeout=max(0.1, deadline - time.monotonic()))})
            continue
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
        try:
            rows.append({"rc": proc.wait(timeout=STOP_GRACE_S), "timed_out": True})
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            rows.append({"rc": proc.wait(), "timed_out": True, "killed": True})
        deadline = time.monotonic()  # the others had their time too
    return rows


def machine(run: Run) -> None:
    started = time.monotonic()
    out = run.folder("machine")
    versions: dict[str, object] = {
        "mode": run.mode,
        "backend": run.backend,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "netns_possible": netlab_possible(),
    }
    import torch

    versions.update(torch=torch.__version__, torch_cuda=torch.version.cuda)
    with contextlib.suppress(Exception):  # a CPU build has no NCCL to ask
        nccl = torch.cuda.nccl.version()  # (2, 27, 5); older torch: NCCL_VERSION_CODE, 22705
        if isinstance(nccl, int):
            nccl = (nccl // 10000, nccl // 100 % 100, nccl % 100)
        versions["torch_nccl"] = ".".join(map(str, nccl))
    if torch.cuda.is_available():
        versions["gpus"] = [
            {
                "name": torch.cuda.get_device_name(i),
                "capability": list(torch.cuda.get_device_capability(i)),
            }
            for i in range(torch.cuda.device_count())
        ]
    (out / "versions.json").write_text(json.dumps(versions, indent=1) + "\n")
    for stem, argv in (
        ("nvidia-smi", ["nvidia-smi", "-q"]),
        ("ip-addr", ["ip", "-j", "-d", "addr", "show"]),
    ):
        if shutil.which(argv[0]):
            run_to_files(argv, os.environ, out, stem, run.left(30))
    run.record("machine", started, **versions)


def preflight(run: Run) -> None:
    started = time.monotonic()
    out = run.folder("preflight")
    argv = [sys.executable, "-m", "nccldoctor", "preflight", "--json"]
    row = run_to_files(argv, check_env(os.environ, "node0"), out, "preflight", run.left(60))
    (out / "preflight.stdout").rename(out / "preflight.json")
    tree = out / "tree"
    read = capture_tree(tree)
    addresses = run.work / "machine" / "ip-addr.stdout"
    if addresses.exists():
        (tree / "run" / "nccldoctor").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(addresses, tree / "run" / "nccldoctor" / "ip-addr.json")
    run.record("preflight", started, **row, tree_paths=len(read))


def capture_tree(tree: Path) -> list[str]:
    """Run the probes here with an audit hook that notes every file they open and every folder
    they list under TREE_PREFIXES, then copy those into ``tree``; the paths noted."""
    from nccldoctor.probes import collect_node_facts

    opened: set[str] = set()
    listed: set[str] = set()
    recording = True

    def hook(event: str, args: tuple) -> None:
        if not recording or event not in ("open", "os.listdir", "os.scandir") or not args:
            return
        path = args[0]
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if isinstance(path, str) and path.startswith(TREE_PREFIXES):
            (opened if event == "open" else listed).add(os.path.normpath(path))

    sys.addaudithook(hook)  # an audit hook cannot be removed: ``recording`` turns it off
    try:
        collect_node_facts(root="/")
    finally:
        recording = False
    listed.update(TREE_ALWAYS_LISTED)
    opened.update(path for path in TREE_ALWAYS if os.path.lexists(path))
    for folder in [p for p in listed if p.startswith("/sys/class/")]:
        with contextlib.suppress(OSError):
            for entry in os.listdir(folder):
                markers = (os.path.join(folder, entry, m) for m in SYSFS_ENTRY_MARKERS)
                opened.update(m for m in markers if os.path.lexists(m))
    for path in sorted(listed):
        copy_listing(path, tree)
    for path in sorted(opened):
        copy_path(path, tree)
    return sorted(opened | listed)


def copy_path(path: str, tree: Path, depth: int = 0) -> None:
    """``path`` into ``tree``: each symlink on the way as a link (and what it points to), the
    folders as folders, the file's bytes (up to TREE_FILE_CAP) when it reads."""
    if depth > 20:
        return
    current = Path("/")
    parts = Path(path).parts[1:]
    for i, part in enumerate(parts):
        current = current / part
        dest = tree / str(current).lstrip("/")
        if not os.path.lexists(current):
            return  # a probe that opened what is not there: the tree lacks it too
        if current.is_symlink():
            target = os.readlink(current)
            if not dest.is_symlink():
                dest.parent.mkdir(parents=True, exist_ok=True)
                # an absolute target made relative: the tree's link leads into the tree
                relative = (
                    os.path.relpath(target, current.parent) if os.path.isabs(target) else target
                )
                with contextlib.suppress(FileExistsError):
                    os.symlink(relative, dest)
            # what the probe read through the link, wherever it lies (/etc/resolv.conf -> /run/…)
            copy_path(os.path.normpath(os.path.join(current.parent, target, *parts[i + 1 :])), tree,
                      depth + 1)  # fmt: skip
            return
        if i < len(parts) - 1 or current.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
            continue
        try:
            with open(current, "rb") as source:
                data = source.read(TREE_FILE_CAP)
        except OSError:
            return  # unreadable (EACCES, EIO): the tree lacks it, and the probe read None too
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)


def copy_listing(path: str, tree: Path) -> None:
    """A folder the probes listed: its entries' names, links as links, device files as empty
    files (a tree holds no devices), sub-folders as folders."""
    copy_path(path, tree)
    real = Path(os.path.realpath(path))
    dest = tree / str(real).lstrip("/")
    try:
        entries = list(os.scandir(real))
    except OSError:
        return
    for entry in entries:
        target = dest / entry.name
        if target.exists() or target.is_symlink():
            continue
        try:
            if entry.is_symlink():
                link = os.readlink(entry.path)
                os.symlink(os.path.relpath(link, real) if os.path.isabs(link) else link, target)
            elif entry.is_dir():
                target.mkdir(parents=True, exist_ok=True)
            elif str(real).startswith("/dev"):
                target.touch()
        except OSError:
            continue


def check(run: Run) -> None:
    """Two nodes, one rank each, on this machine's one GPU (docs/design.md#phases)."""
    started = time.monotonic()
    out = run.folder("check")
    lab = None
    if netlab_possible():
        try:
            lab = NetLab(2, prefix=LAB_PREFIX).build()
        except NetLabError as exc:
            (out / "netns-error.txt").write_text(f"{exc}\n")
    master = lab.hosts[0].address if lab else "127.0.0.1"
    port = 29400 if lab else free_port_pair()
    args = ["--master", master, "--nodes", "2", "--port", str(port), "--backend", run.backend,
            "--timeout", "120", "--run-name", "run"]  # fmt: skip
    if run.mode == "cpu":  # the dry run proves the path, not the rate
        args += ["--phase-timeout", "bandwidth_budget=1", "--phase-timeout", "tcp_probe=0.5"]
    procs, files = [], []
    try:
        for i in range(2):
            stdout = open(out / f"node{i}.stdout", "wb")  # noqa: SIM115  (closed below)
            stderr = open(out / f"node{i}.stderr", "wb")  # noqa: SIM115
            files += [stdout, stderr]
            # --node-rank: on loopback both nodes own the master's address, and each would be it
            procs.append(start_check(
                [*args, "--node-rank", str(i)], out=out, node_name=f"node{i}", env=os.environ,
                extra_env={"NCCL_HOSTID": f"gpu-verify-node{i}"},
                lab=lab, host=lab.hosts[i] if lab else None, stdout=stdout, stderr=stderr,
            ))  # fmt: skip
        codes = wait_or_kill(procs, run.left(240))
    finally:
        for f in files:
            f.close()
        if lab is not None:
            lab.close()
    run.record("check", started, network="netns" if lab else "loopback", master=master,
               nodes=codes)  # fmt: skip


def watch(run: Run, name: str, host_per_rank: bool, fault: str | None, hang_after: float,
          timeout_s: float) -> None:  # fmt: skip
    """``nccldoctor watch`` over torchrun's two ranks of the example job on this node."""
    started = time.monotonic()
    out = run.folder(name)
    env = {**check_env(os.environ, "node0"), "EXAMPLE_BACKEND": run.backend}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    if host_per_rank:
        env["EXAMPLE_HOST_PER_RANK"] = "1"
    if fault:
        env["EXAMPLE_FAULT"] = fault
        env["EXAMPLE_PG_TIMEOUT_S"] = "60"
    if run.mode == "cpu":
        env["EXAMPLE_STEPS"] = "4"
    argv = [sys.executable, "-m", "nccldoctor", "watch", "--out", str(out / "out"),
            "--hang-after", str(hang_after), "--",
            sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
            "--master-addr", "127.0.0.1", "--master-port", str(free_port_pair()),
            str(EXAMPLE_JOB)]  # fmt: skip
    row = run_to_files(argv, env, out, "watch", run.left(timeout_s))
    run.record(name, started, **row, fault=fault)


def bare(run: Run) -> None:
    """The check's baseline: the same world (two ranks, each a host of its own to NCCL) doing
    init, one allreduce and one DDP step, with nothing of nccldoctor around it."""
    started = time.monotonic()
    out = run.folder("bare")
    port = free_port_pair()
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}  # fmt: skip
        with open(out / f"rank{rank}.log", "wb") as log:
            procs.append(subprocess.Popen(
                [sys.executable, "-c", BARE_JOB, run.backend], env=env, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            ))  # fmt: skip
    run.record("bare", started, ranks=wait_or_kill(procs, run.left(120)))


def numbers(run: Run) -> dict:
    """What the fixture README records (the issue's performance note): the check's largest
    allreduce busbw beside the TCP probe's rate in the same run, and the check's wall time beside
    the bare job's. Read from the check's report; absent what the run did not produce."""
    walls = {s["step"]: s["wall_s"] for s in run.steps if "skipped" not in s}
    found: dict[str, object] = {f"{step}_wall_s": walls.get(step) for step in ("check", "bare")}
    with contextlib.suppress(OSError, ValueError, KeyError, IndexError, TypeError):
        report = json.loads((run.work / "check/node0/run/check-cluster.json").read_text())
        largest = report["bandwidth"]["rows"][-1]
        found.update(
            allreduce_bytes=largest["size_bytes"],
            allreduce_busbw_GBps=largest["busbw_GBps"],
            tcp_probe_Gbitps=report["bandwidth"].get("tcp_wire_Gbitps"),
            check_answer=report["headline"]["answer"],
        )
    return found


def skip(run: Run, step: str, why: str) -> None:
    run.record(step, time.monotonic(), skipped=why)


def plain(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """Files, folders and links only: the watch's FIFOs stay out of the archive."""
    return member if member.isfile() or member.isdir() or member.issym() else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path, help="where the one archive is left")
    parser.add_argument("--cpu", action="store_true", help="gloo without NVML, even with CUDA")
    parser.add_argument("--budget-s", type=float, default=360.0, help="the whole run's deadline")
    args = parser.parse_args(argv)
    import torch

    mode = "gpu" if torch.cuda.is_available() and not args.cpu else "cpu"
    args.outdir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="gpu-verify-"))
    run = Run(scratch / ARCHIVE_ROOT, mode, args.budget_s)
    started = time.monotonic()
    gpu = mode == "gpu"
    hang_after = 20.0 if gpu else 6.0  # 6 s: a loaded CI machine's job still moves
    # A stall on gloo: both ranks are past their start by step 3 and rank 0 waits without a
    # core, so the job is quiet from the stall on (tests/watch/test_watch.py's stall waits 3 s).
    stall_after = hang_after if gpu else 3.0
    steps = {
        "machine": lambda: machine(run),
        "preflight": lambda: preflight(run),
        "check": lambda: check(run),
        # on gloo two ranks share no GPU: the step would be watch-healthy's job again
        "dup-gpu": lambda: (
            watch(run, "dup-gpu", False, None, hang_after, 120)
            if gpu
            else skip(run, "dup-gpu", "needs CUDA: gloo ranks share no GPU")
        ),
        "watch-healthy": lambda: watch(run, "watch-healthy", True, None, hang_after, 150),
        # On NCCL rank 0 waits inside CUDA's synchronize, which spins a core by default: whether
        # watch, which takes CPU time for progress, still sees the hang is this step's question.
        # Where it does not, PyTorch's own watchdog ends the job at the 60 s timeout and dumps
        # the Flight Recorder, so the archive holds real NCCL dumps either way.
        "watch-stalled": lambda: watch(run, "watch-stalled", True, "stall:1:3", stall_after, 130),
        # last: the performance note's baseline gets what time the evidence left
        "bare": lambda: bare(run) if gpu else skip(run, "bare", "a baseline for the GPU's timings"),
    }
    try:
        for name, step in steps.items():
            step_started = time.monotonic()
            if run.deadline - step_started < MIN_STEP_S:
                skip(run, name, f"less than {MIN_STEP_S:g} s of the budget left")
                continue
            try:
                step()
            except Exception as exc:  # one broken step still leaves the others' evidence
                run.record(name, step_started, error=f"{type(exc).__name__}: {exc}")
        manifest = {"mode": mode, "backend": run.backend, "wall_s": round(time.monotonic() - started, 3),
                    "budget_s": args.budget_s, "numbers": numbers(run), "steps": run.steps}  # fmt: skip
        print(f"gpu-verify: numbers: {json.dumps(manifest['numbers'])}", flush=True)
        (run.work / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        archive = args.outdir / f"gpu-verify-{mode}.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(run.work, arcname=ARCHIVE_ROOT, filter=plain)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"gpu-verify: {archive} ({archive.stat().st_size} bytes, {manifest['wall_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
