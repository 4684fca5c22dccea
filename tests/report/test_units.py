"""Every number a view prints carries its unit: binary sizes, s/ms/µs, GB/s and Gbit/s."""

from __future__ import annotations

import pytest

from nccldoctor.units import (
    GBps_of_Gbitps,
    format_bytes,
    format_GBps,
    format_link_rate,
    format_seconds,
)


@pytest.mark.parametrize(
    ("size", "text"),
    [(67108864, "64 MiB"), (4, "4 B"), (262148, "256.0 KiB"), (3 * 2**30, "3 GiB"),
     (None, "unknown"), ("64", "unknown"), (float("nan"), "unknown"), (True, "unknown")],
)  # fmt: skip
def test_sizes_are_binary(size: object, text: str) -> None:
    assert format_bytes(size) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(1.25, "1.25 s"), (0.85, "850 ms"), (4.2e-5, "42 µs"), (512.08, "512 s"), (600.061, "10 min"),
     (9000, "2.5 h"), (None, "unknown")],
)  # fmt: skip
def test_times_pick_the_readable_unit(seconds: object, text: str) -> None:
    assert format_seconds(seconds) == text


def test_rates_are_bytes_per_second_scaled_to_read() -> None:
    assert format_GBps(9.4123) == "9.41 GB/s" and format_GBps(123.45) == "123.5 GB/s"
    # small rates (gloo, a tiny message) read in MB/s or kB/s, never as 0.00 GB/s
    assert format_GBps(0.2) == "200 MB/s" and format_GBps(0.0042) == "4.2 MB/s"
    assert format_GBps(4.2e-4) == "420 kB/s" and format_GBps(0) == "0 GB/s"
    # a link's rating reads on the busbw's scale: one rate unit per view
    assert format_link_rate(100) == "12.50 GB/s" and format_link_rate(15.061) == "1.88 GB/s"
    assert format_GBps(None) == format_link_rate("fast") == "unknown"
    assert GBps_of_Gbitps(100) == 12.5
