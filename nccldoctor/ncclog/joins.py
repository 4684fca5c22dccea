"""Two records of one process made one.

A process can be in two sources (its stdout and its NCCL_DEBUG_FILE, or one log attached twice):
``merge_into`` keeps what the first said and adds what only the second saw. A big file is parsed
in stretches by several processes (``parser.parse_sources``): ``continue_into`` folds the record
of the next stretch into the record so far, as one reader going on would have: counts add up,
the later stretch's last line and latest collectives win, and the lines a stretch could not place
(it did not see their communicator's Init START) go where the stretch before left off.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from nccldoctor.ncclog.folds import tuned_comm
from nccldoctor.ncclog.netfolds import by_index
from nccldoctor.ncclog.records import (
    MAX_BACKTRACE,
    MAX_OPS,
    MAX_SAMPLES,
    MAX_WARNS,
    UNKNOWN_COMM,
    CommRank,
    Op,
    ProcessLog,
    TuningTable,
)


def merge_into(mine: object, other: object) -> None:
    """Fold a second record of the same process (e.g. stdout and NCCL_DEBUG_FILE) into the first."""
    for f in fields(mine):  # type: ignore[arg-type]
        a, b = getattr(mine, f.name), getattr(other, f.name)
        if b is None:  # the second record did not see it (e.g. no bootstrap line there)
            continue
        if f.name == "last_op":
            if b is not None and (a is None or b.op_count > a.op_count):
                setattr(mine, f.name, b)
        elif isinstance(a, bool):
            setattr(mine, f.name, a or b)
        elif isinstance(a, int) and f.name in ("lines", "warn_count", "connections_dropped"):
            setattr(mine, f.name, a + b)
        elif isinstance(a, list):
            a.extend(x for x in b[: max(0, 64 - len(a))] if x not in a)
        elif isinstance(a, dict):
            for k, v in b.items():
                if k not in a:
                    a[k] = v
                elif f.name == "comms":
                    merge_into(a[k], v)
        elif a is None or a == "" or (hasattr(a, "rows") and not a.rows):
            setattr(mine, f.name, b)


def continue_into(mine: ProcessLog, later: ProcessLog) -> None:
    """Fold ``later``, the record of the next stretch of ``mine``'s file, into ``mine``."""
    comms, later.comms = later.comms, {}
    unplaced = comms.pop(UNKNOWN_COMM, None)
    if mine.current is None:  # ≤2.18 name a communicator first in its Init COMPLETE (folds.init)
        done = next((p for p, c in comms.items() if c.init_complete and p not in mine.comms), None)
        if done is not None:
            mine.adopt(done)  # the lines of its init the stretch before read are its too
    _continue_fields(mine, later)
    for ptr, comm in comms.items():
        if ptr in mine.comms:
            _continue_fields(mine.comms[ptr], comm)
        else:
            mine.comms[ptr] = comm
    if unplaced is not None:
        # a call's tuning line belongs to the communicator this process is rank 0 of, any
        # other line that names none to the one being set up where the stretch before ended
        tuned = tuned_comm(mine)
        tuned.algo_log = _add_algos(tuned.algo_log, unplaced.algo_log)
        tuned.tuned = _add_counts(tuned.tuned, unplaced.tuned)
        unplaced.algo_log, unplaced.tuned = {}, {}
        _continue_fields(mine.comm(), unplaced)


def _continue_fields(mine: CommRank | ProcessLog, later: CommRank | ProcessLog) -> None:
    if isinstance(mine, CommRank) and isinstance(later, CommRank):
        for key, label in later.connections.items():  # one seen in both stretches counts once
            mine.add_connection(key, label)
    for f in fields(mine):
        if f.name == "comms":
            continue
        a, b = getattr(mine, f.name), getattr(later, f.name)
        rule = _STRETCH_RULES.get(f.name)
        if rule is None:  # what the folds do: set a flag, write over a key or a value
            rule = _either if isinstance(a, bool) else _over if isinstance(a, dict) else _later
        setattr(mine, f.name, rule(a, b))


def _later(a: Any, b: Any) -> Any:
    said = b is not None and b != "" and b != [] and not (isinstance(b, TuningTable) and not b.rows)
    return b if said else a


def _earlier(a: Any, b: Any) -> Any:
    return a


def _either(a: bool, b: bool) -> bool:
    return a or b


def _over(a: dict | None, b: dict | None) -> dict | None:
    return b if a is None else a if b is None else {**a, **b}


def _add(a: int, b: int) -> int:
    return a + b


def _add_counts(a: dict[Any, int], b: dict[Any, int]) -> dict[Any, int]:
    return {**a, **{key: a.get(key, 0) + n for key, n in b.items()}}


def _add_algos(a: dict[Any, list[int]], b: dict[Any, list[int]]) -> dict[Any, list[int]]:
    """``algo_log`` rows: (function, algorithm, protocol) -> [smallest, largest bytes, calls]."""
    joined = {key: list(row) for key, row in a.items()}
    for key, (low, high, calls) in b.items():
        seen = joined.get(key)
        joined[key] = [low, high, calls] if seen is None else [
            min(seen[0], low), max(seen[1], high), seen[2] + calls
        ]  # fmt: skip
    return joined


def _append_ops(a: OrderedDict[int, Op], b: OrderedDict[int, Op]) -> OrderedDict[int, Op]:
    ops = OrderedDict(a)
    for op_count, op in b.items():
        ops[op_count] = op
        ops.move_to_end(op_count)
    while len(ops) > MAX_OPS:
        ops.popitem(last=False)
    return ops


def _newest_op(a: Op | None, b: Op | None) -> Op | None:
    return b if a is None or (b is not None and b.op_count >= a.op_count) else a


def _appended(cap: int) -> Callable[[list, list], list]:
    return lambda a, b: (a + b)[:cap]


def _new_items(a: list, b: list) -> list:
    return a + [x for x in b if x not in a]


# A later stretch's value of a field, where the default (a flag stays set, a table's keys and
# a value are written over by the later) is not what the folds do: what they count adds up,
# what they append is appended in order, bounded as they bound it.
_STRETCH_RULES: dict[str, Callable[[Any, Any], Any]] = {
    "comm": _earlier,  # the lines a stretch could not place are in its "?" record
    "lines": _add,
    "warn_count": _add,
    "connections_dropped": _add,
    "transports": _earlier,  # counted with the connections above
    "tuned": _add_counts,
    "connect_retries": _add_counts,
    "algo_log": _add_algos,
    "ops": _append_ops,
    "last_op": _newest_op,
    "connections": _earlier,
    "warns": _appended(MAX_WARNS),
    "backtrace": _appended(MAX_BACKTRACE),
    "diagnostics": _appended(MAX_SAMPLES * 8),
    "gdr_pairs": _appended(64),
    "found_ifs": _appended(64),  # in order: settled when the whole file is read
    "ib_devices": by_index,  # 2.3 prints one line per port
    "failed_nets": _new_items,
    "networks": _new_items,
    "sources": _new_items,
}
