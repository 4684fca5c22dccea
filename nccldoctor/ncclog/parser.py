"""The one harness: blocks of lines in, per-process records out, in one pass.

Hot path. Each block (1 MiB of whole lines; in Python, runs of 256 KiB) is sorted by
``lines.classify``, one pass in C (its Python twin where the package was built without a
compiler): collective-trace lines (``AllReduce: opCount …``, one per call per rank, the table's
``counted`` kind) and ``NCCL CALL`` lines are only counted; the *candidates*, the other lines
that say ``NCCL`` (init, transports, the algorithm of each call, WARNs), are folded through the
kinds table, plus the latest collective of each communicator, found from the block's end.
The application's lines (a launcher's stdout: training steps, warnings) are read line by line
only when their *shapes* (the lines with every digit as 0, so a progress bar is one shape) hold
something new that the signature gate or a ``TEXT_KINDS`` needle may match. Memory per source:
two blocks plus bounded records and shape sets.
"""

from __future__ import annotations

import functools
import operator
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from itertools import pairwise

from nccldoctor.limits import MAX_DIGITS, MAX_PROCESSES
from nccldoctor.ncclog.envelope import LEGACY_NEEDLES, clean, parse_line
from nccldoctor.ncclog.folds import version
from nccldoctor.ncclog.inputs import (
    BLOCK_BYTES,
    MAX_LINE,
    Block,
    BlockReader,
    Source,
    Stretch,
    stretches,
)
from nccldoctor.ncclog.kinds import TEXT_KINDS, match_kind, warned
from nccldoctor.ncclog.lines import (
    CANDIDATE,
    COLL_NEEDLE,
    HAS_NCCL,
    NATIVE,
    classify,
)
from nccldoctor.ncclog.netfolds import settle_interfaces
from nccldoctor.ncclog.records import MAX_SAMPLES, LogSet, ProcessLog, Warn
from nccldoctor.ncclog.signals import Identify, may_match, record

# What a log's lines left out, as the logs.truncated finding names it
LONG_NUMBER = f"lines with a number of more than {MAX_DIGITS} digits"
MANY_PROCESSES = f"lines of processes past the first {MAX_PROCESSES:,}"


_DIGITS = re.compile(rb"\d+")


def _text(raw: bytes) -> str:
    return clean(raw.decode("utf-8", "replace").rstrip("\r"))


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
MEMO_LIMIT = 4096
_KEY_AND_TEXT = operator.itemgetter(0, 4)  # of a memo entry: its process, the line as text
WRAP_MIN = 80  # terminals wrap at their width: a shorter line was not cut by a wrap
POOL_MIN_BYTES = 32 << 20  # below this, starting worker processes costs more than it saves
TASKS_PER_JOB = 8  # stretches per process: they finish together however unlike the files are


def _version(text: str) -> tuple[str, str | None] | None:
    """The NCCL and CUDA versions of a bare ``NCCL version …`` line (≤2.21 rank 0's printf)."""
    found = match_kind(text[text.find("NCCL version ") :])
    if found is None or found[0].fold is not version:
        return None
    m = found[1]
    return m["version"] + (m["suffix"] or ""), m["cuda"]


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


