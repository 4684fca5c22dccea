"""Where log text comes from: files, folders (recursively), globs, ``.gz`` files and ``-`` (stdin).

Text is read in blocks that end on a line boundary, so the parser can split a block in C and
never holds more than one block per source. A line longer than ``max_line`` is cut to that
length (and counted), so a runaway line without newlines cannot exhaust memory.
"""

from __future__ import annotations

import glob
import gzip
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

BLOCK_BYTES = 1 << 20  # the parser passes over a block several times: it stays in cache
MAX_LINE = 64 * 1024
STDIN = "-"


class InputError(Exception):
    """A named input does not exist or cannot be read (a usage error)."""


@dataclass(frozen=True)
class Source:
    name: str  # the path as the user will recognise it, or "-"
    size: int  # bytes on disk (compressed size for .gz); 0 for stdin


def file_sources(paths: Iterable[Path]) -> list[Source]:
    """Sources for the files among ``paths`` that still exist: a rank's log deleted while
    nccldoctor reads its folder is an absence, not a crash (one that vanishes later, between
    this and its parse, is a read error the summary counts)."""
    sources = []
    for path in paths:
        try:
            sources.append(Source(str(path), path.stat().st_size))
        except OSError:
            continue
    return sources


def expand_inputs(args: list[str]) -> list[Source]:
    """Turn command-line arguments into sources, in a stable order; raise InputError if missing."""
    sources: list[Source] = []
    missing: list[str] = []
    for arg in args:
        if arg == STDIN:
            sources.append(Source(STDIN, 0))
            continue
        path = Path(arg)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
        elif path.is_file():
            files = [path]
        elif glob.has_magic(arg):
            files = sorted(Path(p) for p in glob.glob(arg, recursive=True) if Path(p).is_file())
            if not files:
                missing.append(arg)
        else:
            missing.append(arg)
            continue
        sources.extend(Source(str(p), p.stat().st_size) for p in files)
    if missing:
        raise InputError(f"no such file: {', '.join(missing)}")
    seen: set[str] = set()
    return [s for s in sources if not (s.name in seen or seen.add(s.name))]


def _open(name: str) -> BinaryIO:
    if name == STDIN:
        return sys.stdin.buffer
    with open(name, "rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        stream = gzip.open(name, "rb")  # noqa: SIM115 - returned open, closed by the reader
        try:
            stream.peek(1)  # a plain file may start with the magic bytes: read it as it is
            return stream  # type: ignore[return-value]
        except (OSError, EOFError):
            stream.close()
    return open(name, "rb", buffering=0)  # whole-block reads: no second copy through a buffer


Block = tuple[bytes, int, int]  # data[start:end] is whole lines, each ending in a newline


class BlockReader:
    """Iterate over blocks of whole lines without copying them out of the read buffer.

    ``truncated`` counts lines cut to ``max_line``; ``read_error`` says why reading stopped early.
    """

    def __init__(self, name: str, block: int = BLOCK_BYTES, max_line: int = MAX_LINE) -> None:
        self.name = name
        self.block = block
        self.max_line = max_line
        self.truncated = 0
        self.read_error: str | None = None

    def __iter__(self) -> Iterator[Block]:
        try:
            stream = _open(self.name)
        except OSError as exc:
            self.read_error = f"{type(exc).__name__}: {exc}"
            return
        carry = b""  # the start of a line the next read completes
        skipping = False  # inside the unread rest of an over-long line
        try:
            while True:
                try:
                    data = stream.read(self.block)
                except (OSError, EOFError, gzip.BadGzipFile) as exc:
                    self.read_error = f"{type(exc).__name__}: {exc}"
                    data = b""
                if not data:
                    break
                start = 0
                if skipping:
                    nl = data.find(b"\n")
                    if nl < 0:
                        continue
                    start, skipping = nl + 1, False
                if carry:  # one block per read: the line cut by the last read leads it
                    data, start, carry = carry + data[start:], 0, b""
                end = data.rfind(b"\n", start) + 1
                if end > start:
                    yield self._capped(data, start, end)
                carry = data[max(start, end) :]
                if len(carry) > self.max_line:
                    self.truncated += 1
                    yield carry[: self.max_line] + b"\n", 0, self.max_line + 1
                    carry, skipping = b"", True
            if carry:
                yield self._capped(carry + b"\n", 0, len(carry) + 1)
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()

    def _capped(self, data: bytes, start: int, end: int) -> Block:
        """Cut every line longer than ``max_line`` (rare: ruled out in C first)."""
        if end - start <= self.max_line or not _has_long_line(data, start, end, self.max_line):
            return data, start, end
        lines = data[start:end].split(b"\n")
        for i, line in enumerate(lines):
            if len(line) > self.max_line:
                self.truncated += 1
                lines[i] = line[: self.max_line]
        text = b"\n".join(lines)
        return text, 0, len(text)


def _has_long_line(data: bytes, start: int, end: int, limit: int) -> bool:
    """True when ``data[start:end]`` may hold a line over ``limit``: such a line covers a whole
    aligned window of ``limit // 2`` bytes without a newline, so a few C-level finds decide."""
    step = max(1, limit // 2)
    return any(data.find(b"\n", at, at + step) < 0 for at in range(start, end - step + 1, step))
