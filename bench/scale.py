"""`nccldoctor check` at 2, 4 and 8 network-namespace nodes, and the master's merge at 8-512.

1. The healthy check (gloo, 2 worker processes per node) at 2, 4 and 8 nodes: wall time per size
   (first node started to last node ended) as a ratio to the 2-node run, the seconds each node
   added costs, where the 8-node run's time went (the last node's phases), the cluster report's
   size (bytes, and per node) and the machine's peak memory in use during the run.
2. The merges of synthetic node reports (tests/cluster/synthetic.py: copies of one real node
   report, one rank stuck and every other one timed out) at 8, 64 and 512 nodes, as ratios to
   the 8-node merge: the master's and `nccldoctor report merge`'s of node report files (one
   merge, cluster/diagnosis/merge.py; the master's adds the joins and wire speeds it gathered).
   Linear means the ratio follows the node count.

Not part of pass/fail. Needs root (ip netns); run it alone: flock /work/heavy.lock python
bench/scale.py [--repeat 2]. On a 2-core box 24 processes import torch at 8 nodes: the slope
per node is mostly that.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import check  # noqa: E402  (its way of starting the check on every host)
from nccldoctor.cluster.diagnosis.merge import merge_reports  # noqa: E402
from nccldoctor.lab.netns import NetLab, netlab_possible  # noqa: E402
from nccldoctor.report.load import report_from_document  # noqa: E402
from tests.cluster.synthetic import synthetic_run  # noqa: E402

SIZES = (2, 4, 8)
PROCS = 2
MERGE_SIZES = (8, 64, 512)
PROCS_ARGS = ["--procs-per-node", str(PROCS)]
CHECK_ARGS = [*check.CHECK_ARGS, *PROCS_ARGS]


class MemoryPeak:
    """The most memory in use (MemTotal - MemAvailable) while it runs, sampled every 0.2 s."""

    def __init__(self) -> None:
        self.peak = self.base = _in_use()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, _in_use())

    def __enter__(self) -> MemoryPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _in_use() -> int:
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return (int(info["MemTotal"].split()[0]) - int(info["MemAvailable"].split()[0])) * 1024


def healthy_check(nodes: int, work: Path) -> dict:
    """One healthy check on ``nodes`` fresh namespace hosts; wall time, report and memory."""
    lab = NetLab(nodes, prefix="198.18.78").build()
    try:
        with MemoryPeak() as memory:
            wall, codes = check.run_checks(lab, work, PROCS_ARGS, timeout=600)
    finally:
        lab.close()
    path = work / "node0" / "latest" / "check-cluster.json"
    report = json.loads(path.read_text())
    assert codes == [0] * nodes and report["exit_code"] == 0, (codes, report["findings"])
    assert report["cluster"]["world_size"] == nodes * PROCS
    last = f"node{nodes - 1}"
    last_rank = (nodes - 1) * PROCS
    phases = [
        f"{p['phase']} {p['duration_s']:.1f}"
        for p in report["phases"]
        if p["node"] == last and p["duration_s"] is not None and p["rank"] in (None, last_rank)
    ]
    return {
        "wall": wall,
        "bytes": path.stat().st_size,
        "memory": memory.peak - memory.base,
        "phases": ", ".join(phases),
    }


def fastest(work, repeat: int) -> tuple[float, object]:
    """The fastest of ``repeat`` calls of ``work`` (garbage collection off); (seconds, result)."""
    best, result = float("inf"), None
    for _ in range(repeat):
        gc.disable()
        try:
            start = time.perf_counter()
            result = work()
            best = min(best, time.perf_counter() - start)
        finally:
            gc.enable()
    return best, result


def merges(nodes: int, repeat: int) -> tuple[float, float, int]:
    """The master's merge and `nccldoctor report`'s merge of ``nodes`` synthetic node reports:
    (seconds, seconds, the cluster report's bytes)."""
    run = synthetic_run(nodes, PROCS, hang_rank=3)
    master_s, report = fastest(run.merge, repeat)
    parts = [(f"/r/{d['run']['node']}.json", report_from_document(d)) for d in run.documents()]
    files_s, _ = fastest(lambda: merge_reports(parts), repeat)
    return master_s, files_s, len(json.dumps(report.to_dict()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="checks per size; the fastest counts")
    args = parser.parse_args()
    if not netlab_possible():
        print("bench/scale.py needs root and ip netns", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="nccldoctor-bench-scale-"))
    runs = {}
    for nodes in SIZES:
        tries = [healthy_check(nodes, work / f"n{nodes}-{i}") for i in range(args.repeat)]
        runs[nodes] = min(tries, key=lambda r: r["wall"])
    merge_sizes = {n: merges(n, 5 if n < 512 else 2) for n in (8, *MERGE_SIZES)}

    base = runs[SIZES[0]]["wall"]
    print(f"healthy check, N netns nodes x {PROCS} ranks ({' '.join(CHECK_ARGS)}):")
    for nodes, r in runs.items():
        print(f"  {nodes} nodes ({nodes * PROCS:2d} ranks)  {r['wall']:6.1f} s  ratio to "
              f"{SIZES[0]} nodes {r['wall'] / base:4.2f}  cluster report {r['bytes']:7d} B "
              f"({r['bytes'] / nodes:6.0f} B/node)  peak memory in use +{r['memory'] / 2**30:.1f} GiB")  # fmt: skip
    small, large = SIZES[0], SIZES[-1]
    slope = (runs[large]["wall"] - runs[small]["wall"]) / (large - small)
    print(f"  seconds per node added ({small} -> {large} nodes): {slope:.1f} s")
    for a, b in itertools.pairwise(SIZES):
        print(f"    {a} -> {b}: {(runs[b]['wall'] - runs[a]['wall']) / (b - a):.1f} s/node")
    print(f"  where the {large}-node run went (node{large - 1}, its last rank): "
          f"{runs[large]['phases']}")  # fmt: skip
    print("merges of synthetic node reports (one rank stuck, the rest timed out):")
    base_master, base_files, _ = merge_sizes[MERGE_SIZES[0]]
    for nodes in MERGE_SIZES:
        master_s, files_s, size = merge_sizes[nodes]
        print(f"  {nodes:4d} nodes  master's {master_s * 1e3:6.1f} ms (ratio to {MERGE_SIZES[0]} "
              f"nodes {master_s / base_master:5.1f})  nccldoctor report's {files_s * 1e3:6.1f} ms "
              f"(ratio {files_s / base_files:5.1f})  nodes ratio {nodes // MERGE_SIZES[0]:3d}  "
              f"cluster report {size} B ({size / nodes:.0f} B/node)")  # fmt: skip
    print(f"(reports kept under {work})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
