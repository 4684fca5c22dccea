"""Which log lines the page marks: warnings and the lines that state NCCL's choices."""

from __future__ import annotations

import random

from nccldoctor.report.logs import KEY_MARKERS, WARN_MARKERS, line_kinds

INFO = "node-a:1:1 [0] NCCL INFO "


def test_line_kinds() -> None:
    assert line_kinds(
        [
            "x:1:1 [0] transport.cc:1 NCCL WARN oops",
            "[rank0]: Watchdog caught collective operation timeout",
            f"{INFO}Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0",
            f"{INFO}cudaDriverVersion 12040",
        ]
    ) == ["warn", "warn", "key", ""]
    assert line_kinds([]) == []
    assert line_kinds([""]) == [""]


def _one_at_a_time(line: str) -> str:
    """The rule stated per line: a warning marker wins over a key marker."""
    if any(marker in line for marker in WARN_MARKERS):
        return "warn"
    return "key" if any(marker in line for marker in KEY_MARKERS) else ""


def test_the_joined_search_marks_each_line_as_the_per_line_rule_does() -> None:
    pieces = [*KEY_MARKERS, *WARN_MARKERS, "x", " ", "\n", "NCCL", "WARN", "via", "Using", "", "é"]
    rng = random.Random(16)
    for _ in range(300):
        lines = [
            "".join(rng.choices(pieces, k=rng.randint(0, 4))) for _ in range(rng.randint(0, 9))
        ]
        assert line_kinds(lines) == [_one_at_a_time(line) for line in lines], lines
