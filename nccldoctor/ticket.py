"""A ticket's attachments as they come: files, folders, ``.tar``/``.tar.gz``/``.zip``, sorted by kind.

Each file is sniffed by its first bytes against ``KINDS``, one row per kind (its section in the
report and how it is recognised); a file may be of two kinds (an nccl-tests output with NCCL INFO
lines between its rows is a log too). Archives are unpacked into a working folder under caps on
the members and on the decompressed bytes (a zip bomb is read in part, and said so), never
following links or leaving the folder. Nothing here parses a kind: that is each kind's reader.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import re
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO

from nccldoctor.forensics.dumphead import looks_like_dump
from nccldoctor.limits import (
    HEAD_BYTES,
    MAX_MEMBER_BYTES,
    MAX_MEMBERS,
    MAX_SKIPPED_NAMED,
    MAX_TICKET_BYTES,
)
from nccldoctor.ncclog.inputs import STDIN, InputError, not_a_file, walk_inputs
from nccldoctor.units import format_bytes

MAX_DEPTH = 2  # an archive inside an archive is unpacked; one deeper is not
# What tarfile reads through, by its first bytes: a tar is told by its first header, unpacked
# from the file's head by the decompressor its magic names (never the whole file: tarfile's own
# probe of a file of NUL bytes ran it through the xz decoder, 0.25 s a MB)
_DECOMPRESSORS: dict[bytes, Callable[[], bz2.BZ2Decompressor | lzma.LZMADecompressor]] = {
    b"BZh": bz2.BZ2Decompressor,
    b"\xfd7zXZ\x00": lzma.LZMADecompressor,
}
_TAR_BLOCK = 512
_TAR_MODES = {tarfile.SYMTYPE: stat.S_IFLNK, tarfile.FIFOTYPE: stat.S_IFIFO,
              tarfile.CHRTYPE: stat.S_IFCHR, tarfile.BLKTYPE: stat.S_IFBLK}  # fmt: skip


def _text(head: bytes) -> str:
    return head.decode("utf-8", "replace")


def _json_with(*keys: str) -> Callable[[bytes], bool]:
    quoted = [f'"{k}"'.encode() for k in keys]
    return lambda head: head.lstrip()[:1] == b"{" and all(k in head for k in quoted)


# nccl-tests' own lines, also as pasted: the footer and header without their '#', and rows alone
# (size, count, then a type name of nccldoctor/ncctests/table.py's _TYPES)
_NCCL_TESTS_TEXT = re.compile(
    r"nThreads?:? \d+ nGpus|Out of bounds values *:|Avg bus bandwidth *:|# Collective test starting"
    r"|: Test (?:NCCL|CUDA) failure |\bsize\s+count\s+type\s"
    r"|\d[ \t]+\d+[ \t]+(?:u?int(?:8|32|64)|half|float|double|bfloat16|f8e[45]m[23])[ \t]+\S+[ \t]+-?\d"
)
_NCCL_LINE = re.compile(r" NCCL (?:INFO|WARN) |^NCCL version |ProcessGroupNCCL", re.M)
# The kinds that are also a log when NCCL's lines run through them; ncclras itself prints
# "NCCL version", so only INFO and WARN lines make RAS text a log
_ALSO_A_LOG = {"nccl_tests": _NCCL_LINE, "ras": re.compile(r" NCCL (?:INFO|WARN) ")}
# ncclras's headings (src/ras/client_support.cc), and NCCL 2.31+'s diagnostics lines
# ("host:pid NCCL DIAG ...", src/include/diagnostics_log.h) in ncclras -D output or a job's stdout
_RAS_TEXT = re.compile(r"^Job summary\r?\n=+|^Communicators\.\.\.|(?::\d+ |^)NCCL DIAG ", re.M)
# sre tries a multiline ^ at every position (~2 ms per 64 KiB head): the words first, in C
_RAS_WORDS = ("Job summary", "Communicators...", "NCCL DIAG ")


def _ras_text(head: bytes) -> bool:
    text = _text(head)
    return any(word in text for word in _RAS_WORDS) and bool(_RAS_TEXT.search(text))


def _is_binary(head: bytes) -> bool:
    return b"\x00" in head


@dataclass(frozen=True)
class Kind:
    name: str  # the report's section
    title: str
    detect: Callable[[bytes], bool]


# In order: the first row that recognises a file decides, except that nccl-tests and RAS text
# (a job's stdout with its diagnostics report) are also a log when NCCL's own lines run
# through it. Flight Recorder dumps, pickle or JSON, as their reader recognises them
# (forensics/dumphead.py).
KINDS: tuple[Kind, ...] = (
    Kind("flight_recorder", "Flight Recorder dumps", looks_like_dump),
    Kind("reports", "nccldoctor reports", _json_with("schema_version", "findings", "tool_version")),
    Kind("nccl_tests", "nccl-tests outputs", lambda h: _json_with("results", "config")(h)
         or (not _is_binary(h) and bool(_NCCL_TESTS_TEXT.search(_text(h))))),
    Kind("ras", "NCCL RAS outputs", lambda h: _json_with("communicators", "nccl_version")(h)
         or (not _is_binary(h) and _ras_text(h))),
    Kind("logs", "NCCL logs", lambda h: not _is_binary(h) and h.lstrip()[:1] != b"{"),
)  # fmt: skip
KIND_NAMES = tuple(k.name for k in KINDS)


@dataclass
class Attachment:
    path: str  # where it can be read ("-" for stdin)
    name: str  # as the user knows it: "ticket.zip:rank0/log.txt"
    kinds: list[str]
    size: int


@dataclass
class Ticket:
    files: list[Attachment] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (name, why)
    more_skipped: int = 0  # not read past the MAX_SKIPPED_NAMED named in ``skipped``
    unpacked: dict[str, str] = field(default_factory=dict)  # an archive's working folder: its name

    def of_kind(self, kind: str) -> list[Attachment]:
        return [f for f in self.files if kind in f.kinds]

    def skip(self, name: str, why: str) -> None:
        """``name`` was not read, for ``why``: named up to MAX_SKIPPED_NAMED, then counted."""
        if len(self.skipped) < MAX_SKIPPED_NAMED:
            self.skipped.append((name, why))
        else:
            self.more_skipped += 1

    def namer(self) -> Callable[[str], str]:
        """What turns a text's paths of unpacked members into their names, ``archive:member``:
        the readers open the working folder's files, the user knows the ticket's."""
        if not self.unpacked:
            return str
        bases = sorted(self.unpacked, key=len, reverse=True)
        where = re.compile("|".join(re.escape(base + os.sep) for base in bases))
        return lambda text: where.sub(lambda m: self.unpacked[m.group()[:-1]] + ":", text)

    def summary(self) -> dict[str, object]:
        """What was found of each kind, for the report."""
        return {
            "kinds": {k: [f.name for f in self.of_kind(k)] for k in KIND_NAMES if self.of_kind(k)},
            "skipped": [{"name": n, "why": w} for n, w in self.skipped],
            "more_skipped": self.more_skipped,
        }


def read_head(path: str, limit: int = HEAD_BYTES) -> bytes:
    """The first ``limit`` bytes, through gzip when the file is compressed: of a cut or damaged
    gzip, what it gave before the damage (the log reader then says where it stopped)."""
    with open(path, "rb") as raw:
        head = raw.read(limit)
        if head[:2] != b"\x1f\x8b":
            return head
        raw.seek(0)
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip's; unlike gzip.open's read,
        text = b""  # it hands over what it inflated before a cut, and never raises for one
        while len(text) < limit and not inflate.eof and (packed := raw.read(HEAD_BYTES)):
            try:
                text += inflate.decompress(packed, limit - len(text))
            except zlib.error:
                break
    return text or head


def read_text(path: str, limit: int) -> tuple[str, bool]:
    """The text of a small kind (nccl-tests, RAS) up to ``limit`` bytes; True when cut there."""
    with open(path, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
    try:
        with gzip.open(path, "rb") if gz else open(path, "rb") as stream:
            data = stream.read(limit + 1)
    except (OSError, EOFError):
        with open(path, "rb") as stream:
            data = stream.read(limit + 1)
    return data[:limit].decode("utf-8", "replace"), len(data) > limit


def sort_attachment(path: str, name: str, size: int) -> Attachment | None:
    """The kinds of one file, or None when it is none of them."""
    if path == STDIN:
        return Attachment(path, name, ["logs"], size)
    head = read_head(path)
    first = next((k for k in KINDS if k.detect(head)), None)
    if first is None:
        return None
    kinds = [first.name]
    also_log = _ALSO_A_LOG.get(first.name)
    if also_log is not None and also_log.search(_text(head)):
        kinds.append("logs")
    return Attachment(path, name, kinds, size)


class _Budget:
    def __init__(self) -> None:
        self.bytes = MAX_TICKET_BYTES
        self.members = MAX_MEMBERS


def open_ticket(args: list[str], workdir: Path) -> Ticket:
    """Sort every file the arguments name; archives are unpacked under ``workdir``.

    Raises InputError (a usage error) for an argument that names nothing."""
    ticket = Ticket()
    budget = _Budget()
    sources, refused = walk_inputs(args)
    for source in sources:
        _add(ticket, source.name, source.name, source.size, workdir, budget, 0)
    for name, why in refused:  # links out of the ticket, FIFOs, devices in its folders
        ticket.skip(name, why)
    return ticket


def _add(
    ticket: Ticket, path: str, name: str, size: int, workdir: Path, budget: _Budget, depth: int
) -> None:
    try:
        archive = path != STDIN and (zipfile.is_zipfile(path) or _is_tar(path))
        if archive:
            if depth >= MAX_DEPTH:
                ticket.skip(name, "an archive nested too deep: not unpacked")
                return
            _unpack(ticket, path, name, workdir, budget, depth)
            return
        found = sort_attachment(path, name, size)
    except OSError as exc:
        ticket.skip(name, f"unreadable: {exc.strerror or exc}")
        return
    if found is None:
        ticket.skip(name, _not_a_kind(path))
    else:
        ticket.files.append(found)


def _not_a_kind(path: str) -> str:
    if not read_head(path).strip(b"\x00"):  # what a crash or a full disk leaves of a file
        return "only NUL bytes: nothing of it reached the disk"
    return "not a kind nccldoctor reads (binary)"


def _is_tar(path: str) -> bool:
    """A tar archive with at least one member, told by the first header in the file's head
    (through gzip, bzip2 or xz): a file of NUL bytes is no archive (its end marker is zeros,
    and ``is_tarfile`` took it for an empty one), and it would vanish from the ticket."""
    with open(path, "rb") as raw:
        head = raw.read(HEAD_BYTES)
    if head[:2] == b"\x1f\x8b":
        head = read_head(path, _TAR_BLOCK)
    else:
        magic = next((m for m in _DECOMPRESSORS if head.startswith(m)), None)
        if magic is not None:
            try:
                head = _DECOMPRESSORS[magic]().decompress(head, _TAR_BLOCK)
            except (OSError, EOFError, lzma.LZMAError):
                return False
    try:
        tarfile.TarInfo.frombuf(head[:_TAR_BLOCK], "utf-8", "surrogateescape")
    except tarfile.HeaderError:  # no header, a bad checksum, or the zeros that end an archive
        return False
    return True


def _safe_parts(member: str) -> list[str] | None:
    """The member's path inside the archive, or None when it would leave the folder."""
    parts = [p for p in PurePosixPath(member.replace("\\", "/")).parts if p not in ("", ".")]
    if not parts or parts[0] == "/" or ".." in parts:
        return None
    return parts


