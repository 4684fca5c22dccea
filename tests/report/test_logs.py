"""Which log lines the page marks: warnings and the lines that state NCCL's choices."""

from __future__ import annotations

from nccldoctor.report.logs import line_kind

INFO = "node-a:1:1 [0] NCCL INFO "


def test_line_kinds() -> None:
    assert line_kind("x:1:1 [0] transport.cc:1 NCCL WARN oops") == "warn"
    assert line_kind("[rank0]: Watchdog caught collective operation timeout") == "warn"
    assert line_kind(f"{INFO}Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0") == "key"
    assert line_kind(f"{INFO}cudaDriverVersion 12040") == ""
