"""pickscan: the C scan (_pickscan.c) and its Python twin give the same answer on every genuine
dump, on generated pickles of every protocol and on their corruptions; what they count is what a
walk over the unpickled object visits; the bombs a few hundred bytes make (shared references,
lengths that allocate, a memo index far out, deep nesting, repeated strings, a hashed tuple,
an int too long to print, a cycle) are stopped before the unpickler runs."""

from __future__ import annotations

import pickle
import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nccldoctor.forensics import pickscan
from nccldoctor.forensics.frload import load_dump
from nccldoctor.forensics.pickscan import Stop, scan_python
from nccldoctor.limits import MAX_DUMP_DEPTH, MAX_DUMP_OBJECTS, MAX_DUMP_TEXT_BYTES

GENUINE = sorted((Path(__file__).parent / "fixtures" / "flightrec").glob("**/nccl_trace_rank_*"))
BOUNDS = (MAX_DUMP_OBJECTS, MAX_DUMP_TEXT_BYTES, MAX_DUMP_DEPTH)
UNBOUNDED = (1 << 32, (1 << 30) - 1, 60_000)

native = pytest.mark.skipif(not pickscan.NATIVE, reason="built without a C compiler")


def _c(data: bytes, *bounds: int) -> tuple[int, int, int] | None:
    return pickscan._scan_c(data, *bounds)  # type: ignore[misc]


def both(data: bytes, bounds: tuple[int, int, int] = BOUNDS) -> tuple[int, int, int] | None:
    """The twin's answer, held to the C scan's where there is one."""
    found = scan_python(data, *bounds)
    if pickscan.NATIVE:
        assert _c(data, *bounds) == found
    return found


def test_the_build_made_the_c_scan_where_a_compiler_is():
    """The wheel's build hook compiled _pickscan.c: a silent fallback would be far slower."""
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler here")
    assert pickscan.NATIVE


def test_every_genuine_dump_is_within_bounds_and_loads():
    pickles = [p for p in GENUINE if p.read_bytes()[:1] == b"\x80"]
    assert len(pickles) >= 10
    for path in pickles:
        data = path.read_bytes()
        assert both(data) is None, path
        assert load_dump(data).document is not None, path


def _walk(obj: object) -> tuple[int, int]:
    """Objects a walk visits, each reference again, and depth in containers, as the scan counts
    them."""
    if isinstance(obj, (list, tuple, set, frozenset)):
        below = [_walk(x) for x in obj]
    elif isinstance(obj, dict):
        below = [_walk(x) for kv in obj.items() for x in kv]
    else:
        return 1, 0
    return 1 + sum(n for n, _ in below), 1 + max((d for _, d in below), default=0)


keys = st.one_of(st.text(max_size=5), st.integers(-(10**9), 10**9), st.none(), st.booleans())
int64 = st.integers(-(2**63), 2**63 - 1)  # what torch writes
leaves = st.one_of(keys, st.floats(allow_nan=False), st.binary(max_size=5), int64)
values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(keys, inner, max_size=4),
        st.frozensets(keys, max_size=3),
    ),
    max_leaves=30,
)


@st.composite
def shared(draw) -> object:
    """A value that holds one list or tuple several times over (the memo refers to it)."""
    inner = draw(values)
    part = draw(st.sampled_from([list, tuple]))([inner, inner])
    return [part] * draw(st.integers(1, 4)) + [{"k": part}]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(values, shared()), st.integers(4, pickle.HIGHEST_PROTOCOL))
def test_the_scan_counts_what_a_walk_visits(value, protocol):
    """(Protocols 2 and 3 build bytes and frozensets through a global, where the scan stops.)"""
    data = pickle.dumps(value, protocol)
    objects, depth = _walk(pickle.loads(data))
    assert both(data, (objects, UNBOUNDED[1], depth)) is None
    assert both(data, (objects - 1, UNBOUNDED[1], depth))[0] == Stop.OBJECTS
    if depth:
        assert both(data, (objects, UNBOUNDED[1], depth - 1))[0] == Stop.DEPTH


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(values, shared()), st.integers(0, 3))
def test_the_older_protocols_are_read(value, protocol):
    assert both(pickle.dumps(value, protocol), UNBOUNDED) is None


@native
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(values, shared()),
    st.integers(0, pickle.HIGHEST_PROTOCOL),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(0, 10**6),
)
def test_both_stop_a_corrupt_pickle_alike(value, protocol, changes, cut):
    data = bytearray(pickle.dumps(value, protocol))
    for at, byte in changes:
        data[at % len(data)] = byte
    for bounds in (BOUNDS, (40, 30, 3)):
        both(bytes(data), bounds)
        both(bytes(data[: cut % len(data)]), bounds)


