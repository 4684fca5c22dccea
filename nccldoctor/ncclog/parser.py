"""The streaming parser: blocks of lines in, per-process records out, in one pass.

Hot path. Most of a long log is collective-trace lines (``AllReduce: opCount …``, one per call
per rank with ``NCCL_DEBUG_SUBSYS=COLL``) and ``NCCL CALL`` lines. A rank's collective history
is summarised by its latest operations per communicator, which is what the cross-rank analysis
compares, so those lines are counted in C and only the last one per communicator and block
(plus the final ones of the source) is parsed. Every other line is decoded, split into its
envelope and folded through the kinds table. Memory per source: two blocks plus bounded records.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields

from nccldoctor.ncclog.envelope import clean, parse_line
from nccldoctor.ncclog.inputs import BLOCK_BYTES, MAX_LINE, Block, BlockReader, Source
from nccldoctor.ncclog.kinds import match_kind
from nccldoctor.ncclog.records import MAX_SAMPLES, ProcessLog, Warn
from nccldoctor.ncclog.signals import Identify, SignatureHit, may_match, merge_hits, record

COLL_NEEDLE = b": opCount "
CALL_NEEDLE = b" NCCL CALL "
TAIL_OPS = 32  # collective lines parsed at the end of a source
SPLIT_BYTES = 64 << 10  # regions with other lines are halved down to this before splitting
SPARSE = 64  # ... unless more than 1 line in SPARSE is another line: then split at once
MEMO_LIMIT = 4096
# PyTorch's and launchers' statements of the job size: c10d "world_size=8", torchrun's env dump
# "WORLD_SIZE=8" and "global_world_sizes=[8, 8]" (not "group_world_size", which counts nodes)
WRAP_MIN = 80  # terminals wrap at their width: a shorter line was not cut by a wrap
APP_NEEDLES = (
    b"orld_size",
    b"WORLD_SIZE",
    b"ncclCommInitRank",
    b"init_process_group",
    b"SeqNum=",
    b"last completed",
)
# ProcessGroupNCCL.cpp's watchdog: "[Rank 3] Watchdog caught collective operation timeout:
# WorkNCCL(SeqNum=12, …" (it waited on 12, so 11 completed) and "… last enqueued work: 2635, last
# completed work: 2634" (docs/nccl-log-formats.md#pytorch); the rank from c10d's "[Rank N]" /
# "[PG ID 0 PG GUID 0 Rank N]" or torchrun's "[rankN]:"
SEQ_TIMEOUT = re.compile(r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+)")
SEQ_COMPLETED = re.compile(r"last completed (?:NCCL )?work: (-?\d+)")
SEQ_RANK = re.compile(r"\[(?:PG ID \S+ PG GUID \S+ )?Rank (\d+)\]|\[rank(\d+)\]:")
WORLD_SIZE = re.compile(r"(?<![\w])(?:WORLD_SIZE|world_size|global_world_sizes)\s*[=:]\s*\[?(\d+)")
POOL_MIN_BYTES = 32 << 20  # below this, starting worker processes costs more than it saves


@dataclass
class LogSet:
    """What all inputs said: processes by ``host:pid`` plus line accounting."""

    processes: dict[str, ProcessLog] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    lines: int = 0
    nccl_lines: int = 0
    coll_lines: int = 0
    call_lines: int = 0  # NCCL_DEBUG_SUBSYS=CALL trace, counted only
    other_lines: int = 0  # not NCCL debug output (the app, PyTorch, the launcher)
    unknown_lines: int = 0  # NCCL lines of no known kind
    garbled_lines: int = 0  # say NCCL but have no parsable envelope
    truncated_lines: int = 0
    unknown_samples: list[str] = field(default_factory=list)
    read_errors: list[str] = field(default_factory=list)
    bare_versions: list[str] = field(default_factory=list)  # "NCCL version …" without a prefix
    world_sizes: dict[int, int] = field(default_factory=dict)  # PyTorch's world size -> lines
    init_failures: int = 0  # lines of PyTorch saying init_process_group/ncclCommInitRank failed
    completed_seq: dict[int, int] = field(default_factory=dict)  # rank -> last completed SeqNum
    signatures: dict[str, SignatureHit] = field(default_factory=dict)

    def merge(self, other: LogSet) -> None:
        for key, proc in other.processes.items():
            mine = self.processes.get(key)
            if mine is None:
                self.processes[key] = proc
            else:
                _merge_into(mine, proc)
        self.sources.extend(other.sources)
        for name in (
            "lines",
            "nccl_lines",
            "coll_lines",
            "call_lines",
            "other_lines",
            "unknown_lines",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.garbled_lines += other.garbled_lines
        self.truncated_lines += other.truncated_lines
        self.unknown_samples.extend(
            other.unknown_samples[: MAX_SAMPLES - len(self.unknown_samples)]
        )
        self.read_errors.extend(other.read_errors)
        self.bare_versions.extend(v for v in other.bare_versions if v not in self.bare_versions)
        for size, n in other.world_sizes.items():
            self.world_sizes[size] = self.world_sizes.get(size, 0) + n
        self.init_failures += other.init_failures
        for rank, seq in other.completed_seq.items():
            self.completed_seq[rank] = max(seq, self.completed_seq.get(rank, seq))
        merge_hits(self.signatures, other.signatures)


def _merge_into(mine: object, other: object) -> None:
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
        elif isinstance(a, set):
            a.update(b)
        elif isinstance(a, dict):
            for k, v in b.items():
                if k not in a:
                    a[k] = v
                elif f.name == "comms":
                    _merge_into(a[k], v)
        elif a is None or a == "" or (hasattr(a, "rows") and not a.rows):
            setattr(mine, f.name, b)


class SourceParser:
    """Parses one source; feed it blocks of whole lines, call ``finish``, read ``result``.

    A block made only of collective lines of known communicators and ``NCCL CALL`` lines is
    recognised by counting (``bytes.count`` in C: newlines, each communicator's needle, CALL
    lines) and costs no Python per line: only the last line of each communicator in it is
    parsed. Any other block is split into lines and its other lines are parsed one by one.
    """

    def __init__(self, name: str, identify: Identify | None = None) -> None:
        self.result = LogSet(sources=[name])
        self._identify = identify
        self._last_key: str | None = None
        self._needles: dict[str, bytes] = {}  # comm pointer -> b" comm 0x… [nranks="
        self._last_coll: Block | None = None  # its tail holds the latest collectives
        self._calls = False  # whether this source has NCCL CALL lines at all
        self._memo: dict[bytes, tuple] = {}  # repeated line -> (key, kind, match, envelope, text)
        self._wrapped: str | None = None  # a long line no signature matched: maybe wrapped

    def _process(self, key: str, host: str, pid: int) -> ProcessLog:
        proc = self.result.processes.get(key)
        if proc is None:
            proc = self.result.processes[key] = ProcessLog(key, host, pid, self.result.sources[:1])
        self._last_key = key
        return proc

    def _comm_needles(self) -> dict[str, bytes]:
        for proc in self.result.processes.values():
            for ptr in proc.comms:
                if ptr not in self._needles and ptr.startswith("0x"):
                    self._needles[ptr] = f" comm {ptr} [nranks=".encode()
        return self._needles

    def feed(self, data: bytes, start: int, end: int) -> None:
        """Take the whole lines ``data[start:end]``."""
        active = self._region(data, start, end)
        for ptr in active:  # each communicator's latest collective in this block
            at = data.rfind(self._needles[ptr], start, end)
            self.line(
                data[data.rfind(b"\n", start, at) + 1 : data.find(b"\n", at, end)], counted=True
            )
        if active:
            self._last_coll = (data, start, end)
        self._mark_last(data, start, end)

    def _region(self, data: bytes, start: int, end: int) -> set[str]:
        """Account for ``data[start:end]``; return the communicators with collectives in it.

        A region of nothing but known collectives and CALL lines is done by counting alone; a
        region with a few other lines is halved until the halves are small, and those (or a
        region with many other lines, at once) are parsed line by line.
        """
        result = self.result
        n_lines = data.count(b"\n", start, end)
        n_call = data.count(CALL_NEEDLE, start, end) if self._calls else 0  # once seen
        per_comm = {
            ptr: n
            for ptr, needle in self._comm_needles().items()
            if (n := data.count(needle, start, end))
        }
        n_known = sum(per_comm.values())
        if n_known + n_call == n_lines:
            result.lines += n_lines
            result.nccl_lines += n_lines
            result.coll_lines += n_known
            result.call_lines += n_call
            return set(per_comm)
        others = n_lines - n_known - n_call
        if not per_comm and end - start > SPLIT_BYTES:
            # No communicator met yet (a file's first block): parse up to its first collective,
            # which introduces the communicator, and count the rest with its needle.
            at = data.find(COLL_NEEDLE, start, end)
            cut = data.find(b"\n", at, end) + 1 if at >= 0 else -1
            if start < cut < end:
                return self._region(data, start, cut) | self._region(data, cut, end)
        if end - start > SPLIT_BYTES and others * SPARSE < n_lines:  # a few: find them by halving
            mid = data.find(b"\n", (start + end) // 2, end) + 1
            if start < mid < end:
                return self._region(data, start, mid) | self._region(data, mid, end)
        result.lines += n_lines
        text = data[start:end]
        if not self._calls and text.find(CALL_NEEDLE) >= 0:
            self._calls = True  # NCCL_DEBUG_SUBSYS has CALL: count those lines from now on
            n_call = text.count(CALL_NEEDLE)
        n_coll = self._lines(text, n_call)
        if n_coll > n_known:  # collectives of communicators we have not met: meet them
            self._tail(data, start, end)
        return {
            ptr
            for ptr, needle in self._comm_needles().items()
            if data.find(needle, start, end) >= 0
        }

    def _lines(self, text: bytes, n_call: int) -> int:
        """Parse every line but collective and CALL lines; return how many collectives it held."""
        lines = text.split(b"\n")
        lines.pop()  # regions end with a newline
        # find(), not ``in``: CPython's bytes ``in`` first tries the needle as an int and formats
        # a TypeError for every line before it searches (bytes_methods.c, _Py_bytes_contains)
        rest = [line for line in lines if line.find(COLL_NEEDLE) < 0 and line.find(CALL_NEEDLE) < 0]
        n_coll = len(lines) - len(rest) - n_call
        result = self.result
        result.coll_lines += n_coll
        result.call_lines += n_call
        result.nccl_lines += n_coll + n_call
        memo = self._memo
        app = [line for line in rest if line.find(b"NCCL") < 0]
        if len(app) > 16 and self._quiet(app):  # the application's own lines, done in bulk
            rest = [line for line in rest if line.find(b"NCCL") >= 0]
        for raw in rest:
            hit = memo.get(raw)
            if hit is not None:
                key, kind, m, env, line = hit
                proc = result.processes[key]
                kind.fold(proc, m, env)
                proc.last_line = line
                result.nccl_lines += 1
            elif raw:
                self.line(raw)
        return n_coll

    def _quiet(self, app: list[bytes]) -> bool:
        """Account for lines that are not NCCL's at once when nothing in them is worth a look
        (no signature's gate, no world size, no word of init failing); else False."""
        chunk = b"".join(app)  # no separator: text a terminal wrapped over two lines stays whole
        if any(chunk.find(needle) >= 0 for needle in APP_NEEDLES):
            return False
        if self._identify and may_match(self._identify, clean(chunk.decode("utf-8", "replace"))):
            return False
        self.result.other_lines += len(app) - app.count(b"")
        return True

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
                text = raw.decode("utf-8", "replace").rstrip("\r")
                env = parse_line(text)
                if env is not None:
                    self._process(env.head.key, env.head.host, env.head.pid).last_line = text
                return
            if first <= start:
                return
            stop = first - 1

    def _bare_version(self, text: str) -> None:
        result = self.result
        found = match_kind(text[text.find("NCCL version ") :])
        proc = result.processes.get(self._last_key or "")
        if found is not None and proc is not None and proc.nccl_version is None:
            kind, m = found
            kind.fold(proc, m, None)  # type: ignore[arg-type]
        if found is not None and len(result.bare_versions) < 8:
            text = text.strip()
            if text not in result.bare_versions:
                result.bare_versions.append(text)

    def _other(self, text: str) -> None:
        """A line that is not NCCL's: PyTorch's world size, or its word that init failed."""
        result = self.result
        if "orld_size" in text or "WORLD_SIZE" in text:
            m = WORLD_SIZE.search(text)
            if m:
                size = int(m[1])
                result.world_sizes[size] = result.world_sizes.get(size, 0) + 1
        if "SeqNum=" in text or "last completed" in text:
            self._seq(text)
        if ("ncclCommInitRank" in text or "init_process_group" in text) and (
            "rror" in text or "ailed" in text
        ):
            result.init_failures += 1

    def _seq(self, text: str) -> None:
        """Remember the last collective PyTorch's watchdog says this rank completed."""
        rank = SEQ_RANK.search(text)
        done = SEQ_COMPLETED.search(text)
        seq = int(done[1]) if done else None
        if seq is None and (timeout := SEQ_TIMEOUT.search(text)):
            seq = int(timeout[1]) - 1  # it timed out waiting on SeqNum: the one before completed
        if rank is None or seq is None:
            return
        r = int(rank[1] or rank[2])
        seqs = self.result.completed_seq
        if r in seqs or len(seqs) < 4096:
            seqs[r] = max(seq, seqs.get(r, seq))

    def line(self, raw: bytes, counted: bool = False) -> None:
        """Parse one line (``counted``: already in the line accounting)."""
        result = self.result
        text = clean(raw.decode("utf-8", "replace").rstrip("\r"))
        env = parse_line(text)
        if env is None:
            if "NCCL version " in text:
                # ≤2.21 rank 0 printf()s it bare (init.cc): it belongs to the process before it
                self._bare_version(text)
            elif counted or " NCCL " in text:
                result.garbled_lines += 1
            elif text.strip():
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
        proc.last_line = text
        if env.level in ("WARN", "ATTN"):
            proc.add_warn(Warn(head.file, head.line, head.func, env.msg, text, level=env.level))
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
    reader = BlockReader(name, block, max_line)
    parser = SourceParser(name, identify)
    for data, start, end in reader:
        parser.feed(data, start, end)
    parser.finish()
    result = parser.result
    result.truncated_lines = reader.truncated
    if reader.read_error:
        result.read_errors.append(f"{name}: {reader.read_error}")
    if len(result.processes) == 1:  # one rank's file: every line in it is that rank's
        only = next(iter(result.processes.values()))
        only.lines = result.lines
        for hit in result.signatures.values():
            hit.lines = [(text, line, key or only.key) for text, line, key in hit.lines]
    return result


def parse_sources(
    sources: Iterable[Source],
    jobs: int | None = None,
    progress: Callable[[str], None] | None = None,
    identify: Identify | None = None,
) -> LogSet:
    """Parse every source, spreading files over ``jobs`` processes when that pays off.
    ``identify`` must be picklable by reference (a module-level function) for the pool."""
    sources = list(sources)
    merged = LogSet()
    jobs = jobs or os.cpu_count() or 1
    files = [s for s in sources if s.name != "-"]
    pooled = jobs > 1 and len(files) > 1 and sum(s.size for s in files) >= POOL_MIN_BYTES
    if pooled:
        import multiprocessing  # only runs that spread over processes pay for these imports
        from concurrent.futures import ProcessPoolExecutor

        names = [s.name for s in sorted(files, key=lambda s: -s.size)]  # big first: even finish
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=min(jobs, len(files)), mp_context=ctx) as pool:
            parse = functools.partial(parse_source, identify=identify)
            for name, result in zip(names, pool.map(parse, names), strict=True):
                merged.merge(result)
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
