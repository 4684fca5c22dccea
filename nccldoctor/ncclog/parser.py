"""The one harness: blocks of lines in, per-process records out, in one pass.

Hot path. Each block (1 MiB of whole lines; in Python, runs of 256 KiB) is sorted by
``lines.classify``, one pass in C (its Python twin where the package was built without a
compiler): collective-trace lines (``AllReduce: opCount …``, one per call per rank, the table's
``counted`` kind) and ``NCCL CALL`` lines are only counted; the *candidates*, the other lines
that say ``NCCL`` (init, transports, the algorithm of each call, WARNs), are folded through the
kinds table (:mod:`~nccldoctor.ncclog.linefold`), plus the latest collective of each
communicator, found from the block's end. The application's lines (a launcher's stdout:
training steps, warnings) are read line by line only when their *shapes* (the lines with every
digit as 0, so a progress bar is one shape) hold something new that the signature gate or a
``TEXT_KINDS`` needle may match. Memory per source: two blocks plus bounded records and shape
sets. :mod:`~nccldoctor.ncclog.sources` runs one of these per file, or per stretch of a big one.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from itertools import pairwise

from nccldoctor.ncclog.envelope import LEGACY_NEEDLES, clean, parse_line
from nccldoctor.ncclog.inputs import BLOCK_BYTES, Block
from nccldoctor.ncclog.kinds import TEXT_KINDS
from nccldoctor.ncclog.linefold import WRAP_MIN, LineFolder, text_of
from nccldoctor.ncclog.lines import (
    CANDIDATE,
    COLL_NEEDLE,
    HAS_NCCL,
    NATIVE,
    classify,
)
from nccldoctor.ncclog.signals import Identify, may_match, record


def _line_at(data: bytes, start: int, end: int, at: int) -> bytes:
    """The line of ``data[start:end]`` that holds position ``at``."""
    return data[max(start, data.rfind(b"\n", start, at) + 1) : data.find(b"\n", at, end)]


TEXT_NEEDLES = tuple(n.encode() for kind in TEXT_KINDS for n in kind.needles) + LEGACY_NEEDLES
MAX_SHAPES = 1 << 15  # application line pairs remembered per source
GROUP = 64  # application lines tested together when a block may hold something
REPEAT = 4  # shapes are remembered when a block's lines repeat them 4 times on average
TAIL_OPS = 32  # collective lines parsed at the end of a source
EXACT_COMMS = 4  # up to this many communicators, a block's collectives are counted per comm
# lines are sorted in runs this long. In Python the lines' objects and the lists of them then
# stay in the CPU's cache between the passes (1 MiB at a time measured 40% slower); the C pass
# makes only the application's and the candidates', so it takes a block.
REGION = BLOCK_BYTES if NATIVE else 256 << 10
_KEY_AND_TEXT = operator.itemgetter(0, 4)  # of a memo entry: its process, the line as text


def _regions(data: bytes, start: int, end: int) -> Iterator[tuple[int, int]]:
    """``data[start:end]`` in runs of whole lines of about REGION bytes (one line longer)."""
    while start < end:
        stop = data.find(b"\n", min(start + REGION, end) - 1, end) + 1 or end
        yield start, stop
        start = stop


def _locate(data: bytes, raw: bytes, pos: int, end: int) -> int:
    """Where the whole line ``raw`` is in ``data``, at or after ``pos`` (before ``end``)."""
    at = data.find(raw, pos, end)
    while at >= 0 and ((at > 0 and data[at - 1] != 10) or data[at + len(raw)] != 10):
        at = data.find(raw, at + 1, end)  # inside a longer line: the next one
    return at


class SourceParser(LineFolder):
    """Parses one source; feed it blocks of whole lines, call ``finish``, read ``result``."""

    def __init__(self, name: str, identify: Identify | None = None) -> None:
        super().__init__(name, identify)
        self._needles: dict[str, bytes] = {}  # comm pointer -> b" comm 0x… [nranks="
        self._last_coll: Block | None = None  # its tail holds the latest collectives
        self._shapes: set[tuple[bytes, bytes]] = set()  # application line pairs looked at
        self._loud: set[tuple[bytes, bytes]] = set()  # ... and those worth reading line by line
        self._prev_shape = b""
        self._split_once = False

    def _comm_needles(self) -> dict[str, bytes]:
        for proc in self.result.processes.values():
            for ptr in proc.comms:
                if ptr not in self._needles and ptr.startswith("0x"):
                    self._needles[ptr] = f" comm {ptr} [nranks=".encode()
        return self._needles

    def feed(self, data: bytes, start: int, end: int) -> None:
        """Take the whole lines ``data[start:end]``."""
        if not self._split_once:  # a rank file's init, up to its first collective, on its own:
            self._split_once = True  # its communicator is then known to the counting of the rest
            at = data.find(COLL_NEEDLE, start, end)
            cut = data.find(b"\n", at, end) + 1 if at >= 0 else -1
            if start < cut < end:
                self.feed(data, start, cut)
                self.feed(data, cut, end)
                return
        n_coll, unmet = self._region(data, start, end)
        self._fold_repeated()
        if n_coll:
            self._latest(data, start, end, unmet)
            self._last_coll = (data, start, end)
        self._mark_last(data, start, end)

    def _region(self, data: bytes, start: int, end: int) -> tuple[int, bool | None]:
        """Account for every line of ``data[start:end]``, parse those worth it; return how many
        collective lines were only counted, and whether some are of communicators not met yet
        (None: not counted, there are too many communicators to count each)."""
        needles = self._comm_needles()
        n_coll = sum(self._sorted(data, a, b) for a, b in _regions(data, start, end))
        if len(needles) > EXACT_COMMS:
            return n_coll, None
        return n_coll, n_coll > sum(data.count(n, start, end) for n in needles.values())

    def _sorted(self, data: bytes, start: int, end: int) -> int:
        """Account for the lines of ``data[start:end]`` as ``lines.classify`` sorts them, parse
        those worth it, return its collective lines."""
        n_lines, shapes, raws, n_call = classify(data, start, end)
        self._read_application(shapes, raws, data, start, end)
        self.result.lines += n_lines
        n_coll = n_lines - len(shapes) - len(raws) - n_call
        self._count(n_coll, n_call)
        return n_coll

    def _count(self, n_coll: int, n_call: int) -> None:
        result = self.result
        result.coll_lines += n_coll
        result.call_lines += n_call
        result.nccl_lines += n_coll + n_call

    def _parse_found(self, data: bytes, start: int, end: int, raws: list[bytes]) -> None:
        """Parse the candidate lines ``raws`` of ``data[start:end]``. The application lines
        around them are not read, so a terminal's wrap across one of them is joined here (the
        line before, after): a line seen before is only counted and folded."""
        memo, result = self._memo, self.result
        repeated, last = self._repeated, self._repeated_last
        if all(map(memo.__contains__, raws)):  # most regions: each line seen before, in C
            repeated.update(raws)
            last.update(map(_KEY_AND_TEXT, map(memo.__getitem__, raws)))
            return
        pos = start  # where the next line not seen before is looked for
        for raw in raws:
            hit = memo.get(raw)
            if hit is not None:  # most of them: a line seen before (the algorithm of each call)
                repeated[raw] += 1
                last[hit[0]] = hit[4]
                continue
            self._fold_repeated()
            first = _locate(data, raw, pos, end)
            stop = pos = first + len(raw)
            if self._identify and first > start:
                before = data[max(start, data.rfind(b"\n", start, first - 1) + 1) : first - 1]
                if HAS_NCCL(before) is None:
                    text = text_of(before)
                    self._wrapped = text if len(text) >= WRAP_MIN else None
            wrapped = self._wrapped
            if raw:
                self.line(raw)
            if self._wrapped is not None and self._wrapped is not wrapped and stop + 1 < end:
                after = data[stop + 1 : data.find(b"\n", stop + 1, end)]
                if HAS_NCCL(after) is None:  # this long line was cut: try it with the next
                    joined = self._wrapped + text_of(after)
                    record(result.signatures, self._identify, joined, None)  # type: ignore[arg-type]
                    self._wrapped = None

    def _read_application(
        self, shapes: list[bytes], raws: list[bytes], data: bytes, start: int, end: int
    ) -> None:
        """Parse the candidate lines ``raws`` of ``data[start:end]`` and count the application's
        lines (``shapes``); when their shapes say something may be in them, read the region line
        by line in order instead."""
        if self._quiet(shapes):
            self._parse_found(data, start, end, raws)
            self.result.other_lines += len(shapes) - shapes.count(b"")
        else:
            lines = data[start:end].split(b"\n")
            lines.pop()  # regions end with a newline
            self._in_order(lines, self._loud_groups(shapes))

    def _loud_groups(self, shapes: list[bytes]) -> set[int]:
        """The groups of GROUP application lines (by the index of their first) that may hold
        something, each tested with the first line of the next (a wrap across the two)."""
        return {
            g
            for g in range(0, len(shapes), GROUP)
            if self._loudtext_of(b"".join(shapes[g : g + GROUP + 1]))
        }

    def _in_order(self, lines: list[bytes], loud: set[int]) -> None:
        """Read a block line by line, in order: NCCL's other lines and the application's lines
        in ``loud`` groups; the rest of the application's lines are only counted."""
        self._fold_repeated()  # those of the regions before, in their order
        n_app = 0
        for raw in lines:
            if HAS_NCCL(raw) is None:
                if n_app - n_app % GROUP in loud:
                    self._parse(raw)
                elif raw:
                    self.result.other_lines += 1
                    text = text_of(raw)  # a wrap's first half, for the line after it
                    self._wrapped = text if len(text) >= WRAP_MIN else None
                n_app += 1
            elif CANDIDATE.search(raw):
                self._parse(raw)

    def _quiet(self, shapes: list[bytes]) -> bool:
        """True when no pair of consecutive application lines may hold a signature (the gate)
        or a TEXT_KINDS needle. Pairs, not lines: a terminal's wrap cuts a line in two. Both
        tests are blind to digits, so they are asked once per pair of shapes."""
        if not shapes:
            return True
        prev, self._prev_shape = self._prev_shape, shapes[-1]
        if len(set(shapes)) * REPEAT > len(shapes):  # lines that do not repeat: in bulk, as
            return self._loud.isdisjoint(pairwise(shapes)) and not self._loudtext_of(  # they are
                prev + b"".join(shapes)  # joined as they touch, and nothing remembered
            )
        pairs = set(pairwise(shapes))
        pairs.add((prev, shapes[0]))
        new = pairs - self._shapes
        if new:
            if len(self._shapes) + len(new) > MAX_SHAPES or len(self._loud) > MAX_SHAPES:
                self._shapes.clear()  # memory stays flat: a pair seen again is only re-checked
                self._loud.clear()
            self._shapes |= new
            if self._loudtext_of(b"\n".join(a + b for a, b in new)):  # which pairs, then?
                self._loud.update(pair for pair in new if self._loudtext_of(pair[0] + pair[1]))
        return self._loud.isdisjoint(pairs)

    def _loudtext_of(self, chunk: bytes) -> bool:
        if any(chunk.find(needle) >= 0 for needle in TEXT_NEEDLES):
            return True
        return bool(self._identify) and may_match(
            self._identify,  # type: ignore[arg-type]
            clean(chunk.decode("utf-8", "replace")),
        )

    def _latest(self, data: bytes, start: int, end: int, unmet: bool | None) -> None:
        """Parse each known communicator's latest collective in ``data[start:end]``, after
        meeting those no init line announced: when ``unmet``, through the block's last
        collectives; when not known (too many communicators to count each), through the
        block's last collective line."""
        if unmet is None:
            known = len(self._needles)
            at = data.rfind(COLL_NEEDLE, start, end)
            if at >= 0:
                self.line(_line_at(data, start, end, at), counted=True)
            unmet = len(self._comm_needles()) > known
        if unmet:
            self._tail(data, start, end)
        for needle in list(self._comm_needles().values()):
            at = data.rfind(needle, start, end)
            if at >= 0:
                self.line(_line_at(data, start, end, at), counted=True)

    def _tail(self, data: bytes, start: int, end: int) -> None:
        """Parse the last collective lines of ``data[start:end]``, oldest first."""
        tail: list[bytes] = []
        stop = end - 1
        while stop > start and len(tail) < TAIL_OPS:
            first = data.rfind(b"\n", start, stop) + 1 or start
            if data.find(COLL_NEEDLE, first, stop) >= 0:
                tail.append(data[first:stop])
            stop = first - 1
        for raw in reversed(tail):
            self.line(raw, counted=True)

    def finish(self) -> None:
        if self._last_coll is not None:
            self._tail(*self._last_coll)
            self._last_coll = None

    def _mark_last(self, data: bytes, start: int, end: int) -> None:
        """The block's last NCCL line is the last line of its process so far."""
        stop = end - 1
        for _ in range(32):
            first = max(start, data.rfind(b"\n", start, stop) + 1)
            raw = data[first:stop]
            if raw.find(b" NCCL ") >= 0:
                text = text_of(raw)  # as the line was read: a Markdown mark is not in its host
                try:
                    env = parse_line(text)
                except ValueError:  # a number over MAX_DIGITS: counted where the line was read
                    return
                proc = env and self._process(env.head.key, env.head.host, env.head.pid)
                if proc is not None:
                    proc.last_line = text
                return
            if first <= start:
                return
            stop = first - 1
