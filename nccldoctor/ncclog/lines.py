"""Which lines of a log are which: the parser's innermost loop.

A line that says ``NCCL`` only as the envelope of a collective-trace line (``NCCL INFO
AllReduce: opCount …``, the kinds table's ``counted`` kind) or of a ``NCCL CALL`` line is only
counted; a line with any other ``NCCL`` is a *candidate*, parsed through the kinds table; a line
without ``NCCL`` is the application's (PyTorch, the launcher, the training script), and the
parser looks at its *shape*, every digit as ``0``, so that a progress bar is one shape.

``classify`` sorts a run of whole lines that way in one pass. It is the C function of
``_lines.c`` where the package was built with a C compiler (the wheel's build hook,
``hatch_build.py``): Python's per-line calls cost 60–170 ns a line and a pass, which capped a
launcher's stdout at about a sixth of ``grep``'s speed. ``classify_python`` is the same
definition in Python, used where no compiler was at hand; the tests hold the two to the same
answers on every real log of the corpus and on generated text.
"""

from __future__ import annotations

import re
from itertools import filterfalse
from typing import NamedTuple

from nccldoctor.ncclog.kinds import KINDS


def _counted_head() -> tuple[bytes, bytes]:
    """The counted kind's needle and its pattern up to the needle, groups unnamed: what a
    collective line says right after ``NCCL INFO`` (``(?:\\w+): opCount ``)."""
    (kind,) = (k for k in KINDS if k.counted)
    text = kind.pattern.pattern
    head = re.sub(r"\(\?P<\w+>", "(?:", text[: text.index(kind.needle) + len(kind.needle)])
    return kind.needle.encode(), head.encode()


COLL_NEEDLE, COLL_HEAD = _counted_head()
CALL_NEEDLE = b"NCCL CALL "  # envelope.py: CALL lines have no device and are only counted
# a line that says NCCL other than as a counted line's envelope: parsed one by one
# (_lines.c spells this out by hand: tests/test_ncclog_lines.py fails when the table moves)
CANDIDATE = re.compile(rb"NCCL(?! INFO " + COLL_HEAD + rb"| CALL )")
HAS_NCCL = re.compile(rb"NCCL").search  # a C function: filterfalse() calls it without bytecode
SHAPE = bytes.maketrans(b"123456789", b"000000000")


class Sorted(NamedTuple):
    """The lines of a run, sorted: the others are counted (collective-trace and CALL lines)."""

    lines: int  # the lines a newline ends
    shapes: list[bytes]  # those without NCCL, the application's, in order, each as its shape
    candidates: list[bytes]  # those CANDIDATE finds, in order
    calls: int  # the ``NCCL CALL `` in the counted lines


def classify_python(data: bytes, start: int, end: int) -> Sorted:
    """The lines of ``data[start:end]``, sorted; a line without its newline is not one."""
    stop = max(start, data.rfind(b"\n", start, end) + 1)  # after the last newline
    lines = data[start:stop].split(b"\n")
    lines.pop()
    candidates = list(filter(CANDIDATE.search, lines))
    calls = data.count(CALL_NEEDLE, start, stop)
    if calls and candidates:
        calls -= b"\n".join(candidates).count(CALL_NEEDLE)
    app = list(filterfalse(HAS_NCCL, lines))
    shapes = b"\n".join(app).translate(SHAPE).split(b"\n") if app else []
    return Sorted(len(lines), shapes, candidates, calls)


try:
    from nccldoctor.ncclog._lines import classify as _classify_c  # type: ignore[import-not-found]
except ImportError:  # built without a C compiler: the Python definition serves
    _classify_c = None

NATIVE = _classify_c is not None  # which one ``classify`` runs: the bench and tests say so


def classify(data: bytes, start: int, end: int) -> Sorted:
    """The lines of ``data[start:end]``, sorted: in C when the package was built with it."""
    if _classify_c is None:
        return classify_python(data, start, end)
    return Sorted._make(_classify_c(data, start, end))