def _unpack(
    ticket: Ticket, path: str, name: str, workdir: Path, budget: _Budget, depth: int
) -> None:
    base = workdir / f"{len(list(workdir.iterdir())) if workdir.exists() else 0}-{Path(name).name}"
    ticket.unpacked[str(base)] = name
    damage = (OSError, EOFError, zipfile.BadZipFile, tarfile.TarError, NotImplementedError)
    try:
        members = _zip_members(path) if zipfile.is_zipfile(path) else _tar_members(path)
        for member, opener in members:
            # every member counts, folders and names refused too: each costs the archive's index
            if budget.members <= 0:
                ticket.skip(name, f"more than {MAX_MEMBERS:,} members: the rest not read")
                return
            budget.members -= 1
            if opener is None:  # a folder: its files are members of their own
                continue
            label = f"{name}:{member}"
            if isinstance(opener, str):
                ticket.skip(label, opener)
                continue
            parts = _safe_parts(member)
            if parts is None:
                ticket.skip(label, "a path outside the archive: not unpacked")
                continue
            target = base.joinpath(*parts)
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                dst = open(target, "wb")  # noqa: SIM115 - closed with the member below
            except OSError as exc:  # a name over 255 bytes, a file where a folder is: this one
                ticket.skip(label, f"cannot be unpacked: {exc.strerror or exc}")
                continue
            with opener() as src, dst:
                whole = _copy_capped(src, dst, budget)
            _add(ticket, str(target), label, target.stat().st_size, workdir, budget, depth + 1)
            if not budget.bytes:
                cap = format_bytes(MAX_TICKET_BYTES)
                ticket.skip(label, f"the ticket unpacks to over {cap}: the rest not read")
                return
            if not whole:
                ticket.skip(
                    label, f"unpacks to over {format_bytes(MAX_MEMBER_BYTES)}: read in part"
                )
    except (*damage, RuntimeError) as exc:
        # a cut or corrupt archive keeps what was unpacked before the damage
        ticket.skip(name, f"archive damaged: {type(exc).__name__}: {exc}")


