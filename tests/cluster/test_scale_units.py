"""What keeps a check of many nodes in bounds: the TCP turns and the master's merge."""

from __future__ import annotations

import gc
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from nccldoctor.cluster.agent import gather
from nccldoctor.cluster.agent.rendezvous import Keys, gather_entries
from nccldoctor.cluster.diagnosis.merge import merge_reports
from nccldoctor.cluster.diagnosis.verdict import (
    VERDICT_GROUPS,
    hang_section,
    rank_findings,
    rank_label,
)
from nccldoctor.cluster.records import NodeEntry
from nccldoctor.cluster.timeouts import MIN_TCP_TURN, Timeouts, timeouts_from
from nccldoctor.facts import NodeFacts
from nccldoctor.facts.ranks import OutcomeState, RankOutcome
from nccldoctor.report.answer import answer
from nccldoctor.report.load import report_from_document
from tests.cluster.synthetic import SyntheticRun, synthetic_run


def test_tcp_turns_fit_the_total_budget():
    t = Timeouts()
    assert t.tcp_turn(1) == t.tcp_turn(7) == t.tcp_probe  # 7 x 2 s fit the 16 s
    assert t.tcp_turn(63) * 63 == t.tcp_total
    assert t.tcp_turn(511) == MIN_TCP_TURN  # the floor; the turns then add up past the total
    assert timeouts_from(None, ["tcp_total=4"]).tcp_turn(7) == 4 / 7
    assert timeouts_from(None, ["tcp_probe=0.5"]).tcp_turn(7) == 0.5


@pytest.fixture(scope="module")
def hung512() -> SyntheticRun:
    """512 nodes, rank 3 stuck and every other rank timed out: built once for the tests that
    merge it (a merge leaves the run as it was)."""
    return synthetic_run(512, hang_rank=3)


@pytest.fixture(scope="module")
def healthy512() -> SyntheticRun:
    return synthetic_run(512)


def _merge_seconds(run: SyntheticRun) -> float:
    nodes = len(run.world.nodes)
    gc.disable()
    try:
        start = time.perf_counter()
        report = run.merge()
        elapsed = time.perf_counter() - start
    finally:
        gc.enable()
    assert len(report.extra["ranks"]) == 2 * nodes
    assert len(report.extra["cluster"]["nodes"]) == nodes
    assert report.extra["hang"]["stuck"] == [
        {"node": "node1", "rank": 3, "phase": "allreduce_correctness", "last_nccl_line": None}
    ]
    return elapsed


def test_master_merge_is_linear_in_nodes(hung512):
    _merge_seconds(synthetic_run(8, hang_rank=3))  # imports and caches, once
    small_run = synthetic_run(64, hang_rank=3)
    small = min(_merge_seconds(small_run) for _ in range(3))
    large = min(_merge_seconds(hung512) for _ in range(2))
    assert large < small * 8 * 3  # 8x the nodes: about 8x the time (quadratic would be 64x)


def _rank(r: int, state: str, error: str | None = None, **more: Any) -> RankOutcome:
    return RankOutcome(rank=r, node=f"node{r // 2}", state=OutcomeState(state), phase_reached="barrier", error=error,
                       exit_code=1, stuck="deadline" if state == "stuck" else None,
                       log_path=f"/x/rank{r}/worker.log", ended_at=10.0 + r, **more)  # fmt: skip


def _closed(port: int) -> str:
    return (f"barrier: RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer "
            f"[198.18.0.7]:{port}. This is typically caused by a remote worker crashing.")  # fmt: skip


TIMED_OUT = "barrier: RuntimeError: Timed out waiting 20000ms for recv operation to complete"


def test_hang_verdict_groups_the_other_ranks():
    """16 ranks as the barrier hang of tests/cluster/test_scale.py ends: one stuck, two lose a
    peer (each its own address), the others time out with one message."""
    ranks = [_rank(11, "stuck", "barrier: timed out after 20 s (worker deadline)")]
    ranks += [_rank(0, "failed", _closed(22224)), _rank(1, "failed", _closed(20680))]
    ranks += [_rank(r, "failed", TIMED_OUT) for r in (*range(2, 11), *range(12, 16))]
    assert hang_section(ranks)["verdict"] == (
        "rank 11 on node node5 never finished barrier; ranks 0, 1 lost their peer in barrier; "
        "ranks 2-10, 12-15 waited in barrier (RuntimeError: Timed out waiting 20000ms for recv "
        "operation to complete)."
    )
    findings = rank_findings(ranks)  # every rank keeps its own error in the findings
    assert [f.rank for f in findings] == [11, 0, 1, *range(2, 11), *range(12, 16)]
    assert "22224" in findings[1].evidence[2] and "20680" in findings[2].evidence[2]


def test_hang_verdict_stays_a_line_at_any_scale():
    ranks = [_rank(0, "stuck")] + [
        _rank(r, "failed", f"barrier: error {r % 9}") for r in range(1, 4096)
    ]
    verdict = hang_section(ranks)["verdict"]
    assert verdict.endswith("; 4090 more ranks stopped (see the findings).")
    assert verdict.count(";") == VERDICT_GROUPS and len(verdict) < 600
    assert rank_label([7]) == "rank 7" and rank_label([5, 1, 2, 3, 9, 10]) == "ranks 1-3, 5, 9, 10"


