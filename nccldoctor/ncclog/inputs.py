"""Where log text comes from: files, folders (recursively), globs, ``.gz`` files and ``-`` (stdin).

Text is read in blocks that end on a line boundary, so the parser can split a block in C and
never holds more than one block per source. A line longer than ``max_line`` is cut to that
length (and counted), so a runaway line without newlines cannot exhaust memory.
"""

from __future__ import annotations

import glob
import gzip
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

BLOCK_BYTES = 1 << 20
MAX_LINE = 64 * 1024
STDIN = "-"


class InputError(Exception):
    """A named input does not exist or cannot be read (a usage error)."""


@dataclass(frozen=True)
class Source:
    name: str  # the path as the user will recognise it, or "-"
    size: int  # bytes on disk (compressed size for .gz); 0 for stdin


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
        return gzip.open(name, "rb")  # type: ignore[return-value]
    return open(name, "rb")


class BlockReader:
    """Iterate over blocks of whole lines; ``truncated`` counts lines cut to ``max_line``."""

    def __init__(self, name: str, block: int = BLOCK_BYTES, max_line: int = MAX_LINE) -> None:
        self.name = name
        self.block = block
        self.max_line = max_line
        self.truncated = 0
        self.read_error: str | None = None

    def __iter__(self) -> Iterator[bytes]:
        try:
            stream = _open(self.name)
        except OSError as exc:
            self.read_error = f"{type(exc).__name__}: {exc}"
            return
        carry = b""
        skipping = False  # inside the unread tail of an over-long line
        try:
            while True:
                try:
                    data = stream.read(self.block)
                except (OSError, EOFError, gzip.BadGzipFile) as exc:
                    self.read_error = f"{type(exc).__name__}: {exc}"
                    data = b""
                if not data:
                    break
                if skipping:
                    nl = data.find(b"\n")
                    if nl < 0:
                        continue
                    data = data[nl:]  # keep the newline: it ends the cut line already emitted
                    skipping = False
                buf = carry + data if carry else data
                end = buf.rfind(b"\n")
                if end < 0:
                    carry = buf
                else:
                    carry = buf[end + 1 :]
                    yield self._cap(buf[: end + 1])
                if len(carry) > self.max_line:
                    self.truncated += 1
                    yield carry[: self.max_line] + b"\n"
                    carry = b""
                    skipping = True
            if carry:
                yield self._cap(carry + b"\n")
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()

    def _cap(self, block: bytes) -> bytes:
        """Cut every line of ``block`` longer than ``max_line`` (rare: checked in C first)."""
        if len(block) <= self.max_line or not _has_long_line(block, self.max_line):
            return block
        lines = block.split(b"\n")
        out = []
        for line in lines:
            if len(line) > self.max_line:
                self.truncated += 1
                line = line[: self.max_line]
            out.append(line)
        return b"\n".join(out)


def _has_long_line(block: bytes, limit: int) -> bool:
    """True when ``block`` may hold a line over ``limit``: a line that long covers a whole
    aligned window of ``limit // 2`` bytes without a newline, so a few C-level finds decide."""
    step = max(1, limit // 2)
    return any(
        block.find(b"\n", start, start + step) < 0
        for start in range(0, len(block) - step + 1, step)
    )