class SourceParser:
    """Parses one source; feed it blocks of whole lines, call ``finish``, read ``result``."""

    def __init__(self, name: str, identify: Identify | None = None) -> None:
        self.result = LogSet(sources=[name])
        self._identify = identify
        self._needles: dict[str, bytes] = {}  # comm pointer -> b" comm 0x… [nranks="
        self._last_coll: Block | None = None  # its tail holds the latest collectives
        self._memo: dict[bytes, tuple] = {}  # repeated line -> (key, kind, match, envelope, text)
        # lines of the memo met since the last line parsed, folded once a block (or before the
        # next line parsed): their kinds' folds take a count, so one fold stands for many lines
        self._repeated: Counter[bytes] = Counter()
        self._repeated_last: dict[str, str] = {}  # ... and of each process the last of them
        self._wrapped: str | None = None  # a long line no signature matched: maybe wrapped
        self._shapes: set[tuple[bytes, bytes]] = set()  # application line pairs looked at
        self._loud: set[tuple[bytes, bytes]] = set()  # ... and those worth reading line by line
        self._prev_shape = b""
        self._split_once = False

    def _process(self, key: str, host: str, pid: int) -> ProcessLog | None:
        """The record of ``key``; None past MAX_PROCESSES (each costs a record's memory)."""
        proc = self.result.processes.get(key)
        if proc is None:
            if len(self.result.processes) >= MAX_PROCESSES:
                return None
            proc = self.result.processes[key] = ProcessLog(key, host, pid, self.result.sources[:1])
        self.result.last_key = key
        return proc

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
                    text = _text(before)
                    self._wrapped = text if len(text) >= WRAP_MIN else None
            wrapped = self._wrapped
            if raw:
                self.line(raw)
            if self._wrapped is not None and self._wrapped is not wrapped and stop + 1 < end:
                after = data[stop + 1 : data.find(b"\n", stop + 1, end)]
                if HAS_NCCL(after) is None:  # this long line was cut: try it with the next
                    joined = self._wrapped + _text(after)
                    record(result.signatures, self._identify, joined, None)  # type: ignore[arg-type]
                    self._wrapped = None

    def _fold_repeated(self) -> None:
        """Fold each line seen before once for all its repeats (a repeating kind's fold counts
        them), and set each process's last line; forget them."""
        processes, repeated, last = self.result.processes, self._repeated, self._repeated_last
        for raw, times in repeated.items():
            key, kind, match, env, _ = self._memo[raw]
            kind.fold(processes[key], match, env, times)
        for key, text in last.items():
            processes[key].last_line = text
        self.result.nccl_lines += sum(repeated.values())
        repeated.clear()
        last.clear()

    def _parse(self, raw: bytes) -> None:
        """One line that is not a counted one (a line seen before is folded from the memo)."""
        hit = self._memo.get(raw)
        if hit is None:
            if raw:
                self.line(raw)
            return
        key, kind, match, env, text = hit
        proc = self.result.processes[key]
        kind.fold(proc, match, env)
        proc.last_line = text
        self.result.nccl_lines += 1

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
            if self._loud_text(b"".join(shapes[g : g + GROUP + 1]))
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
                    text = _text(raw)  # a wrap's first half, for the line after it
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
            return self._loud.isdisjoint(pairwise(shapes)) and not self._loud_text(  # they are
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
            if self._loud_text(b"\n".join(a + b for a, b in new)):  # which pairs, then?
                self._loud.update(pair for pair in new if self._loud_text(pair[0] + pair[1]))
        return self._loud.isdisjoint(pairs)

    def _loud_text(self, chunk: bytes) -> bool:
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
                text = _text(raw)  # as the line was read: a Markdown mark is not in its host
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

    def _bare_version(self, text: str) -> None:
        result = self.result
        said = _version(text)
        if said is None:
            return
        if result.last_key is None:  # its process is in the stretch before (continue_with)
            result.unclaimed_version = result.unclaimed_version or said
        else:
            result.processes[result.last_key].claim_version(*said)
        if len(result.bare_versions) < MAX_SAMPLES:
            text = text.strip()
            if text not in result.bare_versions:
                result.bare_versions.append(text)

    def _other(self, text: str) -> None:
        """A line that is not NCCL's: the facts of TEXT_KINDS (PyTorch's world size, its
        watchdog's sequence numbers, its word that init failed)."""
        for kind in TEXT_KINDS:
            if any(needle in text for needle in kind.needles):
                m = kind.pattern.search(text)
                if m is not None:
                    kind.fold(self.result, m, text)

    def line(self, raw: bytes, counted: bool = False) -> None:
        """Parse one line (``counted``: already in the line accounting); one that holds a number
        Python will not read (ValueError: over MAX_DIGITS digits) is left out, and counted."""
        try:
            self._line(raw, counted)
        except ValueError:
            if max(map(len, _DIGITS.findall(raw)), default=0) <= MAX_DIGITS:
                raise
            self._leave_out(LONG_NUMBER)

    def _leave_out(self, why: str) -> None:
        self.result.left_out[why] = self.result.left_out.get(why, 0) + 1

    def _line(self, raw: bytes, counted: bool) -> None:
        result = self.result
        text = _text(raw)
        env = parse_line(text)
        if env is None:
            if "NCCL version " in text:
                self._bare_version(text)
            elif counted or " NCCL " in text:
                result.garbled_lines += 1
            elif raw:  # as the lines only counted in bulk are: a Markdown fence is a line too
                result.other_lines += 1
                self._other(text)
            if self._identify and text.strip():  # whose line: known in a one-process file only
                wrapped, self._wrapped = self._wrapped, None
                # a terminal's hard wrap cuts a long line in two: try it joined to the one before
                hit = record(result.signatures, self._identify, text, None) or (
                    wrapped is not None
                    and record(result.signatures, self._identify, wrapped + text, None)
                )
                if not hit and len(text) >= WRAP_MIN:
                    self._wrapped = text
                last = text.find("Last error:")
                if last >= 0:  # PyTorch quotes NCCL's last WARN there: the cause, matched too
                    record(result.signatures, self._identify, text[last + 11 :].strip(), None, text)
            return
        if not counted:
            result.nccl_lines += 1
        head = env.head
        proc = self._process(head.key, head.host, head.pid)
        if proc is None:
            self._leave_out(MANY_PROCESSES)
            return
        proc.last_line = text
        if env.level in ("WARN", "ATTN"):
            proc.add_warn(Warn(head.file, head.line, head.func, env.msg, text, level=env.level))
            warned(proc, env)
            if self._identify:
                record(result.signatures, self._identify, env.msg, head.key, text)
            return
        if env.level == "CALL":
            result.call_lines += 1
            return
        if env.level == "DIAG":
            if len(proc.diagnostics) < MAX_SAMPLES * 8:
                proc.diagnostics.append(env.msg)
            return
        found = match_kind(env.msg)
        if found is None:
            result.unknown_lines += 1
            if len(result.unknown_samples) < MAX_SAMPLES:
                result.unknown_samples.append(text[:300])
            return
        kind, m = found
        kind.fold(proc, m, env)
        if kind.repeats:
            if len(self._memo) >= MEMO_LIMIT:
                self._memo.clear()
            self._memo[raw] = (head.key, kind, m, env, text)


def parse_source(
    name: str,
    block: int = BLOCK_BYTES,
    max_line: int = MAX_LINE,
    identify: Identify | None = None,
) -> LogSet:
    """Parse one file (or ``-``); never raises on bad content. ``identify`` names the known
    signature of a WARN or non-NCCL line (see :mod:`~nccldoctor.ncclog.signals`)."""
    return _settled(parse_stretch(name, (0, None), block, max_line, identify))


def parse_stretch(
    name: str,
    stretch: Stretch,
    block: int = BLOCK_BYTES,
    max_line: int = MAX_LINE,
    identify: Identify | None = None,
) -> LogSet:
    """Parse the lines of one file that start in ``stretch``; the stretches of a file, parsed
    anywhere and folded in order with ``LogSet.continue_with``, are the file parsed whole."""
    reader = BlockReader(name, block, max_line, stretch)
    parser = SourceParser(name, identify)
    for data, start, end in reader:
        parser.feed(data, start, end)
    parser.finish()
    result = parser.result
    if reader.truncated:
        result.cut_lines[name] = reader.truncated
    if reader.read_error:
        result.read_errors.append(f"{name}: {reader.read_error}")
    return result


def _settled(result: LogSet) -> LogSet:
    """A whole file's record: in one rank's file every line, and every signature, is its;
    what several lines say together is read now that they are all in."""
    for proc in result.processes.values():
        settle_interfaces(proc)
    if len(result.processes) == 1:
        only = next(iter(result.processes.values()))
        only.lines = result.lines
        for hit in result.signatures.values():
            hit.lines = [(text, line, key or only.key) for text, line, key in hit.lines]
    return result


def _parse_task(task: tuple[str, Stretch], identify: Identify | None) -> LogSet:
    return parse_stretch(task[0], task[1], identify=identify)


def parse_sources(
    sources: Iterable[Source],
    jobs: int | None = None,
    progress: Callable[[str], None] | None = None,
    identify: Identify | None = None,
) -> LogSet:
    """Parse every source, spreading stretches of the files over ``jobs`` processes when that
    pays off. ``identify`` must be picklable by reference (a module-level function) for the pool."""
    sources = list(sources)
    merged = LogSet()
    jobs = jobs or os.cpu_count() or 1
    files = sorted((s for s in sources if s.name != "-"), key=lambda s: -s.size)  # big first
    total = sum(s.size for s in files)
    size = total // (jobs * TASKS_PER_JOB)
    tasks = [(s.name, cut) for s in files for cut in stretches(s, size, COLL_NEEDLE)]
    pooled = jobs > 1 and len(tasks) > 1 and total >= POOL_MIN_BYTES
    if pooled:
        if identify is not None:  # the catalogue is loaded before the fork: the workers share it
            may_match(identify, "")
        import multiprocessing  # only runs that spread over processes pay for these imports
        from concurrent.futures import ProcessPoolExecutor

        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=ctx) as pool:
            parse = functools.partial(_parse_task, identify=identify)
            whole: LogSet | None = None  # the file being folded, stretch by stretch
            for (name, (_, stop)), result in zip(tasks, pool.map(parse, tasks), strict=True):
                if whole is None:
                    whole = result
                else:
                    whole.continue_with(result)
                if stop is None:  # its last stretch
                    merged.merge(_settled(whole))
                    whole = None
                    if progress:
                        progress(name)
    for s in sources:
        if pooled and s.name != "-":
            continue
        merged.merge(parse_source(s.name, identify=identify))
        if progress:
            progress(s.name)
    merged.sources = [s.name for s in sources]
    return merged
