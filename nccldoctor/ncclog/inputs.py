"""Where log text comes from: files, folders (recursively), globs, ``.gz`` files and ``-`` (stdin).

Text is read in blocks that end on a line boundary, so the parser can split a block in C and
never holds more than one block per source. A line longer than ``max_line`` is cut to that
length (and counted), so a runaway line without newlines cannot exhaust memory.
"""

from __future__ import annotations

import fnmatch
import glob
import gzip
import io
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import BinaryIO

from nccldoctor.limits import MAX_MEMBER_BYTES

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
    return walk_inputs(args)[0]


Refused = list[tuple[str, str]]  # (path, why it is not read)
OUT_OF_TICKET = "a symlink out of the ticket: not followed"


def not_a_file(mode: int) -> str | None:
    """Why an entry of this ``st_mode`` is not read (None: a file or a folder): a link may lead
    anywhere, a FIFO blocks its reader until someone writes to it, a device never ends."""
    for test, why in (
        (stat.S_ISLNK, "a symlink: not followed"),
        (stat.S_ISFIFO, "a FIFO: not read"),
        (stat.S_ISCHR, "a device: not read"),
        (stat.S_ISBLK, "a device: not read"),
        (stat.S_ISSOCK, "a socket: not read"),
    ):
        if test(mode):
            return why
    return None


def walk_inputs(args: list[str]) -> tuple[list[Source], Refused]:
    """The sources the arguments name, and what their folders and globs hold that is not read.

    A folder or glob is walked without leaving it (the folder, or the glob's part before its
    first wildcard): a stranger's ticket may hold a link to /etc/shadow or ~, read only when the
    user names it. A link inside to inside is read; each real folder is walked once per pattern,
    so links that loop end (glob's own ``**`` followed them: a few loops took forever)."""
    sources: list[Source] = []
    refused: Refused = []
    missing: list[str] = []
    for arg in args:
        if arg == STDIN:
            sources.append(Source(STDIN, 0))
            continue
        path = Path(arg)
        if path.is_dir():
            files = _walk(arg, ("**",), refused, hidden_folders=True)
        elif path.is_file():
            files = [arg]
        elif glob.has_magic(arg):
            parts = path.parts
            fixed = next(i for i, part in enumerate(parts) if glob.has_magic(part))
            before = len(refused)
            files = _walk(os.path.join(*parts[:fixed]) if fixed else "", parts[fixed:], refused)
            if not files and len(refused) == before:
                missing.append(arg)
        else:
            missing.append(arg)
            continue
        sources.extend(file_sources(Path(f) for f in files))
    if missing:
        raise InputError(f"no such file: {', '.join(missing)}")
    return _once(sources), refused


def _once(sources: list[Source]) -> list[Source]:
    """Each file once, in the order first named, by its own name rather than a link's."""
    kept: dict[str, Source] = {}
    for source in sources:
        real = source.name if source.name == STDIN else os.path.realpath(source.name)
        known = kept.get(real)
        if known is None or (_own(source.name, real) and not _own(known.name, real)):
            kept[real] = source
    return list(kept.values())


def _own(name: str, real: str) -> bool:
    return name == STDIN or os.path.abspath(name) == real


def _walk(
    top: str, pattern: tuple[str, ...], refused: Refused, hidden_folders: bool = False
) -> list[str]:
    """The files under ``top`` ("": here) whose path from it matches ``pattern`` (glob's
    components, ``**`` for any folders), sorted; what matches but is not read goes to
    ``refused``. Hidden names match only a pattern that names them, as in glob; a folder's
    walk (``hidden_folders``) enters hidden folders, as it always did."""
    files: list[str] = []
    root = os.path.realpath(top or ".")
    seen: set[tuple[str, tuple[str, ...]]] = set()

    def visit(folder: str, pattern: tuple[str, ...]) -> None:
        key = (os.path.realpath(folder or "."), pattern)
        if key in seen:
            return
        seen.add(key)
        try:
            with os.scandir(folder or ".") as listing:
                names = sorted(entry.name for entry in listing)
        except OSError as exc:
            refused.append((folder, f"unreadable: {exc.strerror or exc}"))
            return
        head, rest = pattern[0], pattern[1:]
        if head == "**" and rest:  # no folder at all
            visit(folder, rest)
        for name in names:
            hidden = name.startswith(".")
            if head == "**":
                as_file, as_folder = not rest and not hidden, hidden_folders or not hidden
            else:
                fits = fnmatch.fnmatchcase(name, head) and (not hidden or head.startswith("."))
                as_file, as_folder = fits and not rest, fits and bool(rest)
            if as_file or as_folder:
                path = os.path.join(folder, name)
                mode = _mode(path, root, refused, as_file)
                if mode is None:
                    continue
                if stat.S_ISDIR(mode) and as_folder:
                    visit(path, pattern if head == "**" else rest)
                elif stat.S_ISREG(mode) and as_file:
                    files.append(path)
                elif as_file and not stat.S_ISDIR(mode):
                    refused.append((path, not_a_file(mode) or "not a file: not read"))

    visit(top, pattern)
    return sorted(files)


