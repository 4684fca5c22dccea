"""A file parsed in stretches by several processes is the file parsed whole (hypothesis)."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checks.signatures import identify
from nccldoctor.explain import explain_logs, judge_logs
from nccldoctor.ncclog.inputs import STRETCH_MIN, BlockReader, Source, cut_before, stretches
from nccldoctor.ncclog.lines import COLL_NEEDLE
from nccldoctor.ncclog.records import LogSet
from nccldoctor.ncclog.sources import _settled, parse_source, parse_sources, parse_stretch

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REAL = sorted((Path(__file__).parent / "fixtures" / "real").glob("*/log.txt"))

lines = st.lists(
    st.one_of(
        st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")),
        st.just(b"y" * 700),  # over max_line below
    ),
    max_size=40,
)


def _cut_points(size: int, fractions: list[float]) -> list[tuple[int, int | None]]:
    cuts = sorted({0, *(int(f * size) for f in fractions)})
    return [*pairwise(cuts), (cuts[-1], None)]


def _blocks(path: Path, stretch: tuple[int, int | None], block: int) -> tuple[bytes, int]:
    reader = BlockReader(str(path), block, 512, stretch)
    text = b"".join(data[start:end] for data, start, end in reader)
    return text, reader.truncated


@SETTINGS
@given(
    lines,
    st.booleans(),
    st.lists(st.floats(0, 1), max_size=5),
    st.sampled_from([5, 64, 1000, 1 << 20]),
)
def test_stretches_read_every_line_once(tmp_path_factory, plan, trailing, fractions, block):
    """Wherever the cuts fall (inside a line, on a newline, in an over-long line), the blocks of
    the stretches are the blocks of the file, and the cut lines are counted once."""
    path = tmp_path_factory.mktemp("s") / "log"
    data = b"\n".join(plan) + (b"\n" if trailing else b"")
    path.write_bytes(data)
    whole, truncated = _blocks(path, (0, None), block)
    parts = [_blocks(path, cut, block) for cut in _cut_points(len(data), fractions)]
    assert b"".join(text for text, _ in parts) == whole
    assert sum(n for _, n in parts) == truncated


def _folded(path: Path, fractions: list[float]) -> LogSet:
    """``path`` parsed in stretches cut as ``parse_sources`` cuts them (before a collective
    line) near the ``fractions`` of its size, folded in order."""
    size = path.stat().st_size
    with path.open("rb") as stream:
        found = (cut_before(stream, int(f * size), COLL_NEEDLE) for f in fractions)
        cuts = [0, *sorted({c for c in found if c is not None})]
    whole: LogSet | None = None
    for cut in [*pairwise(cuts), (cuts[-1], None)]:
        part = parse_stretch(str(path), cut, identify=identify)
        if whole is None:
            whole = part
        else:
            whole.continue_with(part)
    assert whole is not None
    return _settled(whole)


def _view(logs: LogSet) -> tuple[str, list[str]]:
    """What explain says of them: its section and its findings."""
    section = json.dumps(explain_logs(logs), sort_keys=True, default=str)
    return section, [f"{f.id} {f.title}" for f in judge_logs(logs)]


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.parent.name)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fractions=st.lists(st.floats(0, 1), min_size=1, max_size=3))
def test_a_real_log_cut_anywhere_explains_the_same(path, fractions):
    """Before any collective line (while other processes of the file are still in their init,
    tuning or WARN lines): the folded record says what the whole one says."""
    assert _view(_folded(path, fractions)) == _view(parse_source(str(path), identify=identify))


def test_only_big_plain_files_are_cut(tmp_path):
    """Evenly, each cut before the next line that holds the needle or follows an application
    line as one."""
    plain, packed = tmp_path / "big.log", tmp_path / "big.log.gz"
    line = b"a line\n"
    plain.write_bytes(line * (STRETCH_MIN * 3 // len(line)))
    packed.write_bytes(b"\x1f\x8b" + b"\0" * (STRETCH_MIN * 3))
    size = plain.stat().st_size

    def next_line(at: int) -> int:  # the line holding ``at`` may be cut: the second after it
        return (at // len(line) + 2) * len(line)

    thirds = [next_line(size // 3), next_line(2 * size // 3)]
    assert stretches(Source(str(plain), size), 0, b"line") == [
        (0, thirds[0]),
        (thirds[0], thirds[1]),
        (thirds[1], None),
    ]
    nccl = tmp_path / "init.log"  # NCCL's lines only, none of them the needle
    nccl.write_bytes(b"h:1:1 [0] NCCL INFO a line\n" * (STRETCH_MIN * 3 // 26))
    assert stretches(Source(str(nccl), nccl.stat().st_size), 0, b"never there") == [(0, None)]
    assert stretches(Source(str(packed), packed.stat().st_size), 0, b"line") == [(0, None)]
    assert stretches(Source("-", 0), 0, b"line") == [(0, None)]
    assert stretches(Source(str(tmp_path / "gone"), 1 << 40), 0, b"line") == [(0, None)]


def test_one_big_file_is_spread_over_processes(tmp_path):
    """One node's stdout, bigger than two stretches: parsed by two processes, it is the same."""
    real = b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in REAL[:40])
    path = tmp_path / "stdout.log"
    with path.open("wb") as out:
        while out.tell() < 2 * STRETCH_MIN + 12345:
            out.write(real)
    source = Source(str(path), path.stat().st_size)
    assert len(stretches(source, 0, COLL_NEEDLE)) > 1
    spread = parse_sources([source], jobs=2, identify=identify)
    assert _view(spread) == _view(parse_sources([source], jobs=1, identify=identify))
