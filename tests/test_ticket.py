"""A ticket's attachments: sorted by kind, archives unpacked under caps, one JSON section per
kind from `nccldoctor explain`."""

from __future__ import annotations

import gzip
import io
import json
import pickle
import tarfile
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccldoctor import ticket as ticket_module
from nccldoctor.cli.app import app
from nccldoctor.ticket import open_ticket

FIXTURES = Path(__file__).parent / "fixtures"
TESTS = FIXTURES / "nccl_tests"
RAS = FIXTURES / "ras"
LOG = next((FIXTURES / "logs" / "v2.21-ib-gdr-2node").iterdir())
runner = CliRunner()


def kinds(t) -> dict[str, list[str]]:
    return {k: sorted(Path(n).name for n in v) for k, v in t.summary()["kinds"].items()}


def test_each_file_is_sorted_by_its_kind(tmp_path):
    folder = tmp_path / "ticket"
    folder.mkdir()
    for src in (TESTS / "nccl-tests-131-socket.txt", TESTS / "nccl-tests-287-alltoall.txt",
                RAS / "nccl-1911-mismatch.txt", RAS / "nccl-docs-ras.json", LOG):  # fmt: skip
        (folder / src.name).write_bytes(src.read_bytes())
    # the shape of a Flight Recorder dump: a pickled dict with PyTorch's keys
    dump = {"version": "2.4", "pg_config": {}, "pg_status": {}, "entries": []}
    (folder / "nccl_trace_rank_0").write_bytes(pickle.dumps(dump, protocol=4))
    (folder / "core").write_bytes(b"\x7fELF\x00\x00" * 10)
    t = open_ticket([str(folder)], tmp_path / "work")
    found = kinds(t)
    assert found["flight_recorder"] == ["nccl_trace_rank_0"]
    assert found["nccl_tests"] == ["nccl-tests-131-socket.txt", "nccl-tests-287-alltoall.txt"]
    assert found["ras"] == ["nccl-1911-mismatch.txt", "nccl-docs-ras.json"]
    # an nccl-tests output with NCCL's lines in it is a log too
    assert found["logs"] == sorted([LOG.name, "nccl-tests-131-socket.txt"])
    assert [Path(n).name for n, _ in t.skipped] == ["core"]


def test_nccl_tests_output_as_pasted_is_sorted_as_one(tmp_path):
    # rows without a header, a header whose '#' the tracker ate, a footer alone (v1, or '#' eaten)
    folder = tmp_path / "ticket"
    folder.mkdir()
    for name in ("nccl-tests-167-rows-only-max-min.txt", "nccl-tests-249-hash-stripped-header.txt",
                 "bottlerocket-kernel-kit-313-indented-mpirun-rows.txt"):  # fmt: skip
        (folder / name).write_bytes((TESTS / name).read_bytes())
    (folder / "footer.txt").write_text(
        " Out of bounds values : 0 OK\n Avg bus bandwidth    : 2.5\n"
    )
    (folder / "prose.txt").write_text("we ran 8 2 float tests yesterday\n")
    found = kinds(open_ticket([str(folder)], tmp_path / "work"))
    assert found["nccl_tests"] == sorted([
        "bottlerocket-kernel-kit-313-indented-mpirun-rows.txt", "footer.txt",
        "nccl-tests-167-rows-only-max-min.txt", "nccl-tests-249-hash-stripped-header.txt"])  # fmt: skip
    assert "prose.txt" in found["logs"]


def test_flight_recorder_dumps_are_sorted_by_their_readers_own_test(tmp_path):
    """One detector (forensics/flightrec.looks_like_dump) for the ticket and the dump reader."""
    real = pickle.loads(
        (FIXTURES / "flightrec" / "gloo" / "skip" / "pickle" / "nccl_trace_rank_0").read_bytes()
    )
    # the JSON form as nlohmann::json writes it (keys sorted): a long dump's first 64 KiB hold
    # only its entries, pg_config comes after them
    many = {**real, "entries": real["entries"] * 400}
    (tmp_path / "nccl_trace_rank_0.json").write_text(json.dumps(many, sort_keys=True))
    (tmp_path / "nccl_trace_rank_1.json").write_text(json.dumps({**real, "entries": []}))
    (tmp_path / "nccl_trace_rank_2").write_bytes(pickle.dumps(real, protocol=2))
    (tmp_path / "model.pkl").write_bytes(pickle.dumps({"weights": [0.5] * 8}, protocol=4))
    t = open_ticket([str(tmp_path)], tmp_path / "work")
    assert kinds(t)["flight_recorder"] == [
        "nccl_trace_rank_0.json", "nccl_trace_rank_1.json", "nccl_trace_rank_2"]  # fmt: skip
    assert Path(t.skipped[0][0]).name == "model.pkl"  # a pickle, but not a dump