# -- the bombs: each a few hundred bytes, each stopped before the unpickler runs

DUMP_HEAD = b"\x80\x04}(\x8c\x07entries](}(\x8c\x0binput_sizes"  # {'entries': [{'input_sizes':
DUMP_TAIL = b"u" + b"e" + b"u."  # SETITEMS, APPENDS, SETITEMS, STOP


def _around(payload: bytes) -> bytes:
    """A dump whose one entry's input_sizes are what ``payload`` (opcodes) builds."""
    data = DUMP_HEAD + payload + DUMP_TAIL
    assert both(DUMP_HEAD + b"N" + DUMP_TAIL) is None
    return data


def shared_tuples(levels: int = 30, fanout: int = 3) -> bytes:
    """A tuple that holds the one below ``fanout`` times, ``levels`` deep, as a dict key: 3^30
    objects for the unpickler to hash inside its SETITEM, in some 400 bytes."""
    ops = b")q\x000"  # EMPTY_TUPLE, BINPUT 0, POP
    for level in range(levels):
        ops += b"(" + (b"h" + bytes([level])) * fanout + b"tq" + bytes([level + 1]) + b"0"
    return _around(ops + b"}h" + bytes([levels]) + b"K\x01s")  # {that tuple: 1}


def huge_length() -> bytes:
    """BINBYTES8 of 2^40 bytes: the unpickler allocates them before it reads."""
    return _around(b"\x8e" + struct.pack("<Q", 1 << 40))


def far_memo() -> bytes:
    """LONG_BINPUT 2^30: the unpickler grows its memo to twice that many slots."""
    return _around(b"Nr" + struct.pack("<I", 1 << 30))


def deep(levels: int = 10**6) -> bytes:
    return _around(b"]" * levels + b"a" * (levels - 1))


def repeated_string(count: int = 3000) -> bytes:
    """One 100 KB string referred to ``count`` times: 300 MB to any walk."""
    ops = b"X" + struct.pack("<I", 100_000) + b"x" * 100_000 + b"q\x00"
    return _around(b"](" + ops + b"h\x00" * (count - 1) + b"e")


def long_int() -> bytes:
    """An int of 20,000 bits: any str() of it raises (over 4300 digits)."""
    return _around(b"\x8b" + struct.pack("<i", 2501) + b"\x01" * 2501)


def cycle() -> bytes:
    """A list that holds itself."""
    return _around(b"]q\x00h\x00a")


def changed_after_use() -> bytes:
    """A list counted into ten others, then grown: each count already made would be short."""
    return _around(b"]q\x00(" + b"h\x00" * 10 + b"th\x00" + b"K\x01" + b"a0")


@pytest.mark.parametrize(
    "make, why",
    [
        (shared_tuples, Stop.OBJECTS),
        (huge_length, Stop.TRUNCATED),
        (far_memo, Stop.MEMO),
        (lambda: deep(10**5), Stop.DEPTH),
        (repeated_string, Stop.BYTES),
        (long_int, Stop.NUMBER),
        (cycle, Stop.CHANGED),
        (changed_after_use, Stop.CHANGED),
    ],
)
def test_a_bomb_is_stopped_before_unpickling(make, why):
    data = make()
    found = both(data)
    assert found is not None and found[0] == why, found
    loaded = load_dump(data)
    assert loaded.document is None and not loaded.refused
    assert loaded.error and ("not read" in loaded.error or "unreadable" in loaded.error)


def test_a_tuple_is_no_dict_key_however_small():
    """A tuple's hash walks it: a dict key or set item may only be a string or a short number."""
    data = _around(b"}K\x01K\x02\x86K\x01s")  # {(1, 2): 1}
    assert both(data)[0] == Stop.KEY
    assert both(_around(b"}\x8c\x01aK\x01s")) is None  # {'a': 1}


def test_an_int_is_what_torch_writes_at_most():
    assert both(_around(b"\x8a\x08" + b"\xff" * 7 + b"\x7f")) is None  # 2^63 - 1
    assert both(_around(b"\x8a\x09" + b"\x00" * 9))[0] == Stop.NUMBER
    assert both(_around(b"I" + b"9" * 20 + b"\n")) is None
    assert both(_around(b"L" + b"9" * 21 + b"L\n"))[0] == Stop.NUMBER


def test_a_global_is_left_to_the_unpickler_which_refuses_it():
    data = pickle.dumps({"entries": [print]}, 4)
    assert both(data) is None
    loaded = load_dump(data)
    assert loaded.refused and "builtins.print" in (loaded.error or "")
    reduce_alone = _around(b"NN\x85R")  # REDUCE with no global: nothing to call
    assert both(reduce_alone)[0] == Stop.NOT_DATA
    assert load_dump(reduce_alone).refused
