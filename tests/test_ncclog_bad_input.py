"""Bad input among good logs: a finding or a clear message for that file, the others still
explained, never a traceback, never a hang."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "logs" / "v2.18-socket-2node"
REPO = Path(__file__).resolve().parent.parent


def _explain(*paths: str) -> tuple[int, dict, str]:
    done = subprocess.run(
        [sys.executable, "-m", "nccldoctor", "explain", "--json", "--no-html", *paths],
        capture_output=True,
        timeout=120,  # a hang fails the test instead of stalling the suite
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
    )
    return done.returncode, json.loads(done.stdout), done.stderr.decode()


def test_bad_files_among_good_ones(tmp_path: Path) -> None:
    good = [str(p) for p in sorted(FIXTURES.glob("*.log"))]
    (tmp_path / "random.bin").write_bytes(os.urandom(1 << 20))
    with open(tmp_path / "one-line.txt", "wb") as out:  # 50 MB and no newline
        for _ in range(50):
            out.write(b"NCCL INFO " * 100_000)
    (tmp_path / "nul.txt").write_bytes(b"\0" * (1 << 20))
    whole = gzip.compress(Path(good[0]).read_bytes())
    (tmp_path / "cut.log.gz").write_bytes(whole[: len(whole) // 2])
    bad = [str(p) for p in sorted(tmp_path.iterdir())]
    # /proc/self/mem is a regular file that every read of fails (EIO), even for root
    rc, doc, stderr = _explain(*bad, "/proc/self/mem", *good)
    assert rc in (0, 1) and "Traceback" not in stderr  # warnings exit 0
    extra = doc
    assert extra["nranks"] == 2 and extra["network"] == "Socket" and extra["init_complete"]
    # each bad file is named with why, in a finding: the parser's read errors, the lines it cut,
    # or the attachments the ticket did not read
    named = {
        f["id"]: {line.split(":")[0] for line in f["evidence"]}
        for f in doc["findings"]
        if f["id"] in ("logs.unreadable", "logs.lines-cut", "ticket.not-read")
    }
    assert named == {
        "logs.unreadable": {str(tmp_path / "cut.log.gz")},  # read up to the cut, then said
        "logs.lines-cut": {str(tmp_path / "one-line.txt")},
        "ticket.not-read": {
            str(tmp_path / "nul.txt"),
            str(tmp_path / "random.bin"),
            "/proc/self/mem",
        },
    }
    assert extra["nccl"]["lines"]["truncated"] >= 1  # the 50 MB line, cut and counted


def test_only_nul_bytes_is_said_and_no_nccl_output(tmp_path: Path) -> None:
    # what a crash or a full disk leaves of a log being written (a tar of nothing, to tarfile)
    (tmp_path / "nul.txt").write_bytes(b"\0" * 4096)
    rc, doc, stderr = _explain(str(tmp_path / "nul.txt"))
    assert rc == 0  # warnings: it says why the file was not read, and how to get NCCL to log
    assert "Traceback" not in stderr
    problems = {f["id"]: f for f in doc["findings"] if f["severity"] != "ok"}
    assert sorted(problems) == ["logs.no-nccl-output", "ticket.not-read"]
    assert problems["ticket.not-read"]["evidence"] == [
        f"{tmp_path / 'nul.txt'}: only NUL bytes: nothing of it reached the disk"
    ]


def test_every_real_log_as_one_ticket() -> None:
    # Unrelated jobs, pasted forms and NCCL versions in one folder: processes that share a
    # host:pid key are folded together although one saw lines the other did not.
    rc, doc, stderr = _explain(str(REPO / "tests" / "fixtures" / "real"))
    assert rc in (0, 1, 3) and "Traceback" not in stderr
    assert doc["findings"] and doc["nccl"]["nccl_version"]
