"""How two records of one process become one: a policy per field, declared on the field.

Two records of one process meet two ways. The same process can be in two sources (its stdout
and its NCCL_DEBUG_FILE, one log attached twice): the *twin* join keeps what the first said and
adds what only the second saw. A big file is parsed in stretches by several processes
(``parse_sources``): the *next* join folds the record of the next stretch into the record so
far, as one reader going on would have (counts add up, the later value holds where a fold writes
over, appended lists append in order, bounded as the folds bound them).

Each field of the records (:mod:`nccldoctor.ncclog.records`) declares its :class:`Join` once,
with its bound, through :func:`joined`; :func:`join` applies them all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field, fields
from typing import Any, Literal, NamedTuple

Way = Literal["twin", "next"]


class Join(NamedTuple):
    """How one field of a second record goes into the first: ``twin`` (the same process in
    another source) and ``next`` (the next stretch of the same file), each ``(a, b) -> a+b``."""

    twin: Callable[[Any, Any], Any]
    next: Callable[[Any, Any], Any]


def joined(how: Join, **default: Any) -> Any:
    """A dataclass field that joins as ``how`` says (``default`` or ``default_factory``)."""
    return field(metadata={"join": how}, **default)


def join(mine: Any, other: Any, way: Way) -> None:
    """Fold the record ``other`` into ``mine``, field by field, the ``way`` each declares."""
    for f in fields(mine):
        how: Join = f.metadata["join"]
        setattr(mine, f.name, getattr(how, way)(getattr(mine, f.name), getattr(other, f.name)))


def _said(value: Any) -> bool:
    """Whether a fold wrote it: not None, no empty text or list, no table without rows."""
    return not (value is None or value == "" or value == [] or getattr(value, "empty", False))


def _first(a: Any, b: Any) -> Any:
    return a


def _first_said(a: Any, b: Any) -> Any:
    return a if _said(a) or b is None else b


def _later_said(a: Any, b: Any) -> Any:
    return b if _said(b) else a


def _either(a: bool, b: bool) -> bool:
    return a or b


def _add(a: int, b: int) -> int:
    return a + b


def _concat(a: list, b: list) -> list:
    return a + b


def _new_keys(a: dict, b: dict) -> dict:
    for key, value in b.items():
        a.setdefault(key, value)
    return a


def _over(a: dict, b: dict) -> dict:
    a.update(b)
    return a


def _add_counts(a: dict[Any, int], b: dict[Any, int]) -> dict[Any, int]:
    for key, n in b.items():
        a[key] = a.get(key, 0) + n
    return a


def _most(a: dict[Any, int], b: dict[Any, int]) -> dict[Any, int]:
    for key, n in b.items():
        a[key] = max(n, a.get(key, n))
    return a


def appended_to(cap: int) -> Callable[[list, list], list]:
    return lambda a, b: (a + b)[:cap]


def union_to(cap: int | None) -> Callable[[list, list], list]:
    def union(a: list, b: list) -> list:
        new = [x for x in b if x not in a]
        return a + (new if cap is None else new[: max(0, cap - len(a))])

    return union


def _add_algos(a: dict[Any, list[int]], b: dict[Any, list[int]]) -> dict[Any, list[int]]:
    """``algo_log`` rows: (function, algorithm, protocol) -> [smallest, largest bytes, calls]."""
    for key, (low, high, calls) in b.items():
        seen = a.get(key)
        a[key] = [low, high, calls] if seen is None else [
            min(seen[0], low), max(seen[1], high), seen[2] + calls
        ]  # fmt: skip
    return a


def ops_to(cap: int) -> Callable[[dict, dict], dict]:
    """Collectives by opCount, in the order met, the latest ``cap`` kept."""

    def appended(a: dict, b: dict) -> dict:
        for op_count, op in b.items():
            a[op_count] = op
            a.move_to_end(op_count)
        while len(a) > cap:
            a.popitem(last=False)
        return a

    return appended


def _newest_op(a: Any, b: Any) -> Any:
    return b if a is None or (b is not None and b.op_count >= a.op_count) else a


def by_index(devices: list[dict], more: list[dict]) -> list[dict]:
    """IB device lists joined by their index, the later entry winning, at most 64."""
    both = {d["index"]: d for d in devices}
    both.update((d["index"], d) for d in more)
    return [both[i] for i in sorted(both)][:64]


# The policies, by what a field's folds do with it
FLAG = Join(_either, _either)  # a flag stays set
COUNT = Join(_add, _add)  # lines counted
VALUE = Join(_first_said, _later_said)  # written over by each line that says it
FIRST = Join(_first_said, _first)  # said once, by the first line
KEYED = Join(_new_keys, _over)  # a table whose keys the folds write over
FIRST_KEYED = Join(_new_keys, _new_keys)  # ... whose keys the first line to say them keeps
COUNTS = Join(_new_keys, _add_counts)  # calls counted by key: one source's count, or added up
SUMS = Join(_add_counts, _add_counts)  # lines counted by key, added up from every source
MOST = Join(_most, _most)  # the largest number said by key
ALGOS = Join(_new_keys, _add_algos)  # per-call algorithms: sizes and calls
NEWEST_OP = Join(_newest_op, _newest_op)
IB_PORTS = Join(lambda a, b: by_index(b, a), by_index)  # one line per port in 2.3
COUNTED_BY_RECORD = Join(_new_keys, _first)  # the next stretch's counted by its record's join
OWN = Join(_first, _first)  # the first record's alone
LATEST = Join(_first, _later_said)  # the latest said in the file
EACH = Join(_concat, _first)  # what each source said; a stretch's is its file's


def appended(cap: int) -> Join:
    """A list the folds append to, up to ``cap``: a second source's new items, a stretch's all."""
    return Join(union_to(cap), appended_to(cap))


def kept(cap: int) -> Join:
    """The first ``cap`` items, in order, of every record."""
    return Join(appended_to(cap), appended_to(cap))


def union(cap: int | None) -> Join:
    """A list of distinct items in the order met, up to ``cap``."""
    return Join(union_to(cap), union_to(cap))


def ops(cap: int) -> Join:
    return Join(_new_keys, ops_to(cap))
