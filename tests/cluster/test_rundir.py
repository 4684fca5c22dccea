"""A run's own folder (nccldoctor/cluster/rundir.py): made new, its log's first line written, the
node's ``latest`` pointed at it; a --out that cannot take it is said in one line."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest

from nccldoctor.cluster.rundir import (
    LATEST,
    RunFolderError,
    bad_run_name,
    make_run_folder,
    new_run_name,
)


def test_a_run_folder_is_new_and_the_newest_is_latest(tmp_path):
    first, second = tmp_path / "n0" / "a", tmp_path / "n0" / "b"
    make_run_folder(first, "agent.log", "run a", latest=True)
    make_run_folder(second, "agent.log", "run b", latest=True)
    assert (first / "agent.log").read_text() == "run a\n"
    assert os.readlink(tmp_path / "n0" / LATEST) == "b"
    assert sorted(p.name for p in (tmp_path / "n0").iterdir()) == ["a", "b", LATEST]
    make_run_folder(tmp_path / "n0" / "b.local1", "local-rank1.log", "rank 1", latest=False)
    assert os.readlink(tmp_path / "n0" / LATEST) == "b"  # only local rank 0 moves it
    with pytest.raises(RunFolderError, match="already holds a run"):
        make_run_folder(first, "agent.log", "run a again", latest=True)
    assert (first / "agent.log").read_text() == "run a\n"


def test_run_names():
    name = new_run_name()
    assert bad_run_name(name) is None and name != new_run_name()
    assert bad_run_name("slurm-4711.0") is None
    for bad in ("", LATEST, "../x", "a/b", ".hidden", "-rf", "x" * 101, "sp ace"):
        assert bad_run_name(bad), bad


@pytest.mark.parametrize("in_the_way", [".", "n0", "n0/r"])
def test_a_file_in_the_way_is_named(tmp_path, in_the_way):
    out = tmp_path / "out"
    if in_the_way == ".":
        out.write_text("")
    else:
        (out / in_the_way).parent.mkdir(parents=True, exist_ok=True)
        (out / in_the_way).write_text("")
    with pytest.raises(RunFolderError) as raised:
        make_run_folder(out / "n0" / "r", "agent.log", "", latest=True)
    named = out if in_the_way == "." else out / in_the_way
    assert str(raised.value) == (
        f"cannot write this run's files under --out {out}: {named} is a file"
        + ("" if in_the_way == "n0/r" else f" ({out / 'n0' / 'r'})")
    )


@contextlib.contextmanager
def mounted(target: Path, *how: str):
    """``mount`` (root only): a read-only bind or a tiny tmpfs, taken down on every way out."""
    target.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting needs root")
    subprocess.run(["mount", *how, str(target)], check=True)
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=True)


def test_a_read_only_out_is_refused_before_the_run(tmp_path):
    read_only = mounted(tmp_path / "ro", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs")
    refused = pytest.raises(RunFolderError, match=r"under --out .*/ro: Read-only file system \(")
    with read_only as out, refused:
        make_run_folder(out / "n0" / "r", "agent.log", "x", latest=True)


def test_a_full_disk_is_refused_and_leaves_no_folder(tmp_path):
    with mounted(tmp_path / "full", "-t", "tmpfs", "-o", "size=64k", "tmpfs") as out:
        with contextlib.suppress(OSError), open(out / "filler", "wb") as f:
            f.write(b"\0" * 128 * 1024)
        with pytest.raises(RunFolderError, match="No space left on device"):
            make_run_folder(out / "n0" / "r", "agent.log", "the first line", latest=True)
        assert not (out / "n0" / "r").exists() and not (out / "n0" / LATEST).exists()
