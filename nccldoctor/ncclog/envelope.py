"""The NCCL line envelope: ``[ts] host:pid:tid [dev] [file:line (func)] NCCL LEVEL msg``.

Formats from NCCL's ``src/debug.cc`` (v2.18.6 … v2.30.7, and the 2.32.3 binary's strings):
INFO ``%s:%d:%d [%d] NCCL INFO ``; WARN ``\\n%s:%d:%d [%d] %s:%d NCCL WARN `` (2.30.7+ adds
``(%s)`` with the function after ``file:line``); TRACE ``%s:%d:%d [%d] %f %s:%d NCCL TRACE ``;
CALL ``%s:%d:%d NCCL CALL `` (no device); 2.32's ATTN level is shaped like WARN
(``[%d] %s:%d (%s) NCCL ATTN ``); 2.31+ diagnostics print ``host:pid NCCL DIAG [OK] …`` (no tid,
no device). 2.26+ may put an ``NCCL_DEBUG_TIMESTAMP_FORMAT`` stamp (any strftime text) in front. Launchers add their own prefixes (``[rank0]:`` from torchrun,
``0: `` from srun, ``[1,0]<stdout>:`` from mpirun, ISO or syslog stamps); we do not strip those
one by one: the host field is searched for after any such text, bounded by a separator.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# The head is everything before " NCCL <LEVEL> "; it is parsed once per distinct head (cached),
# because within one process the head repeats on nearly every line.
_HEAD = re.compile(
    r"(?<![^\s\]:>|])(?P<host>[^:\s\[\]|]+):(?P<pid>\d+):(?P<tid>\d+)"
    r"(?: \[(?P<dev>-?\d+)\])?"
    r"(?: -?[\d.]+ \S+:\d+)?"  # TRACE: "%f func:line"
    r"(?: (?P<file>\S+):(?P<line>\d+)(?: \((?P<func>[^)]*)\))?)?$"
)
# DIAG's head is "host:pid" alone (2.31+ diagnostics, docs/nccl-log-formats.md#envelope)
_DIAG_HEAD = re.compile(r"(?<![^\s\]:>|])(?P<host>[^:\s\[\]|]+):(?P<pid>\d+)(?::(?P<tid>\d+))?$")
# pastes that lost part of the head keep "[dev]": "78244:78244 [0]" (no host), "launcher [0]"
# (a launcher's tag in place of host:pid:tid)
_PARTIAL_HEAD = re.compile(
    r"(?:(?<![^\s\]:>|])(?P<pid>\d+):(?P<tid>\d+)|(?<![^\s\]>|])(?P<host>[^:\s\[\]|]+))"
    r" \[(?P<dev>-?\d+)\]"
    r"(?: (?P<file>\S+):(?P<line>\d+)(?: \((?P<func>[^)]*)\))?)?$"
)
# ... or only "[dev]" (NVIDIA/nccl#2094: host:pid:tid cut away by hand)
_DEV_ONLY = re.compile(r"(?:^|\s)\[(?P<dev>-?\d+)\]$")
_HOST_PID_END = re.compile(r"\S:\d+\s*$")  # "host:pid [dev]" lacks its tid: not NCCL's
LEVELS = ("INFO", "WARN", "CALL", "TRACE", "ATTN", "DIAG")
# what pasting adds around a line: ANSI colours, NULs, Markdown emphasis and code spans
_NOISE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x00|\*\*|`")
_CACHE_LIMIT = 4096


class Head(NamedTuple):
    host: str
    pid: int
    tid: int
    dev: int | None
    file: str | None
    line: int | None
    func: str | None

    @property
    def key(self) -> str:
        """The process a line belongs to: ``host:pid`` (threads of one process share it)."""
        return f"{self.host}:{self.pid}"


class Envelope(NamedTuple):
    head: Head
    level: str
    msg: str


_cache: dict[str, Head | None] = {}
_HEADLESS = Head("?", 0, 0, None, None, None, None)


def parse_head(head: str) -> Head | None:
    """Parse the text before `` NCCL LEVEL``; None when it carries neither ``host:pid:tid`` nor
    what a paste left of it (``pid:tid [dev]``, ``tag [dev]``, ``[dev]``)."""
    found = _cache.get(head, False)
    if found is not False:
        return found  # type: ignore[return-value]
    m = _HEAD.search(head) or _PARTIAL_HEAD.search(head)
    parsed = None
    if m:
        dev, line = m["dev"], m["line"]
        parsed = Head(
            m["host"] or "?",
            int(m["pid"] or 0),
            int(m["tid"] or 0),
            int(dev) if dev is not None else None,
            m["file"],
            int(line) if line is not None else None,
            m["func"],
        )
    elif (only := _DEV_ONLY.search(head)) and not _HOST_PID_END.search(head, 0, only.start()):
        parsed = Head("?", 0, 0, int(only["dev"]), None, None, None)
    if len(_cache) >= _CACHE_LIMIT:
        _cache.clear()  # timestamps make heads unique; keep memory flat
    _cache[head] = parsed
    return parsed


def clean(text: str) -> str:
    """``text`` without what a terminal, a web page or Markdown put around it."""
    if "\x1b" in text or "\x00" in text or "*" in text or "`" in text:
        return _NOISE.sub("", text)
    return text


def _diag_head(head: str) -> Head | None:
    m = _DIAG_HEAD.search(head)
    if m is None:
        return None
    return Head(m["host"], int(m["pid"]), int(m["tid"] or 0), None, None, None, None)


# NCCL before 2.3 printed no "NCCL": "host:pid:tid [dev] INFO msg" and "host:pid:tid [dev]
# file:line WARN msg" (2.1–2.2 as threads carry them; v2.3.5-5:include/debug.h added "NCCL").
# Such a line holds no "NCCL", so the parser reads it as an application's line: these needles
# (digit-free, as its shapes need) make it read them in order; without the WARN one, a WARN
# line was read or not by its neighbours. They are looked for in new shapes only: on a
# launcher's stdout (bench/parse.py's) the parse took 0.070 s of CPU for 60 MiB, 0.066 before.
LEGACY_NEEDLES = (b"] INFO ", b" WARN ")
_LEGACY = re.compile(r" (INFO|WARN) ")


def _legacy_line(text: str) -> Envelope | None:
    """A line of NCCL before 2.3, whose head is whole (``host:pid:tid [dev]``)."""
    m = _LEGACY.search(text)
    if m is None or _HEAD.search(text, 0, m.start()) is None:
        return None
    head = parse_head(text[: m.start()])
    if head is None or head.dev is None:
        return None
    return Envelope(head, m[1], text[m.end() :].rstrip("\r"))


def parse_line(text: str) -> Envelope | None:
    """Split one decoded line into its envelope, or None when it is not an NCCL debug line."""
    at = text.find(" NCCL ")
    if at < 0:
        if not text.startswith("NCCL "):
            return _legacy_line(text) if " INFO " in text or " WARN " in text else None
        at = -1  # the whole head cut away by hand: "NCCL INFO …" (NVIDIA/nccl#2389)
    rest = text[at + 6 :]
    space = rest.find(" ")
    level = rest if space < 0 else rest[:space]
    if level not in LEVELS:
        return None
    if at < 0:
        head: Head | None = _HEADLESS
    else:
        head = _diag_head(text[:at]) if level == "DIAG" else parse_head(text[:at])
    if head is None:
        return None
    msg = "" if space < 0 else rest[space + 1 :]
    return Envelope(head, level, msg.rstrip("\r"))
