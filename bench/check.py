"""`nccldoctor check` on two network-namespace nodes against a bare torch script, in one run.

1. Healthy: the whole check (preflight, reach, rendezvous, NCCL bootstrap probe, TCP probe,
   workers: init, barrier, correctness, bandwidth sweep, DDP steps, checksums) against a bare
   script that does init_process_group + one allreduce + one DDP step on the same namespaces.
   Target: check / bare <= 2.0.
2. Hang: rank 1 hangs inside the allreduce correctness phase; from the hang (its phase start)
   to the master's written cluster report must stay <= the collective timeout + 5 s. Printed
   against torch's default process-group timeout for the backend (gloo: 30 min).
3. The bus bandwidth of the largest allreduce divided by the raw TCP probe's throughput.

Needs root (ip netns). Run: python bench/check.py [--repeat 2]
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
from nccldoctor.lab.netns import NetLab, netlab_possible  # noqa: E402
from nccldoctor.lab.start import check_env, start_check  # noqa: E402

TARGET_RATIO = 2.0
HANG_SLACK_S = 5.0
COLLECTIVE_S = 10.0
CHECK_ARGS = ["--backend", "gloo", "--timeout", "30", "--phase-timeout", "bandwidth_budget=2",
              "--phase-timeout", "tcp_probe=1"]  # fmt: skip

BARE = textwrap.dedent("""
    import os, sys
    from datetime import timedelta
    import torch, torch.distributed as dist
    rank, master = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo", init_method=f"tcp://{master}:29500", rank=rank,
                            world_size=2, timeout=timedelta(seconds=60))
    t = torch.ones(1024) * (rank + 1)
    dist.all_reduce(t)
    assert t[0].item() == 3
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(784, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 784), torch.randint(0, 10, (64,))
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    dist.destroy_process_group()
""")


GLOO = {"GLOO_SOCKET_IFNAME": "eth0"}


def run_checks(
    lab: NetLab, out: Path, extra_args: list[str] = (), env_extra=None, timeout: float = 400.0
) -> tuple[float, list[int]]:
    """`nccldoctor check` on every host at once, sharing ``out`` as nodes on one NFS folder do
    (each run under ``out``/HOST/RUN, ``out``/HOST/latest the newest), waited for: the
    wall time in seconds and the exit codes. ``env_extra``: host name → extra variables."""
    args = ["--master", lab.hosts[0].address, "--nodes", str(len(lab.hosts)), *CHECK_ARGS,
            *extra_args]  # fmt: skip
    start = time.monotonic()
    procs = [start_check(args, out=out, node_name=h.name, env=os.environ,
                         extra_env={**GLOO, **(env_extra or {}).get(h.name, {})}, lab=lab, host=h,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for h in lab.hosts]  # fmt: skip
    return _waited(procs, start, timeout)


def run_bare(lab: NetLab, timeout: float = 400.0) -> float:
    """The bare torch script on every host, in the environment a check gets: the wall time."""
    master = lab.hosts[0].address
    start = time.monotonic()
    procs = [lab.popen(h, [sys.executable, "-c", BARE, str(i), master],
                       check_env(os.environ, h.name, GLOO),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for i, h in enumerate(lab.hosts)]  # fmt: skip
    return _waited(procs, start, timeout)[0]


def _waited(procs: list[subprocess.Popen], start: float, timeout: float) -> tuple[float, list[int]]:
    codes = [proc.wait(timeout=max(1.0, timeout - (time.monotonic() - start))) for proc in procs]
    return time.monotonic() - start, codes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the fastest counts")
    args = parser.parse_args()
    if not netlab_possible():
        print("bench/check.py needs root and ip netns", file=sys.stderr)
        return 2
    compile_checkout()
    lab = NetLab(2, prefix="198.18.77").build()
    work = Path(tempfile.mkdtemp(prefix="nccldoctor-bench-check-"))
    try:
        bare, check = [], []
        for n in range(args.repeat):
            bare.append(run_bare(lab))
            out = work / f"healthy{n}"
            check.append(run_checks(lab, out)[0])
            report = json.loads((out / "node0" / "latest" / "check-cluster.json").read_text())
            assert report["exit_code"] == 0, report["findings"]
        breakdown = ", ".join(f"{p['phase']} {p['duration_s']:.1f}" for p in report["phases"]
                              if p["node"] == "node0" and p["duration_s"] is not None)  # fmt: skip
        ratio = min(check) / min(bare)  # the least disturbed run of each on a shared machine
        rows = report["bandwidth"]["rows"]
        wire = report["bandwidth"]["tcp_wire_Gbitps"]["node1"]
        busbw_gbit = rows[-1]["busbw_GBps"] * 8

        out = work / "hang"
        fault = {"node1": {"NCCLDOCTOR_FAULT": "hang:allreduce_correctness:rank=1"}}
        run_checks(lab, out, ["--phase-timeout", f"collective={COLLECTIVE_S:g}"], fault)
        events = (out / "node1" / "latest" / "rank1" / "events.jsonl").read_text().splitlines()
        hang_start = next(json.loads(e)["t"] for e in events
                          if '"allreduce_correctness"' in e and '"start"' in e)  # fmt: skip
        cluster_path = out / "node0" / "latest" / "check-cluster.json"
        hang_to_report = cluster_path.stat().st_mtime - hang_start
        hang = json.loads(cluster_path.read_text())["hang"]
        from torch.distributed.constants import default_pg_timeout

        torch_default = default_pg_timeout.total_seconds()
    finally:
        lab.close()
    print(f"healthy check, 2 netns nodes x 1 rank (gloo, {' '.join(CHECK_ARGS)}):")
    print(
        f"  bare init+allreduce+DDP step  {min(bare):6.1f} s  (runs {', '.join(f'{b:.1f}' for b in bare)})"
    )
    print(
        f"  nccldoctor check              {min(check):6.1f} s  (runs {', '.join(f'{c:.1f}' for c in check)})"
    )
    print(f"  where the check's time went (last run, node0): {breakdown}")
    print(f"  ratio check/bare              {ratio:6.2f}   (target <= {TARGET_RATIO})")
    print(f"hang of rank 1 in allreduce_correctness (collective timeout {COLLECTIVE_S:g} s):")
    print(
        f"  hang -> cluster report        {hang_to_report:6.1f} s  (target <= {COLLECTIVE_S + HANG_SLACK_S:g} s)"
    )
    print(
        f"  vs torch's gloo default       {torch_default:6.0f} s  ratio {hang_to_report / torch_default:.4f}"
    )
    print(f"  verdict: {hang['verdict'][:160]}")
    print("bandwidth:")
    print(
        f"  largest allreduce {rows[-1]['size_bytes']} B busbw {busbw_gbit:.2f} Gbit/s; TCP probe {wire:.2f} Gbit/s; "
        f"ratio {busbw_gbit / wire:.2f}"
    )
    print(f"(reports kept under {work})")
    ok = ratio <= TARGET_RATIO and hang_to_report <= COLLECTIVE_S + HANG_SLACK_S
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
