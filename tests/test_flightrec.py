"""Flight Recorder dumps: genuine ones from a two-process gloo job, matched across ranks, and bad
input (a pickle that would run code, a truncated dump, another version's keys) refused or read
in part with a finding, never a traceback."""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

from checks import run_checks
from nccldoctor.forensics.flightrec import Analysis, analyse, looks_like_dump, rank_of
from nccldoctor.forensics.frload import load_dump
from tests.ports import free_port

RANK_SCRIPT = Path(__file__).parent / "flightrec_rank.py"
JOB_TIMEOUT_S = 120


def run_job(mode: str, out: Path, buffer: int = 2000, allreduces: int = 3) -> Path:
    """Two gloo ranks on 127.0.0.1 that each write their real dump under ``out``."""
    port = free_port()
    procs = []
    for rank in (0, 1):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "TORCH_FR_BUFFER_SIZE": str(buffer),
            "ALLREDUCES": str(allreduces),
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, str(RANK_SCRIPT), mode, str(out)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    for proc in procs:
        try:
            output, _ = proc.communicate(timeout=JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
        assert proc.returncode == 0, output.decode(errors="replace")
    return out


@pytest.fixture
def dumps(fixtures) -> dict[str, Path]:
    """run_job's dumps of each mode, committed (tests/fixtures/flightrec/README.md); the live
    job of test_a_live_job_dumps_what_the_committed_dumps_hold holds them to the installed torch."""
    modes = ("skip", "shape", "dtype", "ok", "skip-wrapped")
    return {mode: fixtures / "flightrec" / "gloo" / mode for mode in modes}


def findings(paths) -> list:
    return run_checks("flightrec", analyse(sorted(paths)))


def by_id(found, id_: str) -> list:
    return [f for f in found if f.id == id_]


@pytest.mark.parametrize("form", ["pickle", "json"])
def test_a_rank_that_skips_an_allreduce_is_named_with_its_last_op_and_stack(dumps, form):
    found = findings((dumps["skip"] / form).iterdir())
    [missing] = by_id(found, "flightrec.ranks-missing")
    assert missing.rank == 1
    assert "rank 1 never joined collective #4 (all_reduce)" in missing.title
    assert "that rank 0 issued" in missing.title
    assert "rank 1's last was #3 gloo:all_reduce" in missing.title
    if form == "pickle":  # the JSON form carries no Python frames
        # its last op is the third allreduce, issued at the loop's line of the rank script
        assert "rank 1's last was #3 gloo:all_reduce at " in missing.title
        assert "flightrec_rank.py:" in missing.title
    # gloo counts #3 completed a moment after all_reduce returned: a dump in between says #2
    assert any(re.search(r"last completed #[23] gloo:all_reduce", e) for e in missing.evidence)
    assert "3 collectives matched before #4" in missing.evidence[0]
    assert not by_id(found, "flightrec.collective-mismatch")


def _without_frames(groups: list[dict]) -> list[dict]:
    """Without what differs by right: frames (pickle only) and gloo's completion counter,
    which may move between the two dumps."""
    for g in groups:
        for d in g["divergences"]:
            for t in d["culprits"]:
                t.update(where=None, stack=[], completed_seq=None, completed_op=None)
    return groups


def test_the_pickle_and_json_forms_read_alike_but_for_frames(dumps):
    as_pickle = analyse(sorted((dumps["skip"] / "pickle").iterdir())).to_dict()["groups"]
    as_json = analyse(sorted((dumps["skip"] / "json").iterdir())).to_dict()["groups"]
    assert as_pickle[0]["divergences"][0]["culprits"][0]["stack"]
    assert _without_frames(as_pickle) == _without_frames(as_json)


def test_a_live_job_dumps_what_the_committed_dumps_hold(dumps, tmp_path):
    """The installed torch's dumps of the skip job have the committed ones' files, version and
    keys, and read alike but for frames: the committed dumps stand for live ones in this file."""
    live = run_job("skip", tmp_path)
    for form in ("pickle", "json"):
        fresh = sorted((live / form).iterdir())
        kept = sorted((dumps["skip"] / form).iterdir())
        assert [p.name for p in fresh] == [p.name for p in kept]
        for mine, theirs in zip(fresh, kept, strict=True):
            new, old = (load_dump(p.read_bytes()).document for p in (mine, theirs))
            assert (new["version"], sorted(new)) == (old["version"], sorted(old))
            assert [sorted(e) for e in new["entries"]] == [sorted(e) for e in old["entries"]]
        as_live, as_kept = (_without_frames(analyse(p).to_dict()["groups"]) for p in (fresh, kept))
        assert as_live == as_kept


def test_a_rank_that_sends_another_shape_is_a_size_mismatch(dumps):
    found = findings((dumps["shape"] / "pickle").iterdir())
    [mismatch] = by_id(found, "flightrec.collective-mismatch")
    assert "collective #4 (all_reduce)" in mismatch.title
    assert "different sizes" in mismatch.title
    assert any("[[2, 2]]" in e for e in mismatch.evidence)
    assert any("[[4]]" in e for e in mismatch.evidence)
    assert not by_id(found, "flightrec.ranks-missing")


def test_a_rank_that_sends_another_dtype_is_a_dtype_mismatch(dumps):
    found = findings((dumps["dtype"] / "pickle").iterdir())
    [mismatch] = by_id(found, "flightrec.collective-mismatch")
    assert "different dtypes" in mismatch.title
    assert any("Int" in e for e in mismatch.evidence)


def test_a_healthy_job_has_no_finding(dumps):
    reading = analyse(sorted((dumps["ok"] / "pickle").iterdir()))
    assert run_checks("flightrec", reading) == []
    [group] = reading.groups
    assert (group.desc, group.ranks, group.matched) == ("default_pg", [0, 1], 4)


def test_wrapped_buffers_are_aligned_before_matching(dumps):
    """8 entries per rank over 20 allreduces: rank 0 holds #13-#20, rank 1 (it skipped #20)
    #12-#19; only what both still hold is compared."""
    reading = analyse(sorted((dumps["skip-wrapped"] / "pickle").iterdir()))
    [group] = reading.groups
    assert group.first_seq == 13
    [d] = group.divergences
    assert (d.kind, d.seq, d.missing) == ("missing", 20, [1])


def test_a_missing_ranks_dump_is_reported(dumps):
    found = findings([dumps["skip"] / "pickle" / "nccl_trace_rank_0"])
    [missing] = by_id(found, "flightrec.dump-missing")
    assert missing.rank == 1 and "rank 1" in missing.title


class _RunsCode:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_would_run_code_is_refused(dumps, tmp_path):
    marker = tmp_path / "ran"
    real = pickle.loads((dumps["skip"] / "pickle" / "nccl_trace_rank_0").read_bytes())
    real["entries"][0]["frames"] = [_RunsCode(marker)]
    evil = tmp_path / "nccl_trace_rank_0"
    evil.write_bytes(pickle.dumps(real))
    assert looks_like_dump(evil.read_bytes()[:64])
    found = findings([evil, dumps["skip"] / "pickle" / "nccl_trace_rank_1"])
    [refused] = by_id(found, "flightrec.dump-refused")
    assert "posix.system" in refused.title or "os.system" in refused.title
    assert not marker.exists()


def test_a_truncated_dump_is_unreadable_not_a_traceback(dumps, tmp_path):
    data = (dumps["skip"] / "pickle" / "nccl_trace_rank_1").read_bytes()
    for cut in (1, 2, len(data) // 3, len(data) - 1):
        loaded = load_dump(data[:cut])
        assert loaded.document is None and loaded.error and not loaded.refused
    cut_json = (dumps["skip"] / "json" / "nccl_trace_rank_1.json").read_bytes()
    (tmp_path / "nccl_trace_rank_1.json").write_bytes(cut_json[: len(cut_json) // 2])
    found = findings([tmp_path / "nccl_trace_rank_1.json"])
    [unreadable] = by_id(found, "flightrec.dump-unreadable")
    assert "unreadable" in unreadable.title


def test_another_versions_keys_are_read_in_part(dumps):
    """Before collective_seq_id (torch 2.2's dumps say seq_id) and with entries that lack the
    keys the matching needs: gated on keys, never on the version string."""
    docs = {}
    for rank in (0, 1):
        doc = pickle.loads((dumps["skip"] / "pickle" / f"nccl_trace_rank_{rank}").read_bytes())
        doc["version"] = "1.5"
        for e in doc["entries"]:
            e["seq_id"] = e.pop("collective_seq_id")
            for key in ("input_dtypes", "output_dtypes", "frames", "pg_id"):
                e.pop(key, None)
        doc["entries"].append({"record_id": 99, "state": "scheduled"})
        docs[rank] = doc
    analysis = Analysis()
    for rank, doc in docs.items():
        analysis.add(pickle.dumps(doc), f"rank{rank}", rank)
    reading = analysis.reading()
    assert all(d.skipped == 1 and "read in part" in d.error for d in reading.dumps)
    found = run_checks("flightrec", reading)
    [missing] = by_id(found, "flightrec.ranks-missing")
    assert "rank 1 never joined collective #4" in missing.title
    assert len(by_id(found, "flightrec.dump-unreadable")) == 2


def _p2p_entry(template: dict, name: str, p2p_seq: int, size: int, record: int) -> dict:
    """A point-to-point entry in the real entry's shape, named as ProcessGroupNCCL names it."""
    return {
        **template,
        "profiling_name": name,
        "is_p2p": True,
        "p2p_seq_id": p2p_seq,
        "collective_seq_id": template["collective_seq_id"],
        "input_sizes": [[size]],
        "output_sizes": [[size]],
        "record_id": record,
    }


def test_a_send_and_its_receive_of_different_sizes_mismatch(dumps):
    """gloo records no p2p op, so the entries are built from a real dump's shape."""
    docs = {}
    for rank in (0, 1):
        doc = pickle.loads((dumps["ok"] / "pickle" / f"nccl_trace_rank_{rank}").read_bytes())
        last = doc["entries"][-1]
        name = "nccl:send 0->1" if rank == 0 else "nccl:recv 1<-0"
        doc["entries"].append(_p2p_entry(last, name, 1, 1024, last["record_id"] + 1))
        size = 1024 if rank == 0 else 512
        doc["entries"].append(_p2p_entry(last, name, 2, size, last["record_id"] + 2))
        docs[rank] = doc
    analysis = Analysis()
    for rank, doc in docs.items():
        analysis.add(pickle.dumps(doc), f"nccl_trace_rank_{rank}", rank)
    found = run_checks("flightrec", analysis.reading())
    [mismatch] = by_id(found, "flightrec.collective-mismatch")
    assert "p2p op #2" in mismatch.title and "different sizes" in mismatch.title


def test_explain_reads_a_folder_of_dumps(dumps, tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "nccldoctor",
            "explain",
            "--json",
            "--no-html",
            str(dumps["skip"] / "pickle"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    (tmp_path / "report.json").write_text(out.stdout)  # the schema fixture validates it
    assert [f["id"] for f in report["findings"]] == ["flightrec.ranks-missing"]
    assert report["flight_recorder"]["groups"][0]["divergences"][0]["seq"] == 4


_ODD_VALUES = [None, 7, -3, 10**12, "x", "", [], {}, [[1, 2]], {"a": 1}, ("0",), 1.5, b"\x00", True]


def test_mangled_entries_never_raise(dumps):
    """Every key of a real entry, and the document's own keys, replaced by odd values one at a
    time: the analysis and its rules read what they can and never raise."""
    real = pickle.loads((dumps["skip"] / "pickle" / "nccl_trace_rank_0").read_bytes())
    other = (dumps["skip"] / "pickle" / "nccl_trace_rank_1").read_bytes()
    variants = []
    for key in real["entries"][-1]:
        for value in _ODD_VALUES:
            doc = pickle.loads(pickle.dumps(real))
            doc["entries"][-1][key] = value
            variants.append(doc)
    for key in ("pg_config", "pg_status", "entries", "version"):
        for value in _ODD_VALUES:
            variants.append({**real, key: value})
    variants.append({**real, "entries": [*real["entries"], "junk", 3, None]})
    for doc in variants:
        analysis = Analysis()
        analysis.add(pickle.dumps(doc), "nccl_trace_rank_0", 0)
        analysis.add(other, "nccl_trace_rank_1", 1)
        found = run_checks("flightrec", analysis.reading())
        assert not [f for f in found if f.id.endswith(".crashed")], doc


@pytest.mark.parametrize("name", ["nccl_trace_rank_999999999999", "nccl_trace_rank_x", "trace"])
def test_a_file_name_without_a_sane_rank_is_read_in_part(dumps, name):
    analysis = Analysis()
    data = (dumps["skip"] / "pickle" / "nccl_trace_rank_0").read_bytes()
    read = analysis.add(data, name, rank_of(name))
    assert "read in part" in read.error


def test_check_reads_the_dumps_its_monitor_collected(dumps):
    from nccldoctor.cluster.diagnosis.node_report import flight_recorder_section
    from nccldoctor.facts.ranks import OutcomeState, RankOutcome

    dump = str(dumps["skip"] / "pickle" / "nccl_trace_rank_{}")
    ranks = [
        RankOutcome(rank=r, node="n", state=OutcomeState.STUCK, flight_recorder=dump.format(r))
        for r in (0, 1)
    ] + [RankOutcome(rank=2, node="n", state=OutcomeState.STUCK)]
    section, found = flight_recorder_section(ranks)
    [missing] = by_id(found, "flightrec.ranks-missing")
    assert "rank 1 never joined collective #4 (all_reduce)" in missing.title
    assert section["groups"][0]["divergences"][0]["seq"] == 4


def test_the_ops_of_a_coalesced_collective_are_compared_as_one(dumps):
    """Entries that share one collective_seq_id (torch's coalescing manager), built from the
    real entries' shape: alike on both ranks they match; one op's size differing is a mismatch."""

    def reading(second_size_on_rank1: int):
        analysis = Analysis()
        for rank in (0, 1):
            doc = pickle.loads((dumps["ok"] / "pickle" / f"nccl_trace_rank_{rank}").read_bytes())
            last = doc["entries"][-1]
            seq, record = last["collective_seq_id"] + 1, last["record_id"]
            size = second_size_on_rank1 if rank == 1 else 8
            for i, (name, n) in enumerate(
                (("gloo:all_reduce", 4), ("gloo:all_reduce", size), ("gloo:coalesced", 0))
            ):
                e = {**last, "profiling_name": name, "collective_seq_id": seq}
                e.update(record_id=record + 1 + i, input_sizes=[[n]], output_sizes=[[n]])
                doc["entries"].append(e)
            analysis.add(pickle.dumps(doc), f"nccl_trace_rank_{rank}", rank)
        return analysis.reading()

    alike = reading(8)
    assert run_checks("flightrec", alike) == [] and alike.groups[0].matched == 5
    [mismatch] = by_id(run_checks("flightrec", reading(16)), "flightrec.collective-mismatch")
    assert "collective #5 (coalesced(all_reduce, all_reduce, coalesced))" in mismatch.title
    assert any("[[16]]" in e for e in mismatch.evidence)


def test_the_committed_genuine_dumps_name_the_skipping_rank(dumps):
    """tests/fixtures/flightrec/gloo/skip (see its README): the dumps bench/fr.py is built from."""
    reading = analyse(sorted((dumps["skip"] / "pickle").glob("nccl_trace_rank_*")))
    assert all(d.error is None for d in reading.dumps)
    [group] = reading.groups
    [d] = group.divergences
    assert (d.kind, d.seq, d.op, d.missing) == ("missing", 4, "all_reduce", [1])
    assert d.culprits[0].last_seq == 3 and d.culprits[0].stack
