"""The banner and the answer paragraph, from the document alone."""

from __future__ import annotations

import pytest

from nccldoctor.report.answer import answer, banner, nccl_sentence, nccl_summary
from tests.report.conftest import fixture_document


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("healthy-check", "healthy"),
        ("failed-check", "problems"),
        ("hang-check", "hang"),
        ("preflight", "problems"),
        ("explain", "healthy"),
    ],
)
def test_banner(name: str, expected: str) -> None:
    assert banner(fixture_document(name)) == expected


def test_banner_incomplete_and_warnings() -> None:
    assert banner({"completed": False, "verdict": "incomplete"}) == "incomplete"
    assert banner({"verdict": "warnings"}) == "warnings"
    assert banner({"verdict": "something new"}) == "problems"


def test_healthy_answer() -> None:
    assert answer(fixture_document("healthy-check")) == (
        "AllReduce over 4 ranks on 2 nodes used NET/Socket via eth0, GPUDirect RDMA off, "
        "2 channels, Ring with Simple for ≥ 64 KiB, Tree with LL below (predicted by NCCL's "
        "tuning model). No problems found. Allreduce busbw 9.73 GB/s at 64 MiB = 83% of the "
        "11.70 GB/s the TCP probe measured (node-b)."
    )


def test_hang_answer_names_ranks_phase_and_verdict() -> None:
    text = answer(fixture_document("hang-check"))
    assert "The run hung in bandwidth (rank 1 on node-b; rank 0 on node-a)." in text
    assert "Rank 1 never entered the allreduce of 4 MiB; rank 0 waited for it." in text


def test_preflight_answer_has_no_nccl_part() -> None:
    assert answer(fixture_document("preflight")) == (
        "Preflight of gpu-box-7. 1 problem: NCCL_SOCKET_IFNAME=ib0 names no interface on this node."
    )


def test_the_ncclog_sentence_wins_when_present() -> None:
    doc = fixture_document("healthy-check")
    doc["nccl"]["answer"] = "AllReduce used NET/IB with GPUDirect RDMA."
    assert answer(doc).startswith("AllReduce used NET/IB with GPUDirect RDMA. No problems found.")


def test_explain_top_level_keys_are_the_summary_without_nccl_section() -> None:
    doc = fixture_document("explain")
    del doc["nccl"]
    assert nccl_summary(doc)["network"] == "Socket"
    assert answer(doc).startswith("AllReduce over 4 ranks on 2 nodes used NET/Socket via eth0")


def test_many_failures_are_counted_not_listed() -> None:
    findings = [{"severity": "fail", "title": f"t{i}"} for i in range(5)]
    assert answer({"findings": findings}) == "5 problems: t0; t1; t2; and 2 more."


def test_ib_with_gdr_and_odd_values() -> None:
    summary = {
        "network": "IB",
        "interfaces": ["mlx5_0:1"],
        "gdrdma": True,
        "nranks": 16,
        "nodes": ["a", "b"],
        "channels": "many",
        "algorithms": [
            {
                "collective": "AllReduce",
                "algorithm": "Ring",
                "protocol": "Simple",
                "min_bytes": 0,
                "source": "log",
            }
        ],
    }
    assert nccl_sentence(summary) == (
        "AllReduce over 16 ranks on 2 nodes used NET/IB via mlx5_0:1, GPUDirect RDMA on, Ring with Simple."
    )
