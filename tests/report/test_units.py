"""Every number a view prints carries its unit: binary sizes, s/ms/µs, GB/s and Gbit/s."""

from __future__ import annotations

import pytest

from nccldoctor.units import (
    GBps_of_Gbitps,
    format_bytes,
    format_Gbitps,
    format_GBps,
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
    [(1.25, "1.25 s"), (0.85, "850 ms"), (4.2e-5, "42 µs"), (512.08, "512 s"), (None, "unknown")],
)
def test_times_pick_the_readable_unit(seconds: object, text: str) -> None:
    assert format_seconds(seconds) == text


def test_rates_say_which_giga() -> None:
    assert format_GBps(9.4123) == "9.41 GB/s" and format_GBps(123.45) == "123.5 GB/s"
    assert format_Gbitps(100) == "100 Gbit/s" and format_Gbitps(15.061) == "15.06 Gbit/s"
    assert format_GBps(None) == format_Gbitps("fast") == "unknown"
    assert GBps_of_Gbitps(100) == 12.5
