"""Hostile attachments, made here (the large ones are never committed): `nccldoctor explain` and
`report show` end each with a report or a one-line error, a defined exit code and no traceback,
under 1 GB of memory and 30 s, and say what they left out (nccldoctor/limits.py)."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import re
import resource
import struct
import subprocess
import sys
import tarfile
import time
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from nccldoctor.limits import MAX_DIGITS, MAX_DUMP_BYTES, MAX_JSON_DEPTH
from tests.test_pickscan import far_memo, huge_length, shared_tuples

FIXTURES = Path(__file__).parent / "fixtures"
LOG = FIXTURES / "logs" / "v2.21-ib-gdr-2node" / "rank0.log"
BIG = "9" * (MAX_DIGITS + 700)
MAX_RSS_KB = 1 << 20
MAX_SECONDS = 30
# a runaway case is stopped well before it could take the machine (the cap it must stay under is
# MAX_RSS_KB; this one only keeps a failure from hurting the other tenants)
ADDRESS_SPACE = 6 << 30


def _bigify(text: str) -> str:
    """Every number of ``text`` made too long for Python to read."""
    return re.sub(r"\d+", BIG, text)


def _report() -> dict:
    return json.loads((FIXTURES / "reports" / "explain.json").read_text())


def _fr(entry_extra: dict | None = None, entries: int = 1) -> dict:
    entry = {"process_group": ("0", "default_pg"), "profiling_name": "nccl:all_reduce",
             "collective_seq_id": 1, "record_id": 0, "state": "completed", **(entry_extra or {})}  # fmt: skip
    return {"version": "2.4", "pg_config": {}, "pg_status": {}, "entries": [entry] * entries}


def _fr_pickle_around(payload_ops: bytes) -> bytes:
    """A dump whose one entry's input_sizes are what ``payload_ops`` (pickle opcodes) build."""
    marker = "@@"
    data = pickle.dumps(_fr({"input_sizes": marker}), protocol=2)
    op = b"X" + len(marker).to_bytes(4, "little") + marker.encode()  # BINUNICODE, as written
    assert op in data
    return data.replace(op, payload_ops, 1)


def _zip_of_zeros(path: Path, name: str, gib: int) -> None:
    """A zip holding ``gib`` GiB of NUL bytes in a few MB, written by hand: one deflated MiB
    repeated, each copy ending on a full flush, so that no copy refers back into the one
    before (zipfile would deflate all of it)."""
    mib = bytes(1 << 20)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = deflate.compress(mib) + deflate.flush(zlib.Z_FULL_FLUSH)
    tail = deflate.flush()
    count = gib << 10
    crc = 0
    for _ in range(count):
        crc = zlib.crc32(mib, crc)
    size, packed, raw = count * len(mib), len(block) * count + len(tail), name.encode()
    fields = (0x14, 0, 8, 0, 0x21, crc, packed, size, len(raw))
    with open(path, "wb") as f:
        f.write(struct.pack("<4s5H3L2H", b"PK\x03\x04", *fields, 0) + raw)
        for _ in range(count):
            f.write(block)
        f.write(tail)
        central = f.tell()
        f.write(struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 0x14, *fields, 0, 0, 0, 0, 0, 0) + raw)
        end = f.tell()
        f.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, end - central, central, 0))


# -- the cases: each writes its files under a folder and gives nccldoctor's arguments ----------


def log_digits(tmp: Path) -> list[str]:
    lines = LOG.read_text().splitlines()[:300]
    (tmp / "rank0.log").write_text("\n".join(map(_bigify, lines)) + "\n")
    return ["explain", "--json", str(tmp / "rank0.log")]


def nccl_tests_digits(tmp: Path) -> list[str]:
    text = (FIXTURES / "nccl_tests" / "nccl-tests-131-socket.txt").read_text()
    (tmp / "perf.txt").write_text(_bigify(text))
    return ["explain", "--json", str(tmp / "perf.txt")]


def nccl_tests_rows(tmp: Path) -> list[str]:
    """A sweep of a million rows (a real one has some 30)."""
    lines = (FIXTURES / "nccl_tests" / "nccl-tests-82-broadcast.txt").read_text().splitlines()
    row = next(line for line in lines if line.strip()[:1].isdigit())
    at = lines.index(row)
    (tmp / "perf.txt").write_text("\n".join([*lines[:at], *[row] * 10**6, *lines[at:]]) + "\n")
    return ["explain", "--json", str(tmp / "perf.txt")]


