"""Geometry of the HTML report's inline SVG charts, computed here so the page needs no script.

Pure functions from report sections to coordinates in SVG user units (y grows downwards); the
template only draws what they return.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nccldoctor.units import GBps_of_Gbitps, format_bytes, format_GBps


@dataclass(frozen=True)
class Box:
    left: float
    top: float
    right: float
    bottom: float


@dataclass(frozen=True)
class Tick:
    pos: float  # x for the x axis, y for the y axis
    label: str


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    label: str  # "busbw 9.41 GB/s at 64 MiB", the point's tooltip


@dataclass(frozen=True)
class Series:
    name: str  # busbw | algbw
    points: list[Point]

    @property
    def path(self) -> str:
        return " ".join(
            f"{'M' if i == 0 else 'L'}{p.x:.1f},{p.y:.1f}" for i, p in enumerate(self.points)
        )


@dataclass(frozen=True)
class HLine:
    y: float
    label: str


@dataclass(frozen=True)
class BandwidthChart:
    width: int
    height: int
    plot: Box
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    series: list[Series]
    wire: HLine | None


def bandwidth_chart(
    rows: Sequence[Mapping[str, Any]],
    tcp_wire_Gbitps: Mapping[str, float | None] | None = None,
    width: int = 720,
    height: int = 300,
) -> BandwidthChart | None:
    """busbw and algbw (GB/s) against message size (log2 x axis), the slowest node's TCP wire
    speed (measured in Gbit/s, drawn in GB/s on the same axis) as a horizontal line; None when
    no row has a positive size and a bandwidth."""
    usable = [r for r in rows if _positive(r.get("size_bytes"))]
    values = {
        name: [
            (r["size_bytes"], r[f"{name}_GBps"]) for r in usable if _number(r.get(f"{name}_GBps"))
        ]
        for name in ("busbw", "algbw")
    }
    if not any(values.values()):
        return None
    wire = min(
        ((gbps, node) for node, gbps in (tcp_wire_Gbitps or {}).items() if _positive(gbps)),
        default=None,
    )
    plot = Box(left=56, top=12, right=width - 32, bottom=height - 40)
    sizes = [s for pairs in values.values() for s, _ in pairs]
    lo, hi = math.log2(min(sizes)), math.log2(max(sizes))
    if hi - lo < 1:
        lo, hi = lo - 1, hi + 1
    wire_GBps = GBps_of_Gbitps(wire[0]) if wire else 0.0
    top = _nice_ceiling(max([v for pairs in values.values() for _, v in pairs] + [wire_GBps]))

    def x_of(size: float) -> float:
        return plot.left + (math.log2(size) - lo) / (hi - lo) * (plot.right - plot.left)

    def y_of(gbps: float) -> float:
        return plot.bottom - max(gbps, 0.0) / top * (plot.bottom - plot.top)

    series = [
        Series(
            name,
            [
                Point(x_of(s), y_of(v), f"{name} {format_GBps(v)} at {format_bytes(s)}")
                for s, v in sorted(pairs)
            ],
        )
        for name, pairs in values.items()
        if pairs
    ]
    return BandwidthChart(
        width=width,
        height=height,
        plot=plot,
        x_ticks=[Tick(x_of(2**k), format_bytes(2**k)) for k in _log2_ticks(lo, hi)],
        y_ticks=[Tick(y_of(v), f"{v:g}") for v in _linear_ticks(top)],
        series=series,
        wire=HLine(y_of(wire_GBps), _wire_label(wire_GBps, wire[1], values["busbw"]))
        if wire
        else None,
    )


def _wire_label(wire_GBps: float, node: str, busbw: list[tuple[float, float]]) -> str:
    """The probe's line; where the busbw ran above it, the probe read below what the wire carries
    (a loaded host's TCP turn), so the line is a lower bound, not the wire."""
    if any(v > wire_GBps for _, v in busbw):
        return f"TCP probe {format_GBps(wire_GBps)} ({node}): a lower bound, busbw ran above it"
    return f"TCP wire {format_GBps(wire_GBps)} ({node})"


def _log2_ticks(lo: float, hi: float, most: int = 8) -> list[int]:
    first, last = math.ceil(lo), math.floor(hi)
    step = max(1, math.ceil((last - first + 1) / most))
    return list(range(first, last + 1, step))


def _nice_ceiling(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 × 10^k at or above ``value`` (at least 1e-3)."""
    value = max(value, 1e-3)
    exponent = math.floor(math.log10(value))
    for mantissa in (1, 2, 2.5, 5, 10):
        candidate = mantissa * 10**exponent
        if candidate >= value * (1 - 1e-9):
            return candidate
    raise AssertionError("unreachable")


def _linear_ticks(top: float, count: int = 5) -> list[float]:
    return [round(top * i / count, 12) for i in range(count + 1)]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _positive(value: Any) -> bool:
    return _number(value) and value > 0


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    status: str  # ok | fail | timeout | skipped | running: the CSS class
    label: str  # "bandwidth: timeout after 30.0 s — detail"
    phase: str  # written inside the bar when it is wide enough


@dataclass(frozen=True)
class Lane:
    label: str
    y: float
    bars: list[Bar] = field(default_factory=list)
    stuck: bool = False


@dataclass(frozen=True)
class Timeline:
    width: int
    height: int
    plot: Box
    lanes: list[Lane]
    x_ticks: list[Tick]
    hang_x: float | None


def timeline(
    phases: Sequence[Mapping[str, Any]],
    hang: Mapping[str, Any] | None = None,
    width: int = 900,
    lane_height: int = 18,
) -> Timeline | None:
    """One lane per node agent and per rank through the phases, seconds from the first start;
    the lanes of stuck ranks flagged and the moment the hang was declared marked."""
    timed = [p for p in phases if _number(p.get("started"))]
    if not timed:
        return None
    start = min(p["started"] for p in timed)
    end = max(_end(p, p["started"]) for p in timed)
    span = max(end - start, 1e-3)
    stuck_list = (hang or {}).get("stuck")
    stuck = {
        (str(s.get("node")), s.get("rank"))
        for s in (stuck_list if isinstance(stuck_list, list) else [])
        if isinstance(s, dict) and _rank(s.get("rank")) == s.get("rank")
    }
    by_lane: dict[tuple[bool, int, str], list[Mapping[str, Any]]] = {}
    for p in timed:  # agents (rank None) before ranks, then by rank and node
        rank = _rank(p.get("rank"))
        key = (rank is not None, rank or 0, str(p.get("node")))
        by_lane.setdefault(key, []).append(p)
    plot = Box(left=170, top=8, right=width - 12, bottom=8 + lane_height * len(by_lane))
    scale = (plot.right - plot.left) / span
    lanes = []
    for index, ((is_rank, rank, node), lane_phases) in enumerate(sorted(by_lane.items())):
        bars = [
            Bar(
                x=plot.left + (p["started"] - start) * scale,
                width=max((_end(p, end) - p["started"]) * scale, 1.5),
                status=str(p.get("status")),
                label=_bar_label(p),
                phase=str(p.get("phase", "")),
            )
            for p in sorted(lane_phases, key=lambda p: p["started"])
        ]
        label = f"rank {rank} ({node})" if is_rank else f"{node} (agent)"
        key = (node, rank if is_rank else None)
        lanes.append(Lane(label, plot.top + index * lane_height, bars, stuck=key in stuck))
    hang_ends = [_end(p, end) for p in timed if p.get("status") == "timeout"]
    return Timeline(
        width=width,
        height=int(plot.bottom + 28),
        plot=plot,
        lanes=lanes,
        x_ticks=[
            Tick(plot.left + t * scale, f"{t:g} s")
            for t in _linear_ticks(_nice_ceiling(span))
            if t <= span * 1.0001
        ],
        hang_x=plot.left + (max(hang_ends) - start) * scale if hang and hang_ends else None,
    )


def _rank(value: Any) -> int | None:
    """A rank number; anything that is not an int counts as the node agent's lane."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _end(phase: Mapping[str, Any], default: float) -> float:
    ended = phase.get("ended")
    return ended if _number(ended) and ended >= phase["started"] else default


def _bar_label(phase: Mapping[str, Any]) -> str:
    label = f"{phase.get('phase')}: {phase.get('status')}"
    if _number(phase.get("duration_s")):
        label += f" after {phase['duration_s']:.1f} s"
    return f"{label} — {phase['detail']}" if phase.get("detail") else label
