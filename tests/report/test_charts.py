"""The SVG geometry: log2 x axis, linear y axis from 0, the TCP wire line, timeline lanes."""

from __future__ import annotations

import math

import pytest

from nccldoctor.views.charts import bandwidth_chart, timeline
from tests.report.conftest import fixture_document


def _row(size: int, busbw: float | None, algbw: float | None = None) -> dict:
    return {"size_bytes": size, "busbw_GBps": busbw, "algbw_GBps": algbw}


def test_points_on_log2_x_and_linear_y() -> None:
    chart = bandwidth_chart(
        [_row(1024, 2.0, 1.0), _row(4096, 8.0, 4.0), _row(2048, 4.0, 2.0)], {}, 420, 240
    )
    busbw = next(s for s in chart.series if s.name == "busbw")
    xs = [p.x for p in busbw.points]
    assert xs == sorted(xs)  # sorted by size
    # log2 spacing: 1 KiB -> 2 KiB -> 4 KiB are equal steps, spanning the plot
    assert xs[1] - xs[0] == pytest.approx(xs[2] - xs[1])
    assert (xs[0], xs[2]) == (chart.plot.left, chart.plot.right)
    # y: 10 GB/s is the nice top (8 -> 10), 0 at the bottom
    height = chart.plot.bottom - chart.plot.top
    assert [p.y for p in busbw.points] == pytest.approx(
        [chart.plot.bottom - f * height for f in (0.2, 0.4, 0.8)]
    )
    assert [t.label for t in chart.y_ticks] == ["0", "2", "4", "6", "8", "10"]
    assert [t.label for t in chart.x_ticks] == ["1 KiB", "2 KiB", "4 KiB"]
    assert busbw.path.startswith(f"M{xs[0]:.1f},") and busbw.path.count("L") == 2
    assert busbw.points[2].label == "busbw 8.00 GB/s at 4 KiB"


def test_wire_line_is_the_slowest_node_in_gigabytes_and_raises_the_top() -> None:
    """The probe measures Gbit/s; the axis is busbw's GB/s: 100 Gbit/s is drawn at 12.5 GB/s."""
    chart = bandwidth_chart([_row(8, 1.0), _row(64, 3.0)], {"a": 240.0, "b": 100.0, "c": None})
    assert chart.wire.label == "TCP wire 12.50 GB/s (b)"
    assert [t.label for t in chart.y_ticks][-1] == "20"  # 12.5 -> nice 20
    assert chart.wire.y == pytest.approx(
        chart.plot.bottom - 12.5 / 20 * (chart.plot.bottom - chart.plot.top)
    )


def test_a_probe_below_the_busbw_is_labelled_a_lower_bound() -> None:
    """busbw cannot exceed the wire it crosses: a probe that read below it is not the wire."""
    chart = bandwidth_chart([_row(8, 1.0), _row(64, 3.0)], {"b": 8.0})  # 1 GB/s, busbw 3
    assert chart.wire.label == "TCP probe 1.00 GB/s (b): a lower bound, busbw ran above it"


def test_busbw_at_the_wire_rate_meets_the_wire_line() -> None:
    """A sweep that fills a 15.06 Gbit/s wire (1.8825 GB/s busbw) ends on the wire line, not
    8x below it as when the probe's Gbit/s was drawn as GB/s."""
    wire_gbitps = 15.06
    chart = bandwidth_chart(
        [_row(2**20, 0.9, 0.9), _row(2**26, wire_gbitps / 8, wire_gbitps / 8)],
        {"node-b": wire_gbitps},
    )
    busbw = next(s for s in chart.series if s.name == "busbw")
    assert busbw.points[-1].y == pytest.approx(chart.wire.y)
    assert busbw.points[0].y > chart.wire.y + 10  # a slower point sits visibly below it


def test_single_size_is_centred_and_bad_rows_are_skipped() -> None:
    chart = bandwidth_chart(
        [
            _row(0, 5.0),
            _row(-4, 1.0),
            _row(256, float("nan")),
            _row(256, 2.5, True),
            {"size_bytes": "x"},
        ],
        {},
    )
    (series,) = chart.series  # algbw True is no number
    assert series.name == "busbw" and len(series.points) == 1
    point = series.points[0]
    assert point.x == pytest.approx((chart.plot.left + chart.plot.right) / 2)


def test_nothing_to_draw_is_none() -> None:
    assert bandwidth_chart([], {}) is None
    assert bandwidth_chart([_row(0, 1.0), _row(64, None)], {"a": 10}) is None


def test_many_sizes_keep_at_most_eight_x_ticks() -> None:
    rows = [_row(2**k, float(k)) for k in range(0, 34)]
    chart = bandwidth_chart(rows, {})
    assert 2 <= len(chart.x_ticks) <= 8
    assert chart.x_ticks[0].label == "1 B"


def test_timeline_lanes_agents_first_then_ranks_and_the_hang_marked() -> None:
    doc = fixture_document("hang-check")
    chart = timeline(doc["phases"], doc["hang"])
    assert [lane.label for lane in chart.lanes] == [
        "node-a (agent)",
        "node-b (agent)",
        "rank 0 (node-a)",
        "rank 1 (node-b)",
    ]
    assert [lane.stuck for lane in chart.lanes] == [False, False, True, True]
    last = chart.lanes[3].bars[-1]
    assert last.status == "timeout" and "bandwidth: timeout after 30.0 s" in last.label
    assert chart.hang_x == pytest.approx(last.x + last.width)
    assert chart.hang_x == pytest.approx(chart.plot.right)
    assert chart.lanes[0].bars[0].x == chart.plot.left


def test_timeline_without_hang_or_times() -> None:
    doc = fixture_document("healthy-check")
    assert timeline(doc["phases"], None).hang_x is None
    assert timeline([{"node": "a", "phase": "x", "status": "ok", "started": None}]) is None
    running = timeline(
        [
            {
                "node": "a",
                "rank": 0,
                "phase": "init",
                "status": "running",
                "started": 5.0,
                "ended": None,
            }
        ]
    )
    assert running.lanes[0].bars[0].width == 1.5 and not math.isnan(running.lanes[0].bars[0].x)
