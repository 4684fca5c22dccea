"""lines.classify: the C pass (_lines.c) and its Python twin give the same answer on every real log
of the corpus, on generated text and on bad input; the parser explains alike with either."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checks.signatures import identify
from nccldoctor.explain import explain_logs
from nccldoctor.ncclog import lines, parser
from nccldoctor.ncclog.lines import CALL_NEEDLE, CANDIDATE, Sorted, classify_python
from nccldoctor.ncclog.sources import parse_source

REAL = sorted((Path(__file__).parent / "fixtures" / "real").glob("*/log.txt"))
# what _lines.c spells out by hand; a change to the kinds table must be made there too
EXPECTED_CANDIDATE = rb"NCCL(?! INFO (?:\w+): opCount | CALL )"

native = pytest.mark.skipif(not lines.NATIVE, reason="built without a C compiler")


def _c(data: bytes, start: int, end: int) -> Sorted:
    return Sorted._make(lines._classify_c(data, start, end))  # type: ignore[misc]


def test_the_build_made_the_c_pass_where_a_compiler_is():
    """The wheel's build hook compiled _lines.c: a silent fallback would only be slower."""
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler here")
    assert lines.NATIVE


def test_the_c_pass_finds_the_candidates_the_table_defines():
    assert CANDIDATE.pattern == EXPECTED_CANDIDATE
    assert CALL_NEEDLE == b"NCCL CALL "


@native
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.parent.name)
def test_both_sort_a_real_log_alike(path):
    data = path.read_bytes()
    for start, end in ((0, len(data)), (len(data) // 3, len(data)), (0, len(data) // 2)):
        assert _c(data, start, end) == classify_python(data, start, end)


fragments = st.sampled_from(
    [
        b"NCCL",
        b" INFO ",
        b"AllReduce",
        b"_x9",
        b": opCount ",
        b" CALL ",
        b"NCCL CALL ",
        b"NCCL INFO AllReduce: opCount 1a ",
        b"\n",
        b"\r\n",
        b"\x00",
        b":",
        b" ",
        b"NCC",
        b"\xff\xfe",
        b"host:1:2 [0] ",
    ]
)


@native
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(fragments, max_size=60), st.integers(0, 400), st.integers(0, 400))
def test_both_sort_generated_text_alike(parts, start, end):
    data = b"".join(parts)
    assert _c(data, start, end) == classify_python(data, start, end)


@native
@pytest.mark.parametrize(
    "data",
    [
        b"x" * (50 << 20),  # a 50 MB line without its newline: not a line
        b"\x00" * 4096 + b"\n",
        b"\n" * 1000,
        bytes(range(256)) * 64,
    ],
    ids=["long-line", "nul", "empty-lines", "all-bytes"],
)
def test_both_sort_bad_input_alike(data):
    assert _c(data, 0, len(data)) == classify_python(data, 0, len(data))


def test_a_sort_counts_each_kind_of_line():
    data = (
        b"h:1:1 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 count 4 comm 0x5 [nranks=2]\n"
        b"h:1:1 NCCL CALL ncclAllReduce(0x1,0x2,4,7,0,0x5,0x6)\n"
        b"Epoch 1: loss=0.3\n"
        b"h:1:1 [0] NCCL INFO AllReduce: 16 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}\n"
        b"cut without its newline NCCL INFO"
    )
    assert classify_python(data, 0, len(data)) == Sorted(
        4,
        [b"Epoch 0: loss=0.0"],  # its shape
        [b"h:1:1 [0] NCCL INFO AllReduce: 16 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}"],
        1,
    )


def _explained(path: Path) -> str:
    return json.dumps(explain_logs(parse_source(str(path), identify=identify)), sort_keys=True)


@native
def test_the_parser_explains_alike_in_c_and_in_python(monkeypatch):
    """Region sizes differ too (a block in C, 256 KiB in Python): the answer does not."""
    with_c = [_explained(path) for path in REAL]
    monkeypatch.setattr(parser, "classify", classify_python)
    monkeypatch.setattr(parser, "REGION", 256 << 10)
    assert [_explained(path) for path in REAL] == with_c