def test_zip_and_tar_gz_are_unpacked_and_named_by_archive_and_member(tmp_path):
    archive = tmp_path / "attachments.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.write(TESTS / "nccl-tests-322-failure.txt", "node1/perf.txt")
        z.write(RAS / "nccl-docs-dead.txt", "ras.txt")
    outer = tmp_path / "ticket.tar.gz"
    with tarfile.open(outer, "w:gz") as tar:
        tar.add(archive, "attachments.zip")
        tar.add(LOG, "logs/rank0.log")
    t = open_ticket([str(outer)], tmp_path / "work")
    names = sorted(f.name for f in t.files)
    assert names == [
        f"{outer}:attachments.zip:node1/perf.txt",
        f"{outer}:attachments.zip:ras.txt",
        f"{outer}:logs/rank0.log",
    ]
    assert all(Path(f.path).is_relative_to(tmp_path / "work") for f in t.files)


def test_members_that_leave_the_archive_and_links_are_not_unpacked(tmp_path):
    archive = tmp_path / "evil.tar"
    with tarfile.open(archive, "w") as tar:
        for name in ("../escape.txt", "/abs.txt", "ok.txt"):
            info = tarfile.TarInfo(name)
            info.size = 5
            tar.addfile(info, io.BytesIO(b"NCCL\n"))
        link = tarfile.TarInfo("passwd")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    t = open_ticket([str(archive)], tmp_path / "work")
    assert [f.name.rsplit(":", 1)[1] for f in t.files] == ["ok.txt"]
    assert {n.rsplit(":", 1)[1]: w.split(":")[0] for n, w in t.skipped} == {
        "../escape.txt": "a path outside the archive", "/abs.txt": "a path outside the archive",
        "passwd": "a symlink"}  # fmt: skip
    assert not (tmp_path / "escape.txt").exists()


def test_a_zip_bomb_is_read_up_to_the_cap_and_said(tmp_path, monkeypatch):
    monkeypatch.setattr(ticket_module, "MAX_TICKET_BYTES", 1 << 20)
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("a.log", b"NCCL INFO x\n" * (1 << 20))  # 12 MiB of text, a few KiB zipped
        z.writestr("b.log", b"never read\n")
    assert bomb.stat().st_size < 100_000
    t = open_ticket([str(bomb)], tmp_path / "work")
    (unpacked,) = t.files
    assert unpacked.size == 1 << 20
    assert t.skipped == [(f"{bomb}:a.log", "the ticket unpacks to over 1 MiB: the rest not read")]


def test_a_damaged_archive_keeps_what_came_before_the_damage(tmp_path):
    good = tmp_path / "t.tar.gz"
    with tarfile.open(good, "w:gz") as tar:
        tar.add(TESTS / "nccl-tests-287-alltoall.txt", "a.txt")
        tar.add(RAS / "nccl-1911-mismatch.txt", "b.txt")
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size - 40])
    t = open_ticket([str(cut)], tmp_path / "work")
    assert [f.name for f in t.files] == [f"{cut}:a.txt"]
    assert [why.split(":")[0] for _, why in t.skipped] == ["archive damaged"]


def test_a_file_of_nul_bytes_is_no_archive_and_is_said(tmp_path):
    # tarfile takes zeros for an empty archive's end marker: the file would vanish unsaid
    nul = tmp_path / "rank3.log"
    nul.write_bytes(b"\x00" * 8192)
    t = open_ticket([str(nul)], tmp_path / "work")
    assert t.files == []
    assert t.skipped == [(str(nul), "only NUL bytes: nothing of it reached the disk")]


