"""The whole `check` with isolation against the healthy check on the same namespace nodes (eight,
as the issue's target has it; ``--nodes``), in one run: two labs side by side, one healthy, one
with tests/cluster/test_isolate_netns.py's three faults at once (the master's link rate-limited, one pair blocked both ways, one node behind an MTU
trap), their runs alternated. Prints each run's wall time, where the faulty run's time went (up
to the end of the TCP probes, the all-node run up to its slowest node, the wait for the nodes'
states, the rounds) and the ratio of the medians. Target: <= 3.0.

Needs root (ip netns). Run: python bench/isolate_lab.py [--repeat 3] [--nodes 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.cluster.netns import Lab, NodeRun, netns_available  # noqa: E402
from tests.cluster.test_check_netns import lab_out  # noqa: E402
from tests.cluster.test_isolate_netns import ARGS, DEADLINE, elapsed, mtu_trap  # noqa: E402

TARGET_RATIO = 3.0


def fault(lab: Lab) -> None:
    master, (a, b), trapped = lab.hosts[0], (lab.hosts[1], lab.hosts[4]), lab.hosts[5]
    master.exec("tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "100mbit",
                "burst", "256kb", "latency", "400ms")  # fmt: skip
    a.exec("iptables", "-A", "INPUT", "-s", b.address, "-j", "DROP")
    b.exec("iptables", "-A", "INPUT", "-s", a.address, "-j", "DROP")
    mtu_trap(lab, trapped)


def start(lab: Lab, port: int) -> list[NodeRun]:
    """The check on every node of ``lab``, with the test's budgets."""
    master, nodes = lab.hosts[0].address, str(len(lab.hosts))
    args = ["--master", master, "--nodes", nodes, "--port", str(port), *ARGS]
    return [lab.start(host, args, out=lab_out(lab, host)) for host in lab.hosts]


def breakdown(report: dict, master: str) -> dict[str, float]:
    """Seconds from the first node's start: the last TCP probe's end, the slowest node's
    workers' end, the master's isolate phase (its start, its length) and its rounds."""
    rows = [p for p in report["phases"] if p.get("rank") is None]
    t0 = min(p["started"] for p in rows)
    end = lambda phase: max((p["ended"] - t0 for p in rows if p["phase"] == phase), default=0.0)  # noqa: E731
    (iso,) = [p for p in rows if p["phase"] == "isolate" and p["node"] == master]
    isolation = report.get("isolation") or {}
    return {
        "tcp_end": end("tcp"),
        "workers_end": end("workers"),
        "isolate_start": iso["started"] - t0,
        "isolate_s": iso["duration_s"],
        "rounds": float(isolation.get("rounds", 0)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=8, help="at least six: the faults' places")
    args = parser.parse_args()
    if not netns_available():
        print("needs root and ip netns")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        healthy, faulty = Lab(Path(tmp) / "healthy"), Lab(Path(tmp) / "faulty")
        try:
            healthy.build(args.nodes)
            faulty.build(args.nodes)
            fault(faulty)
            times: dict[str, list[float]] = {"healthy": [], "faulty": []}
            parts: list[dict[str, float]] = []
            for i in range(args.repeat):
                for name, lab in (("healthy", healthy), ("faulty", faulty)):
                    runs = start(lab, 29500 + 10 * i + (name == "faulty"))
                    lab.wait(runs, DEADLINE)
                    want = 0 if name == "healthy" else 1
                    if [r.rc for r in runs] != [want] * args.nodes:
                        print(f"{name} run {i + 1}: exit codes {[r.rc for r in runs]}")
                        print(runs[0].stderr[-2000:])
                        return 1
                    times[name].append(elapsed(runs))
                    line = f"{name} run {i + 1}: {elapsed(runs):.1f} s"
                    if name == "faulty":
                        parts.append(breakdown(runs[0].cluster_report(), lab.hosts[0].name))
                        line += "  " + "  ".join(f"{k} {v:.1f}" for k, v in parts[-1].items())
                    print(line, flush=True)
        finally:
            healthy.close()
            faulty.close()
    h, f = statistics.median(times["healthy"]), statistics.median(times["faulty"])
    print(f"median healthy {h:.1f} s, faulty with isolation {f:.1f} s: {f / h:.2f}x "
          f"(target <= {TARGET_RATIO})")  # fmt: skip
    for key in parts[0]:
        print(f"  faulty {key}: median {statistics.median(p[key] for p in parts):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