def ras_digits(tmp: Path) -> list[str]:
    (tmp / "ras.txt").write_text(_bigify((FIXTURES / "ras" / "nccl-1911-mismatch.txt").read_text()))
    (tmp / "ras.json").write_text(_bigify((FIXTURES / "ras" / "nccl-docs-ras.json").read_text()))
    return ["explain", "--json", str(tmp)]


def report_digits(tmp: Path) -> list[str]:
    text = json.dumps({**_report(), "extra": {"n": 1}}).replace('"n": 1', f'"n": {BIG}')
    (tmp / "report.json").write_text(text)
    return ["explain", "--json", str(tmp / "report.json")]


def report_deep(tmp: Path) -> list[str]:
    for depth in (1000, 100_000):
        text = json.dumps({**_report(), "extra": {"n": 1}})
        text = text.replace('"n": 1', '"n": ' + "[" * depth + "]" * depth)
        (tmp / f"report-{depth}.doc").write_text(text)
    return ["explain", "--json", str(tmp)]


def report_show_deep(tmp: Path) -> list[str]:
    report_deep(tmp)
    return ["report", "show", str(tmp / "report-1000.doc")]


def report_show_digits(tmp: Path) -> list[str]:
    report_digits(tmp)
    return ["report", "show", str(tmp / "report.json")]


def fr_deep(tmp: Path) -> list[str]:
    depth = 10**6
    (tmp / "nccl_trace_rank_0").write_bytes(_fr_pickle_around(b"]" * depth + b"a" * (depth - 1)))
    json_deep = json.dumps(_fr({"input_sizes": 1})).replace(
        '"input_sizes": 1', '"input_sizes": ' + "[" * 100_000 + "]" * 100_000
    )
    (tmp / "nccl_trace_rank_1").write_text(json_deep)
    return ["explain", "--json", str(tmp)]


def fr_shared(tmp: Path) -> list[str]:
    """Lists that each hold the one below ten times: 1 KB, 10^40 objects to any walk."""
    shared: list = []
    for _ in range(40):
        shared = [shared] * 10
    (tmp / "nccl_trace_rank_0").write_bytes(pickle.dumps(_fr({"input_sizes": shared}), 4))
    # one 100 KB string in every entry's dtypes, 50 times: 10 GB of text to any walk
    long = _fr({"input_dtypes": ["x" * 100_000] * 50}, entries=2000)
    (tmp / "nccl_trace_rank_1").write_bytes(pickle.dumps(long, 4))
    return ["explain", "--json", str(tmp)]


def fr_shared_key(tmp: Path) -> list[str]:
    """A 374-byte dump whose one dict key is a tuple holding the one below three times, 30 deep:
    3^30 objects for the unpickler's own hashing, before anything could count them."""
    (tmp / "nccl_trace_rank_0").write_bytes(shared_tuples())
    return ["explain", "--json", str(tmp)]


def fr_allocations(tmp: Path) -> list[str]:
    """Dumps of some 40 bytes that make the unpickler allocate before it reads on: a length of
    2^40 bytes, a memo index of 2^30 (its memo grows to twice that many slots)."""
    (tmp / "nccl_trace_rank_0").write_bytes(huge_length())
    (tmp / "nccl_trace_rank_1").write_bytes(far_memo())
    return ["explain", "--json", str(tmp)]


def fr_digits(tmp: Path) -> list[str]:
    """Ints of 20,000 bits where a dump's numbers are (each of its fields in turn)."""
    big = 1 << 20_000
    for rank, key in enumerate(("record_id", "collective_seq_id", "time_created_ns")):
        (tmp / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(_fr({key: big}), 2))
    (tmp / "nccl_trace_rank_3").write_bytes(pickle.dumps(_fr({"input_sizes": [[big]]}), 2))
    return ["explain", "--json", str(tmp)]


def fr_many_lists(tmp: Path) -> list[str]:
    """A dump of empty lists, two bytes each (EMPTY_LIST, APPEND), up to the bytes read, and
    one past them."""
    count = (MAX_DUMP_BYTES >> 1) - 100
    head = b"\x80\x02}X\x07\x00\x00\x00entries"  # a dump's start, then more than is read
    (tmp / "nccl_trace_rank_1").write_bytes(head + bytes(MAX_DUMP_BYTES))
    (tmp / "nccl_trace_rank_0").write_bytes(_fr_pickle_around(b"](" + b"]" * count + b"e"))
    return ["explain", "--json", str(tmp)]


