"""The streaming parser: blocks of lines in, per-process records out, in one pass.

Hot path. A block is split into lines in C; collective-trace lines (``… opCount …``, most of a
``NCCL_DEBUG_SUBSYS=COLL`` log) are filtered out by a list comprehension, and of those only the
last ones per block (and the last one of every known communicator, found with ``rfind``) are
parsed: a rank's collective history is summarised by its latest operations, which is what the
cross-rank analysis compares. Every other line is decoded, split into its envelope and folded
through the kinds table. Memory per source is one block plus bounded records.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, fields

from nccldoctor.ncclog.envelope import parse_line
from nccldoctor.ncclog.inputs import BlockReader, Source
from nccldoctor.ncclog.kinds import fold_line
from nccldoctor.ncclog.records import MAX_SAMPLES, ProcessLog, Warn
from nccldoctor.ncclog.signals import SignatureHit, merge_hits, record

COLL_NEEDLE = b": opCount "
TAIL_OPS = 64  # collective lines parsed at the end of each block
POOL_MIN_BYTES = 32 << 20  # below this, starting worker processes costs more than it saves


@dataclass
class LogSet:
    """What all inputs said: processes by ``host:pid`` plus line accounting."""

    processes: dict[str, ProcessLog] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    lines: int = 0
    nccl_lines: int = 0
    coll_lines: int = 0
    other_lines: int = 0  # not NCCL debug output (the app, PyTorch, the launcher)
    unknown_lines: int = 0  # NCCL lines of no known kind
    garbled_lines: int = 0  # say NCCL but have no parsable envelope
    truncated_lines: int = 0
    unknown_samples: list[str] = field(default_factory=list)
    read_errors: list[str] = field(default_factory=list)
    bare_versions: list[str] = field(default_factory=list)  # "NCCL version …" without a prefix
    signatures: dict[str, SignatureHit] = field(default_factory=dict)

    def merge(self, other: LogSet) -> None:
        for key, proc in other.processes.items():
            mine = self.processes.get(key)
            if mine is None:
                self.processes[key] = proc
            else:
                _merge_into(mine, proc)
        self.sources.extend(other.sources)
        for name in ("lines", "nccl_lines", "coll_lines", "other_lines", "unknown_lines"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.garbled_lines += other.garbled_lines
        self.truncated_lines += other.truncated_lines
        self.unknown_samples.extend(
            other.unknown_samples[: MAX_SAMPLES - len(self.unknown_samples)]
        )
        self.read_errors.extend(other.read_errors)
        self.bare_versions.extend(v for v in other.bare_versions if v not in self.bare_versions)
        merge_hits(self.signatures, other.signatures)


def _merge_into(mine: object, other: object) -> None:
    """Fold a second record of the same process (e.g. stdout and NCCL_DEBUG_FILE) into the first."""
    for f in fields(mine):  # type: ignore[arg-type]
        a, b = getattr(mine, f.name), getattr(other, f.name)
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
    """Parses one source; feed it blocks, then read ``result``."""

    def __init__(self, name: str) -> None:
        self.result = LogSet(sources=[name])
        self._last_key: str | None = None

    def _process(self, key: str, host: str, pid: int) -> ProcessLog:
        proc = self.result.processes.get(key)
        if proc is None:
            proc = self.result.processes[key] = ProcessLog(key, host, pid, self.result.sources[:1])
        self._last_key = key
        return proc

    def feed(self, block: bytes) -> None:
        lines = block.split(b"\n")
        if lines and not lines[-1]:
            lines.pop()
        result = self.result
        result.lines += len(lines)
        rest = [line for line in lines if COLL_NEEDLE not in line]
        n_coll = len(lines) - len(rest)
        for raw in rest:
            if raw:
                self.line(raw)
        if n_coll:
            result.coll_lines += n_coll
            result.nccl_lines += n_coll
            self._collectives(lines, block)
        self._mark_last(lines)

    def _collectives(self, lines: list[bytes], block: bytes) -> None:
        tail: list[bytes] = []
        i = len(lines) - 1
        while i >= 0 and len(tail) < TAIL_OPS:
            if COLL_NEEDLE in lines[i]:
                tail.append(lines[i])
            i -= 1
        seen: set[str] = set()
        for raw in reversed(tail):
            seen.add(self.line(raw, counted=True) or "")
        # a communicator quiet in this block's tail may still have its last op earlier on
        for proc in list(self.result.processes.values()):
            for ptr in list(proc.comms):
                if ptr in seen or not ptr.startswith("0x"):
                    continue
                at = block.rfind(f" comm {ptr} [nranks=".encode())
                if at >= 0:
                    start = block.rfind(b"\n", 0, at) + 1
                    end = block.find(b"\n", at)
                    self.line(block[start : end if end >= 0 else len(block)], counted=True)

    def _mark_last(self, lines: list[bytes]) -> None:
        """The block's last NCCL line is the last line of its process so far."""
        for raw in lines[-1:-33:-1]:
            if b" NCCL " in raw:
                text = raw.decode("utf-8", "replace").rstrip("\r")
                env = parse_line(text)
                if env is not None:
                    self._process(env.head.key, env.head.host, env.head.pid).last_line = text
                return

    def line(self, raw: bytes, counted: bool = False) -> str | None:
        """Parse one line; return the comm pointer of a collective line (for the tail logic)."""
        result = self.result
        text = raw.decode("utf-8", "replace").rstrip("\r")
        env = parse_line(text)
        if env is None:
            if "NCCL version " in text and "+cuda" in text and "NCCL INFO" not in text:
                if len(result.bare_versions) < 8 and text.strip() not in result.bare_versions:
                    result.bare_versions.append(text.strip())
            elif " NCCL " in text or counted:
                result.garbled_lines += 1
            else:
                result.other_lines += 1
            if text.strip():
                record(result.signatures, text, self._last_key)
            return None
        if not counted:
            result.nccl_lines += 1
        head = env.head
        proc = self._process(head.key, head.host, head.pid)
        proc.last_line = text
        if env.level == "WARN":
            proc.add_warn(Warn(head.file, head.line, head.func, env.msg, text))
            record(result.signatures, env.msg, head.key)
            return None
        if env.level == "CALL":
            return None
        kind = fold_line(proc, env)
        if kind is None:
            result.unknown_lines += 1
            if len(result.unknown_samples) < MAX_SAMPLES:
                result.unknown_samples.append(text[:300])
        elif kind == "coll":
            comm = env.msg.rsplit(" comm ", 1)[-1]
            return comm.split(" ", 1)[0]
        return None