def test_a_cut_gzip_is_sorted_by_what_it_held_before_the_cut(tmp_path):
    whole = gzip.compress(LOG.read_bytes())  # less than the head a sniff reads
    cut = tmp_path / "rank0.log.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    t = open_ticket([str(cut)], tmp_path / "work")
    assert kinds(t) == {"logs": ["rank0.log.gz"]} and t.skipped == []  # its reader says the cut


def test_explain_json_has_one_section_per_kind(tmp_path):
    folder = tmp_path / "t"
    folder.mkdir()
    for src in (TESTS / "nccl-398-socket-two-nodes.txt", RAS / "nccl-docs-dead.txt"):
        (folder / src.name).write_bytes(src.read_bytes())
    dump = {"version": "2.4", "pg_config": {}, "entries": []}
    (folder / "nccl_trace_rank_1.json").write_text(json.dumps(dump))
    result = runner.invoke(app, ["explain", "--json", "--no-html", str(folder)])
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert document["nccl_tests"]["runs"][0]["hosts"] == ["ip-172-31-0-112", "ip-172-31-13-129"]
    assert document["ras"]["outputs"][0]["entries"]
    assert document["flight_recorder"]["files"] == [str(folder / "nccl_trace_rank_1.json")]
    assert [d["rank"] for d in document["flight_recorder"]["dumps"]] == [1]
    assert document["area_status"]["nccl_tests"] == "1 file"
    found = {f["id"] for f in document["findings"]}
    assert {"nccl_tests.socket-transport", "ras.dead"} <= found
    # today's keys stay, from the log lines of the nccl-tests output
    assert document["nccl"]["nccl_version"] == "2.4.8" and "network" in document


@pytest.mark.parametrize("content", [b"", b"\x80\x04garbage", b"{not json", b"PK\x03\x04junk"])
def test_odd_files_never_crash_explain(tmp_path, content):
    odd = tmp_path / "odd.bin"
    odd.write_bytes(content)
    result = runner.invoke(app, ["explain", "--json", "--no-html", str(odd)])
    assert result.exit_code in (0, 1), result.output
    assert "Traceback" not in result.output


def test_the_html_report_shows_each_kind(tmp_path):
    folder = tmp_path / "t"
    folder.mkdir()
    for src in (TESTS / "nccl-tests-322-failure.txt", RAS / "nccl-1911-mismatch.txt",
                RAS / "nccl-docs-diag-ok.txt"):  # fmt: skip
        (folder / src.name).write_bytes(src.read_bytes())
    (folder / "nccl_trace_rank_0").write_bytes(
        pickle.dumps({"version": "2.4", "pg_config": {}, "entries": []}, protocol=2)
    )
    page = tmp_path / "r.html"
    result = runner.invoke(app, ["explain", str(folder), "--html", str(page)])
    assert result.exit_code == 1, result.output
    html = page.read_text()
    assert '<h2 id="nccl-tests">' in html and "367.44" in html
    assert '<h2 id="ras">' in html and "fa93daea854b060b" in html
    assert "12.3 ms across 8 RAS peers" in html and "<td>NVIDIA H100</td>" in html
    assert '<h2 id="flight-recorder">' in html and "matched across ranks" in html


def test_the_html_view_tolerates_sections_of_the_wrong_shape():
    from nccldoctor.views.html import render_document_html

    document = {"nccl_tests": {"runs": [{"rows": [{"out_of_place": 3}], "hosts": []}, 7]},
                "ras": {"outputs": "x"}, "flight_recorder": [], "attachments": {"skipped": 1}}  # fmt: skip
    assert "<html" in render_document_html(document)
    document["ras"] = {"outputs": [{"diagnostics": [3, {"inventory": "x", "results": [None]}]}]}
    assert "<html" in render_document_html(document)


def test_an_outsized_output_is_read_up_to_the_cap_and_said(tmp_path, monkeypatch):
    from nccldoctor import explain as explain_module
    from nccldoctor.explain import explain_ticket

    monkeypatch.setattr(explain_module, "MAX_TEXT_BYTES", 2000)
    big = tmp_path / "all_reduce_perf.txt"
    body = (TESTS / "nccl-1039-allreduce-cut.txt").read_text()
    big.write_text(body + (body.splitlines()[-1] + "\n") * 100)
    extra, findings = explain_ticket(open_ticket([str(big)], tmp_path / "w"))
    (run,) = extra["nccl_tests"]["runs"]
    assert run["error"].endswith("read up to there") and run["rows"]
    assert any(f.id == "nccl_tests.read-in-part" and "read up to there" in f.title
               for f in findings)  # fmt: skip