# (name, how to open it: None for a folder, or why it is not read). Links, devices and FIFOs
# are never followed or made, and each is a row of what was not read.
Members = Iterator[tuple[str, Callable[[], IO[bytes]] | str | None]]


def _zip_members(path: str) -> Members:
    archive = zipfile.ZipFile(path)
    for info in archive.infolist():
        special = not_a_file(info.external_attr >> 16)  # the mode a Unix zip keeps, else 0
        if info.is_dir() or special:
            yield info.filename, None if info.is_dir() else special
        else:
            yield info.filename, lambda info=info: archive.open(info)


def _tar_members(path: str) -> Members:
    with tarfile.open(path) as archive:
        for info in archive:
            if info.isfile():
                yield info.name, lambda info=info: archive.extractfile(info)  # type: ignore[misc,return-value]
            elif info.isdir():
                yield info.name, None
            elif info.islnk():
                yield info.name, "a hard link: not followed"
            else:
                yield info.name, not_a_file(_TAR_MODES.get(info.type, 0)) or "not a file"


def _copy_capped(src: IO[bytes], dst: IO[bytes], budget: _Budget) -> bool:
    """Copy up to MAX_MEMBER_BYTES and what is left of the ticket's decompressed budget; False
    when either ran out."""
    left = MAX_MEMBER_BYTES
    while chunk := src.read(min(1 << 20, left + 1, budget.bytes + 1)):
        if len(chunk) > min(left, budget.bytes):
            keep = min(left, budget.bytes)
            dst.write(chunk[:keep])
            budget.bytes -= keep
            return False
        budget.bytes -= len(chunk)
        left -= len(chunk)
        dst.write(chunk)
    return True


__all__ = ["KINDS", "Attachment", "InputError", "Kind", "Ticket", "open_ticket"]
