"""Numbers as people read them in a report: message sizes in binary units, bandwidth in GB/s."""

from __future__ import annotations

_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(size: int | float) -> str:
    """``65536`` → ``64 KiB``; exact powers print without decimals (nccl-tests sizes are)."""
    value = float(size)
    for unit in _BINARY_UNITS:
        if abs(value) < 1024 or unit == _BINARY_UNITS[-1]:
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_gbps(value: float | None) -> str:
    """Bandwidth in GB/s (10^9 bytes per second, as nccl-tests); "n/a" when unknown."""
    if value is None:
        return "n/a"
    return f"{value:.2f}" if value < 100 else f"{value:.1f}"