def test_the_explain_document_of_a_ticket_is_valid_against_the_schema(tmp_path):
    from tests.report.helpers import validate_report

    archive = tmp_path / "t.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for src in (TESTS / "nccl-tests-322-failure.txt", RAS / "nccl-docs-dead.txt", LOG):
            z.write(src, src.name)
        z.writestr("core", b"\x7fELF\x02\x01\x01" + b"\x00" * 10)  # a core dump's head
    result = runner.invoke(app, ["explain", "--json", "--no-html", str(archive)])
    document = json.loads(result.stdout)
    assert validate_report(document) == []
    assert document["attachments"]["skipped"] == [
        {"name": f"{archive}:core", "why": "not a kind nccldoctor reads (binary)"}
    ]


def test_a_rank_ras_names_missing_is_shown_where_its_nccl_log_stops(tmp_path):
    folder = tmp_path / "t"
    folder.mkdir()
    logs = FIXTURES / "logs" / "v2.18-socket-2node"
    for log in logs.iterdir():
        (folder / log.name).write_bytes(log.read_bytes())
    # derived: the user guide's INCOMPLETE entry for this job's communicator and rank 1
    text = (RAS / "nccl-docs-dead.txt").read_text()
    text = text.replace("cf264af53edbe986", "5b1e7a3c9d2f4e11").replace("rank: 21", "rank: 1")
    (folder / "ncclras.txt").write_text(text)
    result = runner.invoke(app, ["explain", "--json", "--no-html", str(folder)])
    document = json.loads(result.stdout)
    (missing,) = [
        f for f in document["findings"] if f["title"] == "NCCL RAS: #0-0 is missing rank 1"
    ]
    lines = (logs / "nccl.node-b.5822.log").read_text().splitlines()
    last_nccl = [line for line in lines if " NCCL " in line][-1]
    assert missing["evidence"][0] == f"rank 1's NCCL log stops at: {last_nccl}"


def test_the_rank_the_dumps_name_missing_is_shown_where_its_nccl_log_stops(tmp_path):
    # derived: genuine dumps of a two-rank job where rank 1 skipped an allreduce, beside the
    # NCCL logs of another two-rank job: the link is by global rank, as one job's ticket has it
    folder = tmp_path / "t"
    folder.mkdir()
    logs = FIXTURES / "logs" / "v2.18-socket-2node"
    for path in [*logs.iterdir(), *(FIXTURES / "flightrec" / "gloo" / "skip" / "pickle").iterdir()]:
        (folder / path.name).write_bytes(path.read_bytes())
    result = runner.invoke(app, ["explain", "--json", "--no-html", str(folder)])
    document = json.loads(result.stdout)
    (missing,) = [f for f in document["findings"] if f["id"] == "flightrec.ranks-missing"]
    lines = (logs / "nccl.node-b.5822.log").read_text().splitlines()
    last_nccl = [line for line in lines if " NCCL " in line][-1]
    assert missing["rank"] == 1
    assert missing["evidence"][-1] == f"rank 1's NCCL log stops at: {last_nccl}"


class _Exploit:
    def __reduce__(self):
        return (Path.touch, (Path("/tmp/nccldoctor-pwned-by-a-dump"),))


def test_a_malicious_dump_is_sorted_by_its_bytes_never_unpickled(tmp_path):
    marker = Path("/tmp/nccldoctor-pwned-by-a-dump")
    marker.unlink(missing_ok=True)
    dump = tmp_path / "nccl_trace_rank_0"
    dump.write_bytes(pickle.dumps({"pg_config": {}, "entries": [_Exploit()]}, protocol=4))
    result = runner.invoke(app, ["explain", "--json", "--no-html", str(dump)])
    assert json.loads(result.stdout)["flight_recorder"]["files"] == [str(dump)]
    assert not marker.exists()