def zip_of_lists(tmp: Path) -> list[str]:
    """60M empty lists in a JSON report, zipped to some 100 KB."""
    text = '{"schema_version": 3, "tool_version": "x", "findings": [], "kind": "explain", "x": ['
    body = "[]," * (60 << 20)
    with zipfile.ZipFile(tmp / "ticket.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("report.json", text + body + "[]]}")
    return ["explain", "--json", str(tmp / "ticket.zip")]


def nul_file(tmp: Path) -> list[str]:
    with open(tmp / "core.log", "wb") as f:
        f.truncate(100 << 20)  # sparse: 100 MB of NUL bytes, none written
    return ["explain", "--json", str(tmp / "core.log")]


def zip_of_nuls(tmp: Path) -> list[str]:
    _zip_of_zeros(tmp / "ticket.zip", "rank0.log", 2)
    return ["explain", "--json", str(tmp / "ticket.zip")]


def gz_bomb(tmp: Path) -> list[str]:
    """A .gz log of gzip members that each unpack to the same MiB of NCCL lines."""
    line = (
        b"host:1:1 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x7f1 recvbuff 0x7f2 count 1 "
        b"datatype 7 op 0 root 0 comm 0x55aa [nranks=2] stream 0x5\n"
    )
    member = gzip.compress(line * ((1 << 20) // len(line)), 9)
    with open(tmp / "rank0.log.gz", "wb") as f:
        for _ in range(3 << 10):  # 3 GiB of text
            f.write(member)
    return ["explain", "--json", str(tmp / "rank0.log.gz")]


def many_processes(tmp: Path) -> list[str]:
    with open(tmp / "stdout.log", "w") as f:
        f.writelines(
            f"node{i % 97}:{i}:{i} [0] NCCL INFO Bootstrap : Using eth0\n" for i in range(10**6)
        )
    return ["explain", "--json", "-j", "1", str(tmp / "stdout.log")]


def tar_of_folders(tmp: Path) -> list[str]:
    with tarfile.open(tmp / "ticket.tar.gz", "w:gz", compresslevel=1) as archive:
        for i in range(100_000):
            info = tarfile.TarInfo(f"d{i}")
            info.type = tarfile.DIRTYPE
            archive.addfile(info)
    return ["explain", "--json", str(tmp / "ticket.tar.gz")]


def zip_of_escapes(tmp: Path) -> list[str]:
    with zipfile.ZipFile(tmp / "ticket.zip", "w") as archive:
        for i in range(60_000):
            archive.writestr(f"../x{i}", b"")
    return ["explain", "--json", str(tmp / "ticket.zip")]


def ras_many_ranks(tmp: Path) -> list[str]:
    """ncclras naming a million ranks missing, each on a line of its own too."""
    ranks = range(10**6)
    with open(tmp / "ras.txt", "w") as f:
        f.write(
            "Job summary\n===========\n\nErrors\n======\n\n#0-0 (b3398875b8b2a063) INCOMPLETE\n"
        )
        f.write(f"  Missing communicator data from {len(ranks)} ranks\n")
        f.write("  The missing ranks: " + ", ".join(map(str, ranks)) + "\n")
        f.writelines(f"  Rank {r} -- GPU 0 managed by process {r} on node n{r}\n" for r in ranks)
    return ["explain", str(tmp / "ras.txt"), "--html", str(tmp / "page.html")]


def many_findings(tmp: Path) -> list[str]:
    """5000 cut dumps in one zip: a finding each."""
    cut = pickle.dumps(_fr(), 4)[:-20]
    with zipfile.ZipFile(tmp / "ticket.zip", "w") as archive:
        for rank in range(5000):
            archive.writestr(f"nccl_trace_rank_{rank}", cut)
    return ["explain", str(tmp / "ticket.zip"), "--html", str(tmp / "page.html")]


CASES: dict[str, tuple[Callable[[Path], list[str]], set[str]]] = {
    # the case, and the findings (one of them) that say what was left out
    "log_digits": (log_digits, {"logs.truncated"}),
    "nccl_tests_digits": (nccl_tests_digits, {"nccl_tests.read-in-part"}),
    "nccl_tests_rows": (nccl_tests_rows, {"nccl_tests.read-in-part"}),
    "ras_digits": (ras_digits, {"ras.unreadable"}),
    "report_digits": (report_digits, {"ticket.not-read"}),
    "report_deep": (report_deep, {"ticket.not-read"}),
    "report_show_deep": (report_show_deep, set()),
    "report_show_digits": (report_show_digits, set()),
    "fr_deep": (fr_deep, {"flightrec.dump-unreadable"}),
    "fr_shared": (fr_shared, {"flightrec.dump-unreadable"}),
    "fr_shared_key": (fr_shared_key, {"flightrec.dump-unreadable"}),
    "fr_allocations": (fr_allocations, {"flightrec.dump-unreadable"}),
    "fr_digits": (fr_digits, {"flightrec.dump-unreadable"}),
    "fr_many_lists": (fr_many_lists, {"flightrec.dump-unreadable"}),
    "zip_of_lists": (zip_of_lists, {"ticket.not-read"}),
    "nul_file": (nul_file, {"ticket.not-read"}),
    "zip_of_nuls": (zip_of_nuls, {"ticket.not-read"}),
    "gz_bomb": (gz_bomb, {"logs.unreadable"}),
    "many_processes": (many_processes, {"logs.truncated"}),
    "tar_of_folders": (tar_of_folders, {"ticket.not-read"}),
    "zip_of_escapes": (zip_of_escapes, {"ticket.not-read"}),
    "ras_many_ranks": (ras_many_ranks, {"ras.truncated"}),
    "many_findings": (many_findings, {"more findings not shown"}),
}


def _run(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], int, float]:
    """nccldoctor ``args`` in a process of its own: its result, peak RSS (KiB) and seconds."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    # a child of its own, so that RUSAGE_CHILDREN is this run's peak alone
    measure = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:])\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(peak, file=open('peak', 'w'))\n"
        "sys.exit(done.returncode)\n"
    )
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", measure, sys.executable, "-m", "nccldoctor", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=4 * MAX_SECONDS,
        preexec_fn=cap,
    )  # fmt: skip
    return done, int((cwd / "peak").read_text()), time.monotonic() - start


@pytest.mark.invalid_reports
@pytest.mark.parametrize("name", CASES)
def test_a_hostile_attachment_ends_in_a_report(name: str, tmp_path: Path) -> None:
    build, expected = CASES[name]
    files = tmp_path / "ticket"
    files.mkdir()
    args = build(files)
    done, peak_kb, seconds = _run(args, tmp_path)
    print(f"{name}: peak RSS {peak_kb >> 10} MiB, {seconds:.1f} s, exit {done.returncode}")
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert peak_kb < MAX_RSS_KB, f"peak RSS {peak_kb >> 10} MiB"
    assert seconds < MAX_SECONDS, f"{seconds:.1f} s"
    if args[0] == "report":  # a document it cannot read is a usage error, said in one line
        assert done.returncode == 2, done.stderr
        assert "not read" in done.stderr
        return
    assert done.returncode in (0, 1), done.stderr[-3000:]
    if "--json" in args:
        found = {f["id"] for f in json.loads(done.stdout)["findings"]}
        assert found & expected, found
    else:
        assert len(done.stdout) < 1 << 20, len(done.stdout)
        page = tmp_path / "ticket" / "page.html"
        assert page.stat().st_size < 8 << 20, page.stat().st_size
        assert any(e in done.stdout for e in expected), done.stdout[-3000:]


def test_json_depth_is_told_before_parsing() -> None:
    from nccldoctor.jsondoc import too_deep

    assert not too_deep("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)
    assert too_deep("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))
    # brackets in strings are no nesting, escaped quotes do not end a string
    assert not too_deep(json.dumps({"a": "[" * 200 + '\\"' + "{" * 200, "b": [[1]]}))
    assert not too_deep("[" * 10_000)  # cut, not deep: json.loads says so


def test_a_real_dump_is_read_whole_and_a_shared_one_is_refused() -> None:
    from nccldoctor.forensics.frload import load_dump

    real = (FIXTURES / "flightrec" / "gloo" / "skip" / "pickle" / "nccl_trace_rank_0").read_bytes()
    assert load_dump(real).document is not None
    shared: list = []
    for _ in range(30):
        shared = [shared, shared]
    loaded = load_dump(pickle.dumps(_fr({"input_sizes": shared}), 4))
    assert loaded.document is None and "more than" in (loaded.error or "")
