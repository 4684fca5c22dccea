"""A ticket's attachments as they come: files, folders, ``.tar``/``.tar.gz``/``.zip``, sorted by kind.

Each file is sniffed by its first bytes against ``KINDS``, one row per kind (its section in the
report and how it is recognised); a file may be of two kinds (an nccl-tests output with NCCL INFO
lines between its rows is a log too). Archives are unpacked into a working folder under caps on
the members and on the decompressed bytes (a zip bomb is read in part, and said so), never
following links or leaving the folder. Nothing here parses a kind: that is each kind's reader.
"""

from __future__ import annotations

import gzip
import re
import tarfile
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from nccldoctor.forensics.dumphead import looks_like_dump
from nccldoctor.ncclog.inputs import STDIN, InputError, expand_inputs

HEAD_BYTES = 64 * 1024
MAX_UNPACKED_BYTES = 2 << 30  # decompressed, all archives of one ticket together
MAX_MEMBERS = 20_000
MAX_DEPTH = 2  # an archive inside an archive is unpacked; one deeper is not


def _text(head: bytes) -> str:
    return head.decode("utf-8", "replace")


def _json_with(*keys: str) -> Callable[[bytes], bool]:
    quoted = [f'"{k}"'.encode() for k in keys]
    return lambda head: head.lstrip()[:1] == b"{" and all(k in head for k in quoted)


_NCCL_TESTS_TEXT = re.compile(
    r"nThreads?:? \d+ nGpus|# Out of bounds values|# Avg bus bandwidth|# Collective test starting"
    r"|: Test (?:NCCL|CUDA) failure |#\s+size\s+count\s+type"
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

    def of_kind(self, kind: str) -> list[Attachment]:
        return [f for f in self.files if kind in f.kinds]

    def summary(self) -> dict[str, object]:
        """What was found of each kind, for the report."""
        return {
            "kinds": {k: [f.name for f in self.of_kind(k)] for k in KIND_NAMES if self.of_kind(k)},
            "skipped": [{"name": n, "why": w} for n, w in self.skipped],
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
        self.bytes = MAX_UNPACKED_BYTES
        self.members = MAX_MEMBERS


def open_ticket(args: list[str], workdir: Path) -> Ticket:
    """Sort every file the arguments name; archives are unpacked under ``workdir``.

    Raises InputError (a usage error) for an argument that names nothing."""
    ticket = Ticket()
    budget = _Budget()
    for source in expand_inputs(args):
        _add(ticket, source.name, source.name, source.size, workdir, budget, 0)
    return ticket


def _add(
    ticket: Ticket, path: str, name: str, size: int, workdir: Path, budget: _Budget, depth: int
) -> None:
    try:
        archive = path != STDIN and (zipfile.is_zipfile(path) or _is_tar(path))
        if archive:
            if depth >= MAX_DEPTH:
                ticket.skipped.append((name, "an archive nested too deep: not unpacked"))
                return
            _unpack(ticket, path, name, workdir, budget, depth)
            return
        found = sort_attachment(path, name, size)
    except OSError as exc:
        ticket.skipped.append((name, f"unreadable: {exc.strerror or exc}"))
        return
    if found is None:
        ticket.skipped.append((name, _not_a_kind(path)))
    else:
        ticket.files.append(found)


def _not_a_kind(path: str) -> str:
    if not read_head(path).strip(b"\x00"):  # what a crash or a full disk leaves of a file
        return "only NUL bytes: nothing of it reached the disk"
    return "not a kind nccldoctor reads (binary)"


def _is_tar(path: str) -> bool:
    """A tar archive with at least one member: ``is_tarfile`` alone takes a file of NUL bytes
    for an empty archive (its end marker is zeros), and it would vanish from the ticket."""
    try:
        if not tarfile.is_tarfile(path):
            return False
        with tarfile.open(path) as archive:
            return archive.next() is not None
    except (OSError, tarfile.TarError, EOFError):
        return False


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
    damage = (OSError, EOFError, zipfile.BadZipFile, tarfile.TarError, NotImplementedError)
    try:
        members = _zip_members(path) if zipfile.is_zipfile(path) else _tar_members(path)
        for member, opener in members:
            label = f"{name}:{member}"
            parts = _safe_parts(member)
            if parts is None:
                ticket.skipped.append((label, "a path outside the archive: not unpacked"))
                continue
            if budget.members <= 0:
                ticket.skipped.append((name, f"more than {MAX_MEMBERS} files: the rest not read"))
                return
            budget.members -= 1
            target = base.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with opener() as src, open(target, "wb") as dst:
                whole = _copy_capped(src, dst, budget)
            _add(ticket, str(target), label, target.stat().st_size, workdir, budget, depth + 1)
            if not whole:
                cap = MAX_UNPACKED_BYTES >> 20
                ticket.skipped.append(
                    (label, f"unpacks to over {cap} MiB: read in part, the rest not")
                )
                return
    except (*damage, RuntimeError) as exc:
        # a cut or corrupt archive keeps what was unpacked before the damage
        ticket.skipped.append((name, f"archive damaged: {type(exc).__name__}: {exc}"))


def _zip_members(path: str):
    archive = zipfile.ZipFile(path)
    for info in archive.infolist():
        if not info.is_dir():
            yield info.filename, lambda info=info: archive.open(info)


def _tar_members(path: str):
    with tarfile.open(path) as archive:
        for info in archive:
            if info.isfile():  # links, devices and fifos are never followed or made
                yield info.name, lambda info=info: archive.extractfile(info)


def _copy_capped(src, dst, budget: _Budget) -> bool:
    """Copy until the ticket's decompressed budget runs out; False when it did."""
    while chunk := src.read(1 << 20):
        if len(chunk) > budget.bytes:
            dst.write(chunk[: budget.bytes])
            budget.bytes = 0
            return False
        budget.bytes -= len(chunk)
        dst.write(chunk)
    return True


__all__ = ["KINDS", "Attachment", "InputError", "Kind", "Ticket", "open_ticket"]
