"""Safe files: a ticket's folders, globs and archives are read without leaving the ticket,
without hanging on what a stranger planted (links out and in loops, FIFOs, devices, names
too long to unpack), each thing not read a row of ``ticket.not-read``, and every finding names
an archive's member as ``archive:member``, never nccldoctor's working folder."""

from __future__ import annotations

import io
import json
import os
import pickle
import signal
import stat
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccldoctor.cli.app import app
from nccldoctor.ticket import open_ticket

REPO = Path(__file__).resolve().parents[1]
LOG = Path(__file__).parent / "fixtures" / "logs" / "v2.21-ib-gdr-2node" / "rank0.log"
LINE = b"host:1:1 [0] NCCL INFO hello\n"
runner = CliRunner()


def _planted(tmp_path: Path) -> Path:
    """A ticket folder with a log, links in and out, links that loop, and a FIFO."""
    outside = tmp_path / "home"
    outside.mkdir()
    (outside / "secret.log").write_bytes(LINE)
    ticket = tmp_path / "ticket"
    (ticket / "sub").mkdir(parents=True)
    (ticket / "rank0.log").write_bytes(LINE)
    (ticket / "sub" / "rank1.log").write_bytes(LINE)
    (ticket / "again.log").symlink_to("rank0.log")  # inside to inside: read (once)
    (ticket / "shadow.log").symlink_to(outside / "secret.log")
    (ticket / "home").symlink_to(outside)
    (ticket / "loop1").symlink_to(".")
    (ticket / "loop2").symlink_to(".")
    (ticket / "sub" / "up").symlink_to("..")
    os.mkfifo(ticket / "pipe.log")  # opened, it would block the reader until someone wrote
    return ticket


def _rows(t) -> dict[str, str]:
    return {Path(name).name: why for name, why in t.skipped}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("how", ["folder", "glob", "recursive glob"])
def test_folders_and_globs_stay_inside_the_ticket_and_end_on_loops(tmp_path, how):
    ticket = _planted(tmp_path)
    arg = {"folder": str(ticket), "glob": f"{ticket}/*.log", "recursive glob": f"{ticket}/**"}
    t = open_ticket([arg[how]], tmp_path / "work")
    read = sorted(Path(f.name).relative_to(ticket).as_posix() for f in t.files)
    assert read == (["rank0.log"] if how == "glob" else ["rank0.log", "sub/rank1.log"])
    rows = _rows(t)
    assert rows["shadow.log"] == "a symlink out of the ticket: not followed"
    assert rows["pipe.log"] == "a FIFO: not read"
    if how != "glob":
        assert rows["home"] == "a symlink out of the ticket: not followed"
    assert all("secret" not in f.name and "home" not in f.name for f in t.files)


def test_a_device_in_a_folder_is_a_row(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    (tmp_path / "zero.log").unlink(missing_ok=True)
    os.mknod(tmp_path / "zero.log", stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero
    (tmp_path / "rank0.log").write_bytes(LINE)
    t = open_ticket([str(tmp_path)], tmp_path / ".work")
    assert [Path(f.name).name for f in t.files] == ["rank0.log"]
    assert _rows(t) == {"zero.log": "a device: not read"}


def _member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"") -> tuple:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, len(data)
    if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
        info.linkname = "/etc/passwd"
    if kind == tarfile.CHRTYPE:
        info.devmajor, info.devminor = 1, 5
    return info, io.BytesIO(data) if data else None


def test_links_fifos_devices_and_over_long_names_in_a_tar_are_rows_and_the_rest_is_read(
    tmp_path,
):
    archive = tmp_path / "t.tar"
    long = "x" * 300 + ".log"  # a name the file system refuses (ENAMETOOLONG)
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, data in [
            ("first.log", tarfile.REGTYPE, LINE),
            ("link", tarfile.SYMTYPE, b""),
            ("hard", tarfile.LNKTYPE, b""),
            ("fifo", tarfile.FIFOTYPE, b""),
            ("zero", tarfile.CHRTYPE, b""),
            (f"dir/{long}", tarfile.REGTYPE, LINE),
            ("last.log", tarfile.REGTYPE, LINE),
        ]:
            tar.addfile(*_member(name, kind, data))
    t = open_ticket([str(archive)], tmp_path / "work")
    assert [f.name for f in t.files] == [f"{archive}:first.log", f"{archive}:last.log"]
    assert {n.removeprefix(f"{archive}:"): w for n, w in t.skipped} == {
        "link": "a symlink: not followed",
        "hard": "a hard link: not followed",
        "fifo": "a FIFO: not read",
        "zero": "a device: not read",
        f"dir/{long}": "cannot be unpacked: File name too long",
    }


def test_a_symlink_and_an_over_long_name_in_a_zip_are_rows_and_the_rest_is_read(tmp_path):
    archive = tmp_path / "t.zip"
    with zipfile.ZipFile(archive, "w") as z:
        link = zipfile.ZipInfo("passwd")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16  # as `zip --symlinks` keeps one
        z.writestr(link, "/etc/passwd")
        z.writestr("y" * 256 + "/rank0.log", LINE)
        z.writestr("rank1.log", LINE)
    t = open_ticket([str(archive)], tmp_path / "work")
    assert [f.name for f in t.files] == [f"{archive}:rank1.log"]
    assert [w for _, w in t.skipped] == [
        "a symlink: not followed",
        "cannot be unpacked: File name too long",
    ]


class _Exploit:
    def __reduce__(self):
        return (print, ("never run",))


def test_findings_and_sections_name_members_as_archive_member(tmp_path):
    archive = tmp_path / "ticket.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.write(LOG, "logs/rank0.log")
        z.writestr("nccl_trace_rank_0", pickle.dumps({"entries": [_Exploit()]}, protocol=4))
    result = runner.invoke(app, ["explain", "--json", str(archive)])
    assert "nccldoctor-explain" not in result.stdout
    document = json.loads(result.stdout)
    refused = next(f for f in document["findings"] if f["id"] == "flightrec.dump-refused")
    assert refused["evidence"][0].startswith(f"{archive}:nccl_trace_rank_0: ")
    assert f"{archive}:nccl_trace_rank_0" in refused["title"]
    assert document["nccl"]["sources"] == [f"{archive}:logs/rank0.log"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stopped_explain_removes_its_working_folder(tmp_path, sig):
    """Stopped while it reads (stdin, which never ends here), explain removes the archives it
    unpacked; SIGTERM's own action left them (1.4 GB once)."""
    archive = tmp_path / "ticket.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.write(LOG, "rank0.log")
    temp = tmp_path / "tmp"
    temp.mkdir()
    explain = subprocess.Popen(
        [sys.executable, "-m", "nccldoctor", "explain", str(archive), "-"],
        cwd=REPO,
        env={**os.environ, "TMPDIR": str(temp)},
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while not list(temp.glob("nccldoctor-explain-*/*/rank0.log")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(temp.glob("nccldoctor-explain-*/*/rank0.log")), "explain never unpacked"
    time.sleep(0.2)  # into the read of stdin
    explain.send_signal(sig)
    try:
        _, err = explain.communicate(timeout=20)
    finally:
        explain.kill()
    assert explain.returncode == 128 + sig, err
    assert list(temp.iterdir()) == []