def test_the_answer_of_512_nodes_stays_short(hung512):
    text = answer(hung512.merge().to_dict())
    assert text.startswith(
        "Check of 1024 ranks on 512 nodes, backend gloo. The run hung in allreduce_correctness "
        "(rank 3 on node1). Rank 3 on node node1 never finished allreduce_correctness; "
        "ranks 0-2, 4-1023 waited in allreduce_correctness"
    )
    assert len(text) < 1000


class _SlowStore:
    """A store where ``count`` slots were taken and only ``written`` of them hold an entry;
    ``wait`` on a missing key sleeps its whole timeout, as TCPStore's does."""

    def __init__(self, count: int, written: set[int]) -> None:
        self.count = count
        self.data = {f"nccldoctor/r/node/{s}": NodeEntry(s, f"node{s}", facts=NodeFacts(f"node{s}")).to_json()
                     for s in written}  # fmt: skip

    def add(self, key: str, value: int) -> int:
        return self.count

    def wait(self, keys: list[str], timeout) -> None:
        if any(k not in self.data for k in keys):
            time.sleep(timeout.total_seconds())
            raise TimeoutError(keys)

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)

    def get(self, key: str) -> str:
        return self.data[key]


def test_the_join_window_waits_once_for_all_unwritten_slots():
    store = _SlowStore(64, written={s for s in range(65) if s % 8})  # 9 slots never written
    start = time.monotonic()
    entries = gather_entries(store, Keys("r"), 65, time.monotonic() + 5, settle_s=1)
    assert time.monotonic() - start < 4  # one grace of 2 s, not 2 s for each of the nine
    assert [e.slot for e in entries] == [s for s in range(65) if s % 8]


def _stacks(*frames: str) -> str:
    """A faulthandler dump whose main thread stopped in ``frames`` (innermost first)."""
    main = ['  File "{}", line {}'.format(*f.split(", line ", 1)) for f in frames] + [
        '  File "<frozen runpy>", line 198 in _run_module_as_main'
    ]
    return "\n".join(["Thread 0x00007f (most recent call first):", *main])


def test_among_stuck_ranks_the_one_outside_the_collective_is_the_cause():
    """--phase-timeout barrier=8 with collective=45: the waiting ranks hit their own deadline
    together with the one they wait for; the stacks tell them apart, not who ended first."""
    deadline = "barrier: timed out after 8 s (worker deadline)"
    hanging = _rank(11, "stuck", deadline, stacks=_stacks(
        ".../nccldoctor/cluster/worker/faults.py, line 94 in hang_forever",
        ".../nccldoctor/cluster/worker/rank.py, line 146 in phase"))  # fmt: skip
    waiting = _rank(15, "stuck", deadline, stacks=_stacks(
        ".../torch/distributed/distributed_c10d.py, line 4159 in barrier",
        ".../nccldoctor/cluster/worker/rank.py, line 180 in _phases"))  # fmt: skip
    waiting = replace(waiting, ended_at=hanging.ended_at - 0.5)  # its deadline fired first
    verdict = hang_section([waiting, hanging])["verdict"]
    assert verdict.startswith("rank 11 on node node5 never finished barrier; rank 15 on node node7")


class _CountedList(list):
    """A list that counts how often it is walked."""

    walks = 0

    def __iter__(self):
        _CountedList.walks += 1
        return super().__iter__()


def test_merging_node_report_files_reads_the_world_once(healthy512):
    """Every node's report lists the whole world: `nccldoctor report` reads that list once, not
    once per report (512 nodes would walk 512 x 512 entries)."""
    docs = healthy512.documents()[:-1]  # the last node's report is lost
    parts = [(f"/r/{d['run']['node']}.json", report_from_document(d)) for d in docs]
    for _, report in parts:  # a section of its own: the documents stay as they were
        cluster = report.extra["cluster"]
        report.extra["cluster"] = {**cluster, "nodes": _CountedList(cluster["nodes"])}
    _CountedList.walks = 0
    cluster = merge_reports(parts).extra["cluster"]
    assert _CountedList.walks == 1
    assert cluster["missing_nodes"] == ["node511"]
    assert [n["report_path"] for n in cluster["nodes"]] == [p for p, _ in parts] + [None]


class _DictStore:
    def __init__(self) -> None:
        self.data: dict[str, str] = {}

    def set(self, key: str, value: str) -> None:
        self.data[key] = value

    def add(self, key: str, value: int) -> int:
        self.data[key] = str(int(self.data.get(key, "0")) + value)
        return int(self.data[key])


def test_a_nodes_result_for_the_master_does_not_grow_with_the_world(healthy512):
    sizes = []
    for nodes, run in ((8, synthetic_run(8)), (512, healthy512)):
        doc = run.others[1]
        store = _DictStore()
        gather.publish(store, Keys("r"), 1, report_from_document(doc), Path("/r/node1.json"))
        sent = json.loads(store.data[Keys("r").result(1, 1)])
        assert sent["cluster"]["nodes"] == [] and sent["cluster"]["world_size"] == 2 * nodes
        assert sent["report_path"] == "/r/node1.json"
        sizes.append(len(store.data[Keys("r").result(1, 1)]))
    assert sizes[1] < sizes[0] * 1.1  # 512 nodes: the world list alone would be 90 kB
