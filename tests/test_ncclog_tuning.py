"""NCCL's own cost model (graph/tuning.cc ncclTopoGetAlgoTime) redone from a printed table."""

from __future__ import annotations

import pytest

from nccldoctor.ncclog.records import TuningTable
from nccldoctor.ncclog.tuning import algo_time, best, model_ranges

TOPO = {"nranks": 16, "nnodes": 2, "channels": 8}


def test_time_is_latency_plus_size_over_bandwidth():
    assert algo_time("Broadcast", "Ring", "Simple", 20.0, 10.0, 1_000_000, TOPO) == pytest.approx(
        20.0 + 1_000_000 / 10_000
    )
    assert algo_time("Broadcast", "Ring", "Simple", 20.0, 0.0, 1024, TOPO) is None


def test_tree_correction_and_ring_plateau_apply_to_allreduce_only():
    # 64 KiB: log2(65536 >> 6) = 10 -> treeCorrectionFactor[LL][10] = 0.6
    assert algo_time("AllReduce", "Tree", "LL", 5.0, 1.0, 65536, TOPO) == pytest.approx(
        5.0 + 65536 / (1000 * 0.6)
    )
    assert algo_time("Broadcast", "Tree", "LL", 5.0, 1.0, 65536, TOPO) == pytest.approx(
        5.0 + 65.536
    )
    # Ring/Simple across nodes once bytes/(channels*ranks) >= 64: latency x1.4
    big = 64 * 8 * 16
    assert algo_time("AllReduce", "Ring", "Simple", 10.0, 1.0, big, TOPO) == pytest.approx(
        14.0 + big / 1000
    )
    assert algo_time("AllReduce", "Ring", "Simple", 10.0, 1.0, big - 1, TOPO) == pytest.approx(
        10.0 + (big - 1) / 1000
    )


def test_ranges_follow_the_crossover():
    table = TuningTable(
        rows={"Broadcast": {("Tree", "LL"): (5.0, 1.0), ("Ring", "Simple"): (20.0, 10.0)}}
    )
    # Tree: 5 + n/1000, Ring: 20 + n/10000 -> equal at n = 16667; evaluated at powers of two
    assert best(table.rows["Broadcast"], "Broadcast", 16384, TOPO) == ("Tree", "LL")
    assert best(table.rows["Broadcast"], "Broadcast", 32768, TOPO) == ("Ring", "Simple")
    ranges = model_ranges(table, TOPO)
    assert [(r["algorithm"], r["min_bytes"], r["max_bytes"]) for r in ranges] == [
        ("Tree", 0, 32767),
        ("Ring", 32768, None),
    ]
    assert {r["source"] for r in ranges} == {"tuning-model"}
