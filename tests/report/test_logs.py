"""The per-rank log budget: WARN and key lines survive, the tail fills the rest, order kept."""

from __future__ import annotations

from nccldoctor.report.logs import LOG_LINES_PER_RANK, MAX_LINE_CHARS, keep_log_lines, line_kind

INFO = "node-a:1:1 [0] NCCL INFO "


def test_short_logs_are_kept_whole() -> None:
    lines = [f"{INFO}line {i}" for i in range(10)]
    assert keep_log_lines(lines) == lines


def test_long_log_keeps_warns_key_lines_and_the_tail_in_order() -> None:
    lines = [f"{INFO}filler {i}" for i in range(2000)]
    lines[3] = f"{INFO}Using network Socket"
    lines[500] = "node-a:1:1 [0] misc/socket.cc:484 NCCL WARN socketPollConnect: Connection refused"
    kept = keep_log_lines(lines)
    assert len(kept) == LOG_LINES_PER_RANK
    assert kept[0] == lines[3] and kept[1] == lines[500]
    assert kept[2:] == lines[-(LOG_LINES_PER_RANK - 2) :]


def test_warns_beyond_the_budget_push_out_key_lines_never_the_tail() -> None:
    lines = [f"{INFO}Bootstrap: Using eth0:198.18.0.1<0>"] * 5 + [
        f"x:1:1 [0] f.cc:1 NCCL WARN w{i}" for i in range(300)
    ]
    kept = keep_log_lines(lines, limit=20)
    assert len(kept) == 20
    assert all(line_kind(k) == "warn" for k in kept)
    assert kept[-1] == lines[-1]


def test_huge_and_crlf_lines_are_cut() -> None:
    kept = keep_log_lines(["a" * 10_000 + "\r\n", "b\n"])
    assert kept == ["a" * MAX_LINE_CHARS, "b"]


def test_line_kinds() -> None:
    assert line_kind("x:1:1 [0] transport.cc:1 NCCL WARN oops") == "warn"
    assert line_kind("[rank0]: Watchdog caught collective operation timeout") == "warn"
    assert line_kind(f"{INFO}Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0") == "key"
    assert line_kind(f"{INFO}cudaDriverVersion 12040") == ""
