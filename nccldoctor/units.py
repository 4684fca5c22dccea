"""Numbers as people read them in a report, each with its unit.

Two rates live in a report and differ by a factor of 8, so each field carries its unit in its
name (docs/report.md): ``_GBps`` is gigabytes (10⁹ bytes) per second as nccl-tests prints busbw
and algbw, ``_Gbitps`` gigabits per second as links are rated (NIC speed, IB port rate, the TCP
probe). A view prints every rate in bytes per second (GB/s, MB/s under 1 GB/s), links too, so
that a busbw and the link that bounds it read on one scale. Sizes are binary (64 MiB), times
h/min/s/ms/µs.
"""

from __future__ import annotations

import math
from typing import Any

_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
BITS_PER_BYTE = 8
UNKNOWN = "unknown"


def known(value: Any) -> bool:
    """A finite number (bools and NaN are not measurements)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def format_bytes(size: Any) -> str:
    """``65536`` → ``64 KiB``; exact powers print without decimals (nccl-tests sizes are)."""
    if not known(size):
        return UNKNOWN
    value = float(size)
    for unit in _BINARY_UNITS:
        if abs(value) < 1024 or unit == _BINARY_UNITS[-1]:
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _rate(value: float) -> str:
    return f"{value:.2f}" if abs(value) < 100 else f"{value:.1f}"


def format_GBps(value: Any) -> str:
    """``9.41 GB/s`` (10⁹ bytes per second, as nccl-tests); under 1 GB/s in MB/s or kB/s
    (``420 MB/s``, never ``0.00 GB/s``); "unknown" when not measured."""
    if not known(value):
        return UNKNOWN
    if value == 0:
        return "0 GB/s"
    if abs(value) >= 1:
        return f"{_rate(value)} GB/s"
    if abs(value) >= 1e-3:
        return f"{value * 1e3:.3g} MB/s"
    return f"{value * 1e6:.3g} kB/s"


def format_link_rate(Gbitps: Any) -> str:
    """A link's rating (Gbit/s, as NICs and ports are sold) in the unit every view uses for
    rates, so that busbw and the link it is bounded by read on one scale: ``12.50 GB/s``."""
    return format_GBps(GBps_of_Gbitps(Gbitps)) if known(Gbitps) else UNKNOWN


def GBps_of_Gbitps(value: float) -> float:
    """A link rate in the unit of busbw, to draw or divide them on one scale."""
    return value / BITS_PER_BYTE


def format_seconds(value: Any) -> str:
    """``10 min``, ``1.25 s``, ``850 ms``, ``42 µs``: the unit that keeps the number readable
    (a watchdog's 600061 ms is ``10 min``)."""
    if not known(value):
        return UNKNOWN
    if abs(value) >= 2 * 3600:
        return f"{value / 3600:.3g} h"
    if abs(value) >= 600:
        return f"{value / 60:.3g} min"
    if abs(value) >= 1:
        return f"{value:.3g} s" if abs(value) < 100 else f"{value:.0f} s"
    if abs(value) >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} µs"