def parse_source(name: str) -> LogSet:
    """Parse one file (or ``-``); never raises on bad content."""
    reader = BlockReader(name)
    parser = SourceParser(name)
    for block in reader:
        parser.feed(block)
    result = parser.result
    result.truncated_lines = reader.truncated
    if reader.read_error:
        result.read_errors.append(f"{name}: {reader.read_error}")
    if len(result.processes) == 1:
        next(iter(result.processes.values())).lines = result.lines
    return result


def parse_sources(
    sources: Iterable[Source],
    jobs: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> LogSet:
    """Parse every source, spreading files over ``jobs`` processes when that pays off."""
    sources = list(sources)
    merged = LogSet()
    jobs = jobs or os.cpu_count() or 1
    files = [s for s in sources if s.name != "-"]
    pooled = jobs > 1 and len(files) > 1 and sum(s.size for s in files) >= POOL_MIN_BYTES
    if pooled:
        ctx = multiprocessing.get_context("fork")
        names = [s.name for s in sorted(files, key=lambda s: -s.size)]  # big first: even finish
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=min(jobs, len(files)), mp_context=ctx) as pool:
            for name, result in zip(names, pool.map(parse_source, names), strict=True):
                merged.merge(result)
                if progress:
                    progress(name)
    for s in sources:
        if pooled and s.name != "-":
            continue
        merged.merge(parse_source(s.name))
        if progress:
            progress(s.name)
    merged.sources = [s.name for s in sources]
    return merged
