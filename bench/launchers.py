"""`srun nccldoctor check` on the lab's real Slurm against `srun` of a bare torch script, one run.

The bare script is what a job's first seconds do: init_process_group (gloo, the ranks and the
master from Slurm's variables) and one allreduce, with the same layout (``--ntasks-per-node``).
Both start through the same `srun -N2` on the lab's two Slurm nodes (nccldoctor/lab/slurm.py),
so the launch itself costs both alike. Target: check / bare <= 2.0.

``--ntasks-per-node=N`` (default 1) is the layout of both: with one task per node nccldoctor
starts one worker per node itself; with several, each task is one rank of the check, local rank
0 of each node its node agent too (docs/design.md#per-process).

Needs root, ip netns, slurm-wlm and munge. Run: python bench/launchers.py [--repeat 3] [--ntasks-per-node 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.preflight import compile_checkout  # noqa: E402  (bytecode, as pip install writes it)
from nccldoctor.lab.slurm import SlurmLab, slurm_possible  # noqa: E402

TARGET_RATIO = 2.0
CHECK_ARGS = ["--backend", "gloo", "--timeout", "30", "--phase-timeout", "bandwidth_budget=2",
              "--phase-timeout", "tcp_probe=1"]  # fmt: skip
GLOO = {"GLOO_SOCKET_IFNAME": "eth0"}

BARE = textwrap.dedent("""
    import os
    from datetime import timedelta
    import torch, torch.distributed as dist
    rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    dist.init_process_group("gloo", init_method="tcp://node0:29500", rank=rank,
                            world_size=world, timeout=timedelta(seconds=60))
    t = torch.ones(1024)
    dist.all_reduce(t)
    assert t[0].item() == world
    dist.destroy_process_group()
""")


def srun(lab: SlurmLab, per_node: int, argv: list[str], cwd: Path) -> tuple[float, int]:
    """``srun -N2 --ntasks-per-node=PER_NODE ARGV`` on the controller: wall time, exit status."""
    env = lab.env(os.environ, GLOO)
    start = time.monotonic()
    proc = lab.popen(["srun", "-N2", f"--ntasks-per-node={per_node}", *argv], env, cwd=cwd,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    code = proc.wait(timeout=600)
    return time.monotonic() - start, code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the fastest counts")
    parser.add_argument("--ntasks-per-node", type=int, default=1, help="tasks per node, both")
    args = parser.parse_args()
    per_node = args.ntasks_per_node
    if not slurm_possible():
        print("bench/launchers.py needs root, ip netns, slurm-wlm and munge", file=sys.stderr)
        return 2
    compile_checkout()
    started_load = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="nccldoctor-bench-launchers-"))
    lab = SlurmLab(2, work / "slurm", prefix="198.18.78").build()
    try:
        bare, check = [], []
        for n in range(args.repeat):
            seconds, code = srun(lab, per_node, [sys.executable, "-c", BARE], work)
            assert code == 0, f"bare script: srun exited {code}"
            bare.append(seconds)
            out = work / f"check{n}"
            argv = [sys.executable, "-m", "nccldoctor", "check", "--out", str(out), *CHECK_ARGS]
            seconds, code = srun(lab, per_node, argv, work)
            (path,) = out.glob("*/latest/check-cluster.json")  # the master's node's newest run
            report = json.loads(path.read_text())
            assert code == report["exit_code"] == 0, (code, report["findings"])
            assert len(report["ranks"]) == 2 * per_node, report["ranks"]
            check.append(seconds)
            phases(report)
    finally:
        lab.close()
    ratio = min(check) / min(bare)  # the least disturbed run of each on a shared machine
    layout = f"srun -N2 --ntasks-per-node={per_node}"
    print(f"{layout} bare init+allreduce: {min(bare):.1f} s (runs: "
          + ", ".join(f"{s:.1f}" for s in bare) + ")")  # fmt: skip
    print(f"{layout} nccldoctor check:    {min(check):.1f} s (runs: "
          + ", ".join(f"{s:.1f}" for s in check) + ")")  # fmt: skip
    verdict = "ok" if ratio <= TARGET_RATIO else "over target"
    # the machine's other work moves both numbers: the ratio means little without it
    load = ", ".join(f"{x:.2f}" for x in (*started_load, *os.getloadavg()))
    print(f"check / bare = {ratio:.2f} (target <= {TARGET_RATIO}): {verdict}; "
          f"load average 1/5/15 min before, after: {load}")  # fmt: skip
    return 0 if ratio <= TARGET_RATIO else 1


def phases(report: dict) -> None:
    """Where one check's time went: the master's phases, then rank 0's worker phases."""
    rows = [p for p in report.get("phases", []) if p.get("duration_s") is not None]
    master = [p for p in rows if p["rank"] is None and p["node"] == rows[0]["node"]] if rows else []
    ranks = [p for p in rows if p["rank"] == 0]
    print("  " + ", ".join(f"{p['phase']} {p['duration_s']:.1f}" for p in master + ranks))


if __name__ == "__main__":
    sys.exit(main())
