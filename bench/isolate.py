"""The isolation scheduler (cluster/isolate/scheduler.py) simulated at 64, 256 and 1024 nodes.

For 1 and 3 faulty nodes (spread over the cluster), and for one faulty link, it runs the rounds
against the model of cluster/isolate/simulate.py (no process runs) and prints the rounds and
group tests it took beside an all-pairs sweep's N(N-1)/2 tests in N-1 rounds (a round-robin
tournament, each node in one pair a round): the baseline, computed for the same N. It also
prints the scheduler's own time for the whole run (median of --repeat runs), since the master
calls it once a round. The bound the issue sets for one faulty node is ceil(log2 N) + 2 rounds.

    python bench/isolate.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nccldoctor.cluster.isolate.simulate import Cluster, run

SIZES = (64, 256, 1024)


def cases(n: int) -> list[tuple[str, Cluster]]:
    nodes = [f"gpu-{i}" for i in range(n)]
    spread = [nodes[n // 7], nodes[n // 2 + 1], nodes[n - 3]]
    return [
        ("1 faulty node", Cluster(nodes, faulty=spread[:1])),
        ("3 faulty nodes", Cluster(nodes, faulty=spread)),
        ("1 slow node", Cluster(nodes, slow=spread[:1])),
        ("1 faulty link", Cluster(nodes, bad_links=[frozenset((nodes[1], nodes[n - 2]))])),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(
        f"{'N':>5} {'case':<15} {'rounds':>6} {'bound':>5} {'tests':>6} "
        f"{'all-pairs':>9} {'tests/pairs':>11} {'rr rounds':>9} {'named':<6} {'sched s':>8}"
    )
    for n in SIZES:
        pairs = n * (n - 1) // 2
        for label, cluster in cases(n):
            times = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                answer = run(cluster)
                times.append(time.perf_counter() - start)
            named = {v.node for v in answer.culprits} | {n for v in answer.links for n in v.nodes}
            truth = (
                set(cluster.faulty) | set(cluster.slow) | {m for p in cluster.bad_links for m in p}
            )
            tests = sum(1 for t in answer.tests if t.round > 0)
            bound = math.ceil(math.log2(n)) + 2
            print(
                f"{n:>5} {label:<15} {answer.rounds:>6} {bound:>5} {tests:>6} {pairs:>9} "
                f"{tests / pairs:>11.5f} {n - 1:>9} {'yes' if named == truth else 'NO':<6} "
                f"{statistics.median(times):>8.3f}"
            )


if __name__ == "__main__":
    main()
