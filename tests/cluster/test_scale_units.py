"""What keeps a check of many nodes in bounds: the TCP turns and the master's merge."""

from __future__ import annotations

import gc
import time

from nccldoctor.cluster.timeouts import MIN_TCP_TURN, Timeouts, timeouts_from
from tests.cluster.synthetic import synthetic_run


def test_tcp_turns_fit_the_total_budget():
    t = Timeouts()
    assert t.tcp_turn(1) == t.tcp_turn(7) == t.tcp_probe  # 7 x 2 s fit the 16 s
    assert t.tcp_turn(63) * 63 == t.tcp_total
    assert t.tcp_turn(511) == MIN_TCP_TURN  # the floor; the turns then add up past the total
    assert timeouts_from(None, ["tcp_total=4"]).tcp_turn(7) == 4 / 7
    assert timeouts_from(None, ["tcp_probe=0.5"]).tcp_turn(7) == 0.5


def _merge_seconds(nodes: int) -> float:
    run = synthetic_run(nodes, hang_rank=3)
    gc.disable()
    try:
        start = time.perf_counter()
        report = run.merge()
        elapsed = time.perf_counter() - start
    finally:
        gc.enable()
    assert len(report.extra["ranks"]) == 2 * nodes
    assert len(report.extra["cluster"]["nodes"]) == nodes
    assert report.extra["hang"]["stuck"] == [
        {"node": "node1", "rank": 3, "phase": "allreduce_correctness", "last_nccl_line": None}
    ]
    return elapsed


def test_master_merge_is_linear_in_nodes():
    _merge_seconds(8)  # imports and caches, once
    small = min(_merge_seconds(64) for _ in range(3))
    large = min(_merge_seconds(512) for _ in range(2))
    assert large < small * 8 * 3  # 8x the nodes: about 8x the time (quadratic would be 64x)
