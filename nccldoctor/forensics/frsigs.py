"""Op signatures of Flight Recorder entries and how two differ, as torchfrtrace's ``Op.match``
compares them (``torch/distributed/flight_recorder/components/types.py``): op type, sizes (but
those an all_to_all, scatter or gather may vary), dtypes, state.
"""

from __future__ import annotations

import ast
from typing import Any

from nccldoctor.forensics.frreading import Side

# Ops whose input or output sizes legitimately differ across ranks (types.py Op.match).
_INPUT_SIZES_VARY = ("all_to_all", "scatter")
_OUTPUT_SIZES_VARY = ("all_to_all", "gather")

# An op signature: (op, payload, state); the payload is the repr of (input sizes, output sizes,
# input dtypes, output dtypes), one repr per entry being the cheapest hashable form of them. A
# coalesced collective is the concatenation of its ops' signatures.
Sig = tuple[str, ...]
FIELDS = 3
_OP_TYPES: dict[Any, str] = {}


def op_type(name: Any) -> str:
    """``nccl:send 0->1`` -> ``send``; the backend prefix differs between gloo and NCCL."""
    op = _OP_TYPES.get(name)
    if op is None:
        op = str(name).split(":", 1)[-1].split(" ", 1)[0]
        if len(_OP_TYPES) < 4096:  # names are a handful; a hostile dump may not grow this
            _OP_TYPES[name] = op
    return op


def payload_texts(payload: str) -> tuple[str, str, str]:
    """(input sizes, output sizes, dtypes) as texts, from a signature's payload (our own repr)."""
    try:
        sizes_in, sizes_out, dt_in, dt_out = ast.literal_eval(payload)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return payload, "", ""
    return str(sizes_in), str(sizes_out), f"{dt_in}->{dt_out}"


def bits(mask: int) -> list[int]:
    """The ranks a bit mask holds, lowest first."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def mismatch_kind(row: dict[Sig, int]) -> str | None:
    """The first way the signatures of a row differ, in torchfrtrace's order (Op.match): op
    type, sizes, dtypes, state; None when only sizes that may differ (all_to_all) differ."""
    sigs = list(row)
    ref = sigs[0]
    order = ("op", "size", "dtype", "state")
    worst = None
    for other in sigs[1:]:
        kind = _differs(ref, other)
        if kind and (worst is None or order.index(kind) < order.index(worst)):
            worst = kind
    return worst


def _differs(a: Sig, b: Sig) -> str | None:
    if len(a) != len(b):
        return "op"  # a different number of ops in a coalesced collective
    ops = [(a[i : i + FIELDS], b[i : i + FIELDS]) for i in range(0, len(a), FIELDS)]
    if any(x[0] != y[0] for x, y in ops):
        return "op"
    payloads = [(x[0], payload_texts(x[1]), payload_texts(y[1])) for x, y in ops if x[1] != y[1]]
    for op, x, y in payloads:
        if (x[0] != y[0] and op not in _INPUT_SIZES_VARY) or (
            x[1] != y[1] and op not in _OUTPUT_SIZES_VARY
        ):
            return "size"
    if any(x[2] != y[2] for _, x, y in payloads):
        return "dtype"
    if any(x[2] != y[2] for x, y in ops):
        return "state"
    return None


def side_of(sig: Sig, ranks: list[int]) -> Side:
    ops = [sig[i : i + FIELDS] for i in range(0, len(sig), FIELDS)]
    shown = [(op, *payload_texts(payload), state) for op, payload, state in ops]
    if len(shown) == 1:
        return Side(ranks, *shown[0])
    part = list(zip(*shown, strict=True))
    joined = ["[" + ", ".join(p) + "]" for p in part[1:]]
    return Side(ranks, f"coalesced({', '.join(part[0])})", *joined)
