"""A Flight Recorder dump's document from its bytes: the one place a stranger's pickle is opened.

A dump (``_dump_fr_trace()``, the ``TORCH_FR_DUMP_TEMP_FILE`` files, or the JSON form of
``_dump_fr_trace_json()``) is untrusted input from a ticket. Its pickle is read by an unpickler
that builds only builtin containers and scalars and refuses any global (what a ``__reduce__``
that runs code needs). Before that unpickler runs, ``pickscan.scan`` tells from the pickle's
opcodes what it would build: a pickle refers to one object as often as it likes in two bytes, so
a 700-byte file can hold a list whose every walk (repr, the matching, the JSON of a report)
visits 10^40 objects, a tuple the unpickler itself would hash for ever as a dict key, or a length
that makes it allocate gigabytes first. A dump whose objects (``MAX_DUMP_OBJECTS``), text
(``MAX_DUMP_TEXT_BYTES``) or nesting (``MAX_DUMP_DEPTH``), each shared reference counted again,
pass their bounds is not unpickled, as is one with an integer longer than torch writes; the
finding says which bound and where. The scan takes 3-4% of the CPU time of a dump's analysis
(bench/fr.py measures the analysis with and without it, alternated, in one run).
JSON is measured for its size and nesting before it is parsed (``jsondoc.parse``); it has no
shared references, so what it holds is bounded by its bytes.
"""

from __future__ import annotations

import gc
import io
import json
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nccldoctor.forensics.pickscan import Stop, scan
from nccldoctor.jsondoc import parse
from nccldoctor.limits import MAX_DUMP_BYTES, MAX_DUMP_DEPTH, MAX_DUMP_OBJECTS, MAX_DUMP_TEXT_BYTES

_OPCODES = {
    v[0]: k for k, v in vars(pickle).items() if k.isupper() and type(v) is bytes and len(v) == 1
}


class DumpRefused(Exception):
    """The dump asked for a Python global: building it would run code."""


class _SafeUnpickler(pickle.Unpickler):
    """Flight Recorder dumps hold only builtin containers and scalars; refuse anything else."""

    def find_class(self, module: str, name: str) -> Any:
        raise DumpRefused(f"{module}.{name}")


@dataclass
class Loaded:
    """One file as read: the dump's document, or why not (``refused``: it would run code)."""

    document: dict[str, Any] | None
    error: str | None = None
    refused: bool = False


def read_dump(path: Path) -> bytes:
    """A dump file's bytes, up to one past ``MAX_DUMP_BYTES`` (raises OSError)."""
    with open(path, "rb") as f:
        return f.read(MAX_DUMP_BYTES + 1)


def load_dump(data: bytes) -> Loaded:
    """A dump's document from its bytes; never raises, never builds anything but plain data,
    never hands on a document whose walk would not end."""
    if len(data) > MAX_DUMP_BYTES:
        return Loaded(None, f"not read: over {MAX_DUMP_BYTES >> 20} MiB (torch writes under 1 MB)")
    # a dump is plain data without cycles: the collector, set off by its hundred thousand
    # containers, would walk them and the analysis so far again and again for nothing (as
    # torchfrtrace's loader, it is off while the dump is built)
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _load(data)
    finally:
        if collecting:
            gc.enable()


def _load(data: bytes) -> Loaded:
    try:
        if data.lstrip().startswith(b"{"):
            try:
                document = parse(data.decode("utf-8", "replace"))
            except ValueError as exc:
                if isinstance(exc, json.JSONDecodeError):
                    raise  # unreadable, said below as for a pickle
                return Loaded(None, f"not read: a JSON document {exc}")
        else:
            stopped = scan(data, MAX_DUMP_OBJECTS, MAX_DUMP_TEXT_BYTES, MAX_DUMP_DEPTH)
            if stopped:
                return _refusal(*stopped)
            document = _SafeUnpickler(io.BytesIO(data)).load()
    except DumpRefused as exc:
        return Loaded(None, f"refused: the pickle asks for {exc} (loading it would run code)", True)
    except Exception as exc:  # truncated or corrupt: pickle and json raise many kinds
        why = "truncated" if isinstance(exc, EOFError) or "truncated" in str(exc) else "corrupt"
        return Loaded(None, f"unreadable ({why}): {type(exc).__name__}: {exc}")
    if not isinstance(document, dict) or not isinstance(document.get("entries"), list):
        return Loaded(None, "not a Flight Recorder dump: it has no list of entries")
    return Loaded(document)


def _refusal(why: Stop, at: int, number: int) -> Loaded:
    """What the scan of a pickle found, said for the finding: which bound, where."""
    name = _OPCODES.get(number, f"0x{number:02x}") if number < 256 else str(number)
    said = {
        Stop.TRUNCATED: f"unreadable (truncated): cut short at byte {at}",
        Stop.OPCODE: f"unreadable (corrupt): byte {at} is no opcode or its argument is wrong",
        Stop.STACK: f"unreadable (corrupt): {name} at byte {at} lacks what it works on",
        Stop.MEMO: f"unreadable (corrupt): memo index {number} at byte {at} was not stored",
        Stop.NOT_DATA: f"refused: its {name} at byte {at} builds something other than plain data",
        Stop.KEY: f"not read: a dict key or set item at byte {at} is no string or short number "
        "(the unpickler's hashing of one can take for ever)",
        Stop.CHANGED: f"not read: a container is changed at byte {at} after it was referenced "
        "(a cycle: a dump has none)",
        Stop.OBJECTS: f"not read: it refers to more than {number:,} objects, each reference "
        "counted again (a dump torch wrote holds under 1M)",
        Stop.BYTES: f"not read: its text comes to more than {number >> 20} MiB, each reference "
        "counted again (a dump torch wrote holds a few MB)",
        Stop.DEPTH: f"not read: nested more than {number} deep (a dump torch wrote nests 5)",
        Stop.NUMBER: f"not read: an integer of {number} bytes or digits at byte {at} (torch "
        "writes 8 bytes at most; Python prints none of over 4300 digits)",
    }[why]
    return Loaded(None, said, refused=why is Stop.NOT_DATA)