def _mode(path: str, root: str, refused: Refused, say_unreadable: bool) -> int | None:
    """The ``st_mode`` of ``path``, through a link that stays under ``root``; None when it is
    not read: a link out of the ticket always said in ``refused``, an unreadable entry where
    ``say_unreadable`` (it matched as a file)."""
    try:
        mode = os.lstat(path).st_mode
        if not stat.S_ISLNK(mode):
            return mode
        if os.path.commonpath([os.path.realpath(path), root]) != root:
            refused.append((path, OUT_OF_TICKET))
            return None
        return os.stat(path).st_mode
    except OSError as exc:
        if say_unreadable:
            refused.append((path, f"unreadable: {exc.strerror or exc}"))
        return None


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
# The lines of a plain file that start at a byte offset in [first, stop) (stop None: its end).
# Stretches that tile a file read every line once, wherever they cut it: a file is parsed by
# several processes at once that way.
Stretch = tuple[int, int | None]


STRETCH_MIN = 16 << 20  # a smaller stretch costs its process more in set-up than it saves
CUT_WINDOW = 1 << 20  # how far past its place a cut looks for a line to fall before


def stretches(source: Source, size: int, before: bytes) -> list[Stretch]:
    """A plain file cut into stretches of about ``size`` bytes (at least ``STRETCH_MIN``), each
    cut just before a line holding ``before``; a small, compressed (read from its start only) or
    unreadable file whole. The last stretch runs to the end, wherever that is when it is read."""
    size = max(size, STRETCH_MIN)
    if source.name == STDIN or source.size < 2 * size:
        return [(0, None)]
    try:
        with open(source.name, "rb") as probe:
            if probe.read(2) == b"\x1f\x8b":
                return [(0, None)]
            n = round(source.size / size)
            found = (cut_before(probe, source.size * i // n, before) for i in range(1, n))
            cuts = [0, *sorted({c for c in found if c is not None})]
    except OSError:
        return [(0, None)]  # its reader says why
    return [*pairwise(cuts), (cuts[-1], None)]


def cut_before(stream: BinaryIO, at: int, before: bytes) -> int | None:
    """Where the first line after offset ``at`` starts that holds ``before``, or that follows a
    line without ``NCCL`` and holds none itself (None: no such line within ``CUT_WINDOW``). The
    parser cuts between collective lines, or between the application's lines, that way: where
    no process is in the middle of an init, whose lines a stretch could not place."""
    stream.seek(at)
    cut, *lines = stream.read(CUT_WINDOW).split(b"\n")
    offset = at + len(cut) + 1  # where lines[0] starts, the first whole line
    for prev, line in pairwise(lines[:-1]):  # the last one may be cut by the window
        offset += len(prev) + 1
        if before in line or (b"NCCL" not in prev and b"NCCL" not in line):
            return offset
    return None


class BlockReader:
    """Iterate over blocks of whole lines without copying them out of the read buffer.

    ``truncated`` counts lines cut to ``max_line``; ``read_error`` says why reading stopped early.
    """

    def __init__(
        self,
        name: str,
        block: int = BLOCK_BYTES,
        max_line: int = MAX_LINE,
        stretch: Stretch = (0, None),
    ) -> None:
        self.name = name
        self.block = block
        self.max_line = max_line
        self.first, self.stop = stretch
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
        at = 0  # where the next read starts in the file
        if self.first:  # the line cut at ``first`` is the stretch's before: skip to its end
            stream.seek(self.first - 1)
            at, skipping = self.first - 1, True
        rewind = isinstance(stream, io.FileIO) and stream.seekable()  # a plain file's
        # a .gz's unpacked bytes: a 12 MB gzip can unpack to 12 GB and take minutes to parse
        cap = MAX_MEMBER_BYTES if isinstance(stream, gzip.GzipFile) else None
        try:
            while True:
                if cap is not None and at >= cap:
                    self.read_error = f"unpacks to over {cap >> 30} GiB: read up to there"
                    break
                try:
                    data = stream.read(self.block)
                except (OSError, EOFError, gzip.BadGzipFile) as exc:
                    self.read_error = f"{type(exc).__name__}: {exc}"
                    data = b""
                if not data:
                    break
                base, at, start = at, at + len(data), 0  # base: where data[0] is in the file
                if skipping:
                    nl = data.find(b"\n")
                    if nl < 0:
                        continue
                    start, skipping = nl + 1, False
                if carry:  # one block per read: the line cut by the last read leads it
                    data, base, start, carry = (
                        carry + data[start:],
                        base + start - len(carry),
                        0,
                        b"",
                    )
                if self.stop is not None:
                    if base + start >= self.stop:
                        return  # the lines from here on start in the next stretch
                    if at >= self.stop:  # the last line starting before ``stop`` ends the stretch
                        nl = data.find(b"\n", max(start, self.stop - 1 - base))
                        if nl >= 0:
                            yield self._capped(data, start, nl + 1)
                            return
                end = data.rfind(b"\n", start) + 1
                if end > start:
                    yield self._capped(data, start, end)
                if rewind and start < end < len(data):  # the next read starts at the cut line:
                    stream.seek(end - len(data), os.SEEK_CUR)  # it is read whole, not copied
                    at -= len(data) - end
                    continue
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