def test_an_archive_of_too_many_files_is_read_up_to_the_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(ticket_module, "MAX_MEMBERS", 3)
    archive = tmp_path / "many.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for i in range(10):
            z.writestr(f"rank{i}.log", "x:1:1 [0] NCCL INFO hello\n")
    t = open_ticket([str(archive)], tmp_path / "w")
    assert len(t.files) == 3
    assert t.skipped == [(str(archive), "more than 3 members: the rest not read")]


def test_explain_reports_the_diagnostics_a_jobs_stdout_and_ncclras_d_printed(tmp_path):
    folder = tmp_path / "t"
    folder.mkdir()
    # a job's stdout: NCCL's INFO lines, then the report NCCL_RUN_RAS_DIAGNOSTICS=1 printed
    log = (FIXTURES / "logs" / "v2.26-nvlink-1node" / "nccl.dgx-01.9100.log").read_text()
    (folder / "job.out").write_text(log + (RAS / "nccl-docs-diag-env.txt").read_text())
    (folder / "ncclras-D.txt").write_bytes((RAS / "nccl-docs-diag-ok.txt").read_bytes())
    found = kinds(open_ticket([str(folder)], tmp_path / "work"))
    assert found["ras"] == ["job.out", "ncclras-D.txt"] and found["logs"] == ["job.out"]
    result = runner.invoke(app, ["explain", "--json", "--no-html", str(folder)])
    document = json.loads(result.stdout)
    outputs = {Path(o["source"]).name: o for o in document["ras"]["outputs"]}
    (inventory,) = outputs["ncclras-D.txt"]["diagnostics"][0]["inventory"]
    assert (inventory["gpus_per_node"], inventory["gpu_model"]) == (8, "NVIDIA H100")
    (env,) = [f for f in document["findings"] if f["id"] == "ras.diag-env-mismatch"]
    assert "NCCL_DEBUG differs" in env["title"] and env["severity"] == "warn"
    assert document["nccl"]["nccl_version"]  # the same file read as a log too


def test_a_rank_the_diagnostics_name_is_placed_on_its_host_by_its_nccl_log(tmp_path):
    folder = tmp_path / "t"
    folder.mkdir()
    logs = FIXTURES / "logs" / "v2.26-nvlink-1node"
    for log in logs.iterdir():
        (folder / log.name).write_bytes(log.read_bytes())
    # derived: diagnostics_gpu.cc's uncorrected-ECC line for this job's communicator
    (folder / "ncclras-D.txt").write_text(
        "dgx-01:9100 NCCL DIAG [INFO] ECC: uncorrected volatile errors on rank(s) {2} (worst=1) "
        "across 4 ranks in comm 0x7d1a5e9c3b2f8a40\n"
    )
    result = runner.invoke(app, ["explain", "--json", "--no-html", str(folder)])
    (ecc,) = [f for f in json.loads(result.stdout)["findings"] if f["id"] == "ras.diag-ecc"]
    assert (ecc["severity"], ecc["node"], ecc["rank"]) == ("fail", "dgx-01", 2)
    assert ecc["evidence"][-1] == "rank 2 ran on dgx-01 (its NCCL log)"


def test_log_stops_come_only_from_one_world_sized_communicator():
    from nccldoctor.explain import _world_log_stops

    def comm(nranks, line):
        return {"nranks": nranks, "ranks": [{"rank": 1, "last_line": line}, {"rank": "x"}]}

    assert _world_log_stops({"communicators": [comm(2, "a"), comm(1, "b")]}) == {1: "a"}
    assert _world_log_stops({"communicators": [comm(2, "a"), comm(2, "b")]}) == {}  # which?
    assert _world_log_stops({"communicators": "garbage"}) == {}
    assert _world_log_stops(None) == {}


@pytest.mark.parametrize("mode", ["w", "w:gz", "w:bz2", "w:xz"])
def test_a_tar_is_told_by_its_first_header_through_each_compression(tmp_path, mode):
    archive = tmp_path / "t.tar"
    with tarfile.open(archive, mode) as tar:
        tar.add(TESTS / "nccl-tests-287-alltoall.txt", "a.txt")
    assert ticket_module._is_tar(str(archive))
    nuls = tmp_path / "nuls"
    nuls.write_bytes(bytes(10 << 20))  # what tarfile took for an empty archive, through xz
    assert not ticket_module._is_tar(str(nuls))
