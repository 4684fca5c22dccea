"""Whether a file's first bytes are a PyTorch Flight Recorder dump.

Apart from the reader (``flightrec.py``) because a ticket sniffs every file it is given with this
test: `nccldoctor explain` of a plain log then never loads the dump reader and its pickle, ast
and dataclass machinery (docs/design.md#explain-start).
"""

from __future__ import annotations

PICKLE_MAGIC = tuple(bytes([0x80, proto]) for proto in range(2, 6))


def looks_like_dump(head: bytes) -> bool:
    """Whether the first bytes of a file are a Flight Recorder dump. The pickle (protocol 2-5)
    is a dict whose first keys are "version", "pg_config", "pg_status", then "entries"; the
    JSON form is written by nlohmann::json, whose keys come sorted, so "entries" precedes
    "pg_config" and a long dump's head holds only entries (profiling_name is an entry's key).
    torch/csrc/distributed/c10d/FlightRecorder.cpp (dump, dump_json)."""
    if head.startswith(PICKLE_MAGIC):
        return b"pg_config" in head or b"entries" in head
    text = head.lstrip()
    return text.startswith(b"{") and (
        b'"pg_config"' in text or (b'"entries"' in text and b'"profiling_name"' in text)
    )
