"""NCCL RAS output (``ncclras`` text and ``-f json``) from NCCL's documentation and public
threads (tests/fixtures/ras/SOURCES.md), and the rules over it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checks import run_checks
from nccldoctor.ras import RasReading, parse_json, parse_text

FIXTURES = Path(__file__).parent / "fixtures" / "ras"


def read(name: str):
    return parse_text((FIXTURES / name).read_text().splitlines(), name)


def by_id(reports) -> dict[str, list]:
    found: dict[str, list] = {}
    for f in run_checks("ras", RasReading(reports)):
        found.setdefault(f.id, []).append(f)
    return found


def test_a_mismatch_names_the_outlier_ranks():
    report = read("nccl-1911-mismatch.txt")
    assert (report.nccl_version, report.nodes, report.processes, report.gpus) == ("2.26.2", 4,
                                                                                  32, 32)  # fmt: skip
    (group,) = report.groups
    assert (group.count, group.ranks, group.status, group.errors) == (1, 32, "RUNNING",
                                                                      ["MISMATCH"])  # fmt: skip
    (found,) = by_id([report])["ras.mismatch"]
    assert found.severity == "warn"
    assert "30 ranks up to op 640, 2 ranks up to op 641" in found.title
    assert "rank 12 process 323032 on node 10.137.190.124" in found.title
    assert (found.rank, found.node) == (12, "10.137.190.124")


def test_incomplete_communicators_and_the_uneven_job_summary_cut_mid_line():
    report = read("nccl-1762-incomplete-cut.txt")
    assert (report.nodes, report.processes, report.gpus) == (2, 10, 10)
    assert [g.errors for g in report.groups][-1] == ["INCOMPLETE", "MISMATCH"]
    titles = [f.title for f in by_id([report])["ras.incomplete"]]
    assert "NCCL RAS: #0-0 is missing rank 1" in titles
    assert "NCCL RAS: the job is missing process 60004 on node 10.4.109.13 (GPU 0)" in titles


def test_dead_process_missing_rank_and_timeout_from_the_user_guide():
    found = by_id([read("nccl-docs-dead.txt")])
    (dead,) = found["ras.dead"]
    assert dead.severity == "fail" and "process 3487984 on node 172.16.64.213" in dead.title
    # the guide's two snapshots repeat the communicator's entry: said once
    assert [f.title for f in found["ras.incomplete"]].count(
        "NCCL RAS: #0-0 is missing rank 21"
    ) == 1
    assert found["ras.timeout"][0].severity == "warn"


def test_json_output_from_the_user_guide():
    report = parse_json((FIXTURES / "nccl-docs-ras.json").read_text(), "ras.json")
    assert report.nccl_version == "2.29.1" and report.error is None
    (found,) = by_id([report])["ras.incomplete"]
    assert (found.rank, found.node) == (1, "172.16.64.245")


def test_json_dead_mismatch_and_errors_derived_from_the_guides_sample():
    data = json.loads((FIXTURES / "nccl-docs-ras.json").read_text())
    comm = data["communicators"][0]
    comm["missing_ranks"][0]["status"]["considered_dead"] = True
    extra = json.loads(json.dumps(comm["ranks"][0]))
    extra.update(rank=2, pid=7)
    extra["collective_counts"]["AllReduce"] = 5
    extra["status"]["async_error"] = 6
    comm["ranks"].append(extra)
    found = by_id([parse_json(json.dumps(data), "x.json")])
    assert {"ras.dead", "ras.mismatch", "ras.error"} <= set(found)


@pytest.mark.parametrize("junk", ["", "{", "[]", '{"communicators": 3, "nccl_version": 1}',
                                  "Errors\n======\n  orphan detail\nDEAD\n"])  # fmt: skip
def test_odd_input_never_raises(junk):
    run_checks("ras", RasReading([parse_text(junk.splitlines(), "t"), parse_json(junk, "j")]))
