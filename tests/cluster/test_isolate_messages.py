"""What the isolation rounds exchange through the master's store crosses as records: each message
reads back as it was written, and a value that is no such message (cut, garbled, a stranger's, a
field of the wrong type or out of bounds) is refused with why, never an exception of another
kind; the master counts a refused state as no answer and says why."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nccldoctor.cluster.isolate import grouptest, rounds, storeio
from nccldoctor.cluster.isolate.messages import (
    MAX_SIZES,
    MemberResult,
    Plan,
    RoundCall,
    RunState,
)
from tests.ports import free_port
from tests.strategies import JSON

MESSAGES = [
    RunState(False, "rank 1 stuck in barrier", "eth0"),
    RunState(True),
    Plan(True, "the all-node run failed on node1"),
    RoundCall((("node0", "node1"), ("node2", "node3"))),
    RoundCall(done=True),
    MemberResult("ok", 0.25, [(64 << 10, 0.001), (1 << 20, 0.01), (8 << 20, 0.08)]),
    MemberResult("error", None, [], "RuntimeError: Connection reset by peer"),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_a_message_reads_back_as_it_was_written(message) -> None:
    assert type(message).from_json(message.to_json()) == message
    assert type(message).from_json(message.to_json().encode()) == message  # as the store gives it


def test_a_node_writes_what_its_reader_accepts() -> None:
    state = RunState.of(False, "x" * 900, "not an interface name")
    assert (len(state.why), state.interface) == (500, "")
    assert RunState.from_json(state.to_json()) == state
    cut = MemberResult("error", 1.0, [], "E" * 1000).to_json()
    assert len(MemberResult.from_json(cut).error) == 300
    assert len(grouptest.SIZES) <= MAX_SIZES


@pytest.mark.parametrize(
    ("kind", "text", "why"),
    [
        (RunState, "", "Expecting value"),
        (RunState, '{"ok": true, "why": "cut', "Unterminated string"),
        (RunState, "[true]", "not a node's state: a JSON list"),
        (RunState, '{"why": "stuck"}', "no ok"),
        (RunState, '{"ok": 1}', "ok is 1, not true or false"),
        (RunState, '{"ok": false, "why": ["stuck"]}', "why is list, not text"),
        (RunState, json.dumps({"ok": False, "why": "x" * 501}), "more than the 500"),
        (RunState, '{"ok": true, "interface": "eth0; rm -rf /"}', "is no Linux name"),
        (Plan, '{"run": "yes", "why": ""}', 'run is "yes"'),
        (Plan, "[" * 5000 + "]" * 5000, "nested more than"),
        (RoundCall, '{"groups": "node0,node1"}', "groups is str, not a list"),
        (RoundCall, '{"groups": [["node0", 7]]}', "7 is no node's name"),
        (RoundCall, '{"groups": [[]]}', "a group is no list of node names"),
        (RoundCall, '{"groups": [["a", "b"], ["b", "c"]]}', '"b" is in two groups'),
        (RoundCall, '{"groups": [["a", "b"]], "done": true}', "done, with groups"),
        (RoundCall, '{"done": "true"}', 'done is "true"'),
        (MemberResult, '{"status": "fine"}', 'status "fine"'),
        (MemberResult, '{"status": "ok", "seconds": "x"}', "seconds is no list"),
        (MemberResult, '{"status": "ok", "seconds": [[1, 2, 3]]}', "no \\(bytes, seconds\\)"),
        (MemberResult, '{"status": "ok", "seconds": [[-1, 0.1]]}', "no \\(bytes, seconds\\)"),
        (MemberResult, '{"status": "ok", "seconds": [[1, NaN]]}', "no \\(bytes, seconds\\)"),
        (MemberResult, '{"status": "ok", "seconds": [[true, 0.1]]}', "no \\(bytes, seconds\\)"),
        (MemberResult, json.dumps({"status": "ok", "seconds": [[1, 0.1]] * 9}), "8 or fewer"),
        (MemberResult, '{"status": "ok", "init_s": "1"}', 'init_s "1"'),
        (MemberResult, '{"status": "ok", "init_s": Infinity}', "init_s Infinity"),
        (MemberResult, '{"status": "error", "error": {"type": "x"}}', "error is dict"),
    ],
)
def test_what_is_no_message_is_refused_with_why(kind, text, why) -> None:
    with pytest.raises(ValueError, match=why):
        kind.from_json(text)


@settings(max_examples=400, deadline=None)
@given(message=st.sampled_from(MESSAGES), data=st.data())
def test_any_value_in_any_field_is_a_message_or_refused(message, data) -> None:
    document = json.loads(message.to_json())
    document[data.draw(st.sampled_from(sorted(document)))] = data.draw(JSON)
    kind = type(message)
    try:
        read = kind.from_json(json.dumps(document))
    except ValueError:
        return
    assert isinstance(read, kind) and kind.from_json(read.to_json()) == read


@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from([RunState, Plan, RoundCall, MemberResult]), value=JSON)
def test_any_json_document_is_a_message_or_refused(kind, value) -> None:
    try:
        kind.from_json(json.dumps(value))
    except ValueError:
        return


def test_the_master_says_why_a_node_s_state_was_refused_and_reads_the_node_s_own_over_it() -> None:
    import threading
    import time

    from nccldoctor.meet import host_store

    store = host_store(free_port(), 10)
    keys = rounds.IsoKeys("nccldoctor/refused")
    names = {0: "node0", 1: "node1", 2: "node2", 3: "node3"}
    rounds.publish_state(store, keys, 0, True, "")
    rounds.publish_state(store, keys, 1, True, "")
    store.set(keys.state(2), '{"ok": "yes"}')  # a stranger's, or a node of another version's
    store.set(keys.state(3), "[]")
    late = threading.Timer(0.5, rounds.publish_state, (store, keys, 3, False, "rank 7 stuck"))
    late.start()  # node3's own state, written over the stranger's
    refused: dict[str, str] = {}
    started = time.monotonic()
    states = rounds._read_states(store, keys, names, time.monotonic() + 2, refused=refused)
    assert 1.5 < time.monotonic() - started < 8
    assert states[2] is None and states[0] == RunState(True)
    assert states[3] == RunState(False, "rank 7 stuck")
    assert refused == {"node2": 'ok is "yes", not true or false'}
    plan = rounds.should_isolate("auto", {names[r]: s for r, s in states.items()}, {}, "", refused)
    assert plan == Plan(
        True,
        "the all-node run failed on node3; "
        'node2\'s state was refused: ok is "yes", not true or false',
    )


def test_a_member_says_the_round_it_could_not_read() -> None:
    from nccldoctor.meet import host_store

    store = host_store(free_port(), 10)
    keys = rounds.IsoKeys("nccldoctor/badround")
    store.set(keys.round(1), '{"groups": [["node0", "node1"]], "done": true}')
    me = rounds.Member("node1", 1, "127.0.0.1", 0, "gloo", "lo", 1.0)
    assert rounds.take_part(store, keys, me, 1.0) == [
        "round 1 was refused: not a round: done, with groups within 1 s"
    ]
    store.set(keys.plan, '{"run": 1}')
    assert rounds.wait_plan(store, keys, 0.5) is None
    store.set(keys.state(9), "x" * 70_000)
    refused: dict[str, str] = {}
    assert storeio.read_message(store, keys.state(9), RunState, "node9", refused) is None
    assert refused == {"node9": "70000 bytes, more than the 65536 a node writes"}
