"""Inputs: files, folders, globs, .gz, stdin; blocks of whole lines; capped line length."""

from __future__ import annotations

import gzip

import pytest

from nccldoctor.explain import explain
from nccldoctor.ncclog.inputs import BlockReader, InputError, expand_inputs, file_sources


def _lines(name, **kw):
    reader = BlockReader(name, **kw)
    return b"".join(d[s:e] for d, s, e in reader).split(b"\n")[:-1], reader


def test_expand_files_folders_globs(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "r0.log").write_text("x\n")
    (tmp_path / "a" / "deep").mkdir()
    (tmp_path / "a" / "deep" / "r1.log.gz").write_bytes(gzip.compress(b"y\n"))
    (tmp_path / "a" / ".hidden").write_text("z\n")
    (tmp_path / "b.txt").write_text("w\n")
    names = [s.name for s in expand_inputs([str(tmp_path / "a"), str(tmp_path / "*.txt"), "-"])]
    assert names == [
        str(tmp_path / "a" / "deep" / "r1.log.gz"),
        str(tmp_path / "a" / "r0.log"),
        str(tmp_path / "b.txt"),
        "-",
    ]
    with pytest.raises(InputError, match=r"no such file: .*nope"):
        expand_inputs([str(tmp_path / "nope"), str(tmp_path / "a")])
    with pytest.raises(InputError):
        expand_inputs([str(tmp_path / "*.none")])


@pytest.mark.parametrize("block", [1, 3, 10, 1 << 20])
def test_blocks_hold_whole_lines(tmp_path, block):
    path = tmp_path / "f.log"
    text = b"alpha\nbeta\n\ngamma delta\nend-without-newline"
    path.write_bytes(text)
    lines, reader = _lines(str(path), block=block, max_line=100)
    assert lines == text.split(b"\n")
    assert reader.truncated == 0


@pytest.mark.parametrize("block", [5, 64, 1 << 20])
def test_long_lines_are_cut_and_counted(tmp_path, block):
    path = tmp_path / "f.log"
    path.write_bytes(b"before\n" + b"x" * 1000 + b"\nafter\n" + b"y" * 300)
    lines, reader = _lines(str(path), block=block, max_line=100)
    assert lines == [b"before", b"x" * 100, b"after", b"y" * 100]
    assert reader.truncated == 2


def test_gzip_and_unreadable(tmp_path):
    path = tmp_path / "f.gz"
    path.write_bytes(gzip.compress(b"one\ntwo\n"))
    assert _lines(str(path))[0] == [b"one", b"two"]
    broken = tmp_path / "broken.gz"
    broken.write_bytes(gzip.compress(b"one\ntwo\n" * 1000)[:40])
    _, reader = _lines(str(broken))
    assert reader.read_error is not None
    missing = BlockReader(str(tmp_path / "gone"))
    assert list(missing) == [] and "FileNotFoundError" in (missing.read_error or "")


def test_a_log_deleted_while_it_is_read_is_an_absence_or_a_read_error(tmp_path):
    kept, gone, late = (tmp_path / f"nccl.h.{pid}.log" for pid in (1, 2, 3))
    for path in (kept, late):
        path.write_text("h:1:1 [0] NCCL INFO Bootstrap: Using eth0:198.18.0.2<0>\n")
    sources = file_sources([kept, gone, late])  # ``gone`` was deleted after the folder listing
    assert [s.name for s in sources] == [str(kept), str(late)]
    late.unlink()  # deleted between the listing and the parse
    _, findings = explain(sources)
    assert [f.id for f in findings] == ["logs.unreadable"]
