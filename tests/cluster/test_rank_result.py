"""What a rank's worker writes for its agent crosses as records: result.json as a RankResult reads
back as the worker wrote it, and a file that is no result (cut, garbled, another program's, a
field of the wrong type) is refused with why, never an exception of another kind; a line of
events.jsonl that is no WorkerEvent is skipped."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nccldoctor.cluster.agent.outcomes import load_result
from nccldoctor.cluster.records import EventStatus, WorkerEvent
from nccldoctor.facts.ranks import (
    BandwidthRow,
    Checksum,
    CorrectnessRow,
    MessageSizes,
    MnistResult,
    RankResult,
    Skipped,
)
from nccldoctor.facts.serde import to_dict
from tests.strategies import JSON

SUM = -0.5712890625
SHA = "9f2c" * 16
RESULT = RankResult(
    rank=1,
    node="node1",
    group_rank=1,
    local_rank=0,
    backend="gloo",
    world_size=2,
    pid=4242,
    ok=False,
    error="allreduce_correctness: 96 wrong elements (int32)",
    exit_code=1,
    phase_reached="destroy",
    correctness=[CorrectnessRow("float32", 7, True, 0), CorrectnessRow("int32", 1024, False, 96)],
    correctness_skipped=[Skipped("bfloat16", "bfloat16 cannot hold the sum of 2 ranks exactly")],
    bandwidth=[BandwidthRow(4096, 1024, "float32", 118.5, 0.0346, 0.0346, 0, 20)],
    bandwidth_not_run=[1 << 26],
    message_sizes=MessageSizes("bandwidth", 4096, 4096, None),
    mnist=MnistResult(
        "synthetic", None, "no MNIST under /data", 96, 3, 2.31, 2.28, Checksum(1, SUM, SHA)
    ),
    params_identical=True,
    checksums=[Checksum(0, SUM, SHA), Checksum(1, SUM, SHA)],
)
# The file as the worker writes it (keys in the field order, indent 1: workerwatch)
DOCUMENT = json.dumps(to_dict(RESULT), indent=1)


def test_a_result_reads_back_as_the_worker_wrote_it():
    assert RankResult.from_json(DOCUMENT) == RESULT
    assert list(json.loads(DOCUMENT))[:4] == ["rank", "node", "group_rank", "local_rank"]


def test_a_result_written_before_any_phase_ended_reads_back():
    started = RankResult(
        rank=0, node="n", group_rank=0, local_rank=0, backend="nccl", world_size=8, pid=7
    )
    assert RankResult.from_json(json.dumps(to_dict(started))) == started


def _with(path: tuple, value: object) -> str:
    data = copy.deepcopy(json.loads(DOCUMENT))
    *parents, last = path
    target = data
    for key in parents:
        target = target[key]
    target[last] = value
    return json.dumps(data)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "Expecting value"),
        (DOCUMENT[: DOCUMENT.index('"bandwidth"')], "Expecting property name"),  # cut short
        ("[1, 2]", "not a JSON object but list"),
        ("[" * 5000 + "]" * 5000, "nested more than"),
        (_with(("rank",), True), "expected int, got bool"),
        (_with(("rank",), "1"), "expected int, got str"),
        (_with(("correctness", 1, "wrong"), "96"), "expected int, got str"),
        (_with(("bandwidth", 0), [4096]), "expected an object for BandwidthRow"),
        (_with(("mnist", "param_checksum", "sha256"), None), "expected str, got null"),
        (_with(("mnist",), {"source": "real"}), "missing 7 required"),
        (_with(("node",), None), "expected str, got null"),
        (_with(("bandwidth_not_run",), {"0": 4}), "expected a list, got dict"),
        (_with(("message_sizes",), "bandwidth"), "expected an object for MessageSizes"),
        (json.dumps({"ok": True}), "missing 7 required"),
    ],
)
def test_what_is_no_result_is_refused_with_why(text, why):
    with pytest.raises(ValueError, match=why):
        RankResult.from_json(text)


def test_the_agent_reads_no_result_from_a_folder_without_a_good_one(tmp_path):
    assert load_result(tmp_path) is None  # the worker died before it wrote one
    (tmp_path / "result.json").write_bytes(b"\xff\xfe{not json")
    assert load_result(tmp_path) is None
    (tmp_path / "result.json").write_text(DOCUMENT)
    assert load_result(tmp_path) == RESULT


FIELDS = list(json.loads(DOCUMENT))


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(FIELDS), value=JSON)
def test_any_value_in_any_field_is_a_result_or_refused(field, value):
    try:
        result = RankResult.from_json(_with((field,), value))
    except ValueError:
        return
    assert isinstance(result, RankResult)


@settings(max_examples=200, deadline=None)
@given(value=JSON)
def test_any_json_document_is_a_result_or_refused(value):
    try:
        RankResult.from_json(json.dumps(value))
    except ValueError:
        return


def test_an_event_reads_back_as_the_worker_wrote_it():
    event = WorkerEvent(1764800000.25, 3, "barrier", EventStatus.FAIL, "barrier: timed out")
    assert WorkerEvent.from_line(event.to_line()) == event
    assert WorkerEvent.from_line(event.to_line().encode()) == event  # as the watchdog reads it


@pytest.mark.parametrize(
    "line",
    [
        b'{"t": 1764800000.2, "rank": 3, "phase": "barr',  # cut mid-write
        b"\xff\xfe",
        b"[1, 2]",
        b'{"t": NaN, "rank": 3, "phase": "barrier", "status": "start"}',
        b'{"t": "soon", "rank": 3, "phase": "barrier", "status": "start"}',
        b'{"t": 1.0, "rank": true, "phase": "barrier", "status": "start"}',
        b'{"t": 1.0, "rank": 3, "phase": ["barrier"], "status": "start"}',
        b'{"t": 1.0, "rank": 3, "phase": "barrier", "status": "paused"}',
        b'{"t": 1.0, "rank": 3, "phase": "barrier", "status": "fail", "detail": 7}',
        b"[" * 100_000,
    ],
)
def test_a_line_that_is_no_event_is_none(line):
    assert WorkerEvent.from_line(line) is None
