"""The watch report's hang verdict from a captured watch's evidence (tests/fixtures/reports/
watch-hang.json: rank 1 slept at step 3, rank 0 waited in DDP's backward) with genuine Flight
Recorder dumps (tests/fixtures/flightrec/gloo/skip: rank 1 stopped a collective short), and
what it says when one rank's dump did not come back."""

from __future__ import annotations

import json
from pathlib import Path

from nccldoctor.forensics.flightrec import load_flight_recorder
from nccldoctor.forensics.ranks import RankEvidence, RankProcess
from nccldoctor.watch.report import watch_report
from nccldoctor.watch.supervisor import WatchOutcome

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CAPTURED = FIXTURES / "reports" / "watch-hang.json"
DUMPS = FIXTURES / "flightrec" / "gloo" / "skip" / "pickle"
NO_DUMP = "no flight recorder dump (process group not initialised, or busy)"  # capture.py's


def hang_report(log_dir: Path, dumped: set[int]) -> dict:
    """watch's report of the captured hang, with the dumps of the ``dumped`` ranks only, each
    where watch keeps it (fr.<pid>.pkl) and read as watch reads it."""
    evidence = []
    for seen in json.loads(CAPTURED.read_text())["ranks"]:
        rank, pid = seen["rank"], seen["pid"]
        process = RankProcess(pid, rank, seen["local_rank"], seen["node"], [])
        item = RankEvidence(process, stacks=seen["stacks"], stacks_source=seen["stacks_source"])
        if rank in dumped:
            data = (DUMPS / f"nccl_trace_rank_{rank}").read_bytes()
            (log_dir / f"fr.{pid}.pkl").write_bytes(data)
            item.flight_recorder, item.flight_recorder_error = load_flight_recorder(data)
        else:
            item.flight_recorder_error = NO_DUMP
        evidence.append(item)
    outcome = WatchOutcome(3, hung=True, ended_by_watch=True, idle_s=6.0, evidence=evidence)
    return watch_report(outcome, ["python", "train.py"], log_dir).to_dict()


def test_with_every_dump_the_rank_a_collective_short_is_behind(tmp_path):
    report = hang_report(tmp_path, {0, 1})
    verdict = report["watch"]["verdict"]
    assert "rank 1 (pid 20004 on vm) is behind" in verdict
    assert "its last collective was #3 (gloo:all_reduce)" in verdict
    assert "rank 0 waits in collective #4 (gloo:all_reduce)" in verdict
    [hang] = [f for f in report["findings"] if f["id"] == "watch.hang"]
    assert hang["rank"] == 1


def test_a_rank_whose_dump_is_missing_is_the_suspect_not_a_waiter(tmp_path):
    """Both main threads stopped outside torch.distributed (DDP's allreduce runs under
    backward), so only the dumps could tell the ranks apart: without rank 1's, rank 1 is not
    waiting in rank 0's collective, and that no rank is behind is not known."""
    report = hang_report(tmp_path, {0})
    verdict = report["watch"]["verdict"]
    assert "rank 1 (pid 20004 on vm) left no Flight Recorder dump: it may be the one behind" in (
        verdict
    )
    assert "rank 0 waits in collective #4 (gloo:all_reduce)" in verdict
    assert "ranks 0, 1" not in verdict
    assert "no rank is behind" not in verdict
    [hang] = [f for f in report["findings"] if f["id"] == "watch.hang"]
    assert hang["rank"] == 1 and hang["node"] == "vm"
    assert f"rank 1 (pid 20004 on vm): no Flight Recorder dump ({NO_DUMP})" in "\n".join(
        hang["evidence"]
    )
    # the Flight Recorder's own reading says the same of the dumps
    assert any(f["id"] == "flightrec.dump-missing" and f["rank"] == 1 for f in report["findings"])
    # and so does the line read first
    line = report["headline"]["line"]
    assert line.startswith("Hang: The job made no progress for 6 s: rank 1 (pid 20004 on vm) left")
    assert "no rank is behind" not in report["headline"]["answer"]


def test_without_any_dump_nothing_is_blamed_on_a_missing_one(tmp_path):
    """A job whose Flight Recorder never answered on any rank: no rank is singled out by it."""
    report = hang_report(tmp_path, set())
    verdict = report["watch"]["verdict"]
    assert "left no Flight Recorder dump" not in verdict
    assert "no rank is behind" in verdict
