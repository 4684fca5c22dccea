"""A Flight Recorder dump's document from its bytes: the one place a stranger's pickle is opened.

A dump (``_dump_fr_trace()``, the ``TORCH_FR_DUMP_TEMP_FILE`` files, or the JSON form of
``_dump_fr_trace_json()``) is untrusted input from a ticket. Its pickle is read by an unpickler
that builds only builtin containers and scalars and refuses any global (what a ``__reduce__``
that runs code needs). What it builds is then measured before anything else touches it: a
pickle refers to one object as often as it likes in two bytes, so a 700-byte file can hold a
list whose every walk (repr, the matching, the JSON of a report) visits 10^40 objects. The
measure visits the document as any walk would, each reference again, level by level in C
(``gc.get_referents``), and stops at ``MAX_DUMP_OBJECTS`` objects or ``MAX_DUMP_DEPTH`` levels:
about a millisecond for a real dump of 2000 entries, a tenth of what reading and matching it
costs (bench/fr.py), less what turning the collector off while loading saves.
JSON is measured for its size and nesting before it is parsed (``jsondoc.parse``). What the count
does not weigh, one long string referred to by every entry, the matching bounds as it prints
the entries (``limits.MAX_DUMP_SIGNATURE_BYTES``): weighing every string here would cost more
than the matching itself.
"""

from __future__ import annotations

import gc
import io
import json
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nccldoctor.jsondoc import parse
from nccldoctor.limits import MAX_DUMP_BYTES, MAX_DUMP_DEPTH, MAX_DUMP_OBJECTS

# References one call of get_referents may list (8 bytes each): a call lists every item of every
# object it is given, each shared list again, and no object holds more items than its pickle has
# bytes, so the objects given at once are this over the pickle's size
_REFS_PER_CALL = 32 << 20
_CHUNK = 1024  # at most: more objects a call saves no time


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
    # torchfrtrace's loader, it is off while the dump is built and measured)
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
            document = _SafeUnpickler(io.BytesIO(data)).load()
    except DumpRefused as exc:
        return Loaded(None, f"refused: the pickle asks for {exc} (loading it would run code)", True)
    except RecursionError:
        return Loaded(None, "unreadable: nested too deeply")
    except Exception as exc:  # truncated or corrupt: pickle and json raise many kinds
        why = "truncated" if isinstance(exc, EOFError) or "truncated" in str(exc) else "corrupt"
        return Loaded(None, f"unreadable ({why}): {type(exc).__name__}: {exc}")
    over = _over_bounds(document, max(1, min(_CHUNK, _REFS_PER_CALL // max(len(data), 1))))
    if over:
        return Loaded(None, f"not read: {over}")
    if not isinstance(document, dict) or not isinstance(document.get("entries"), list):
        return Loaded(None, "not a Flight Recorder dump: it has no list of entries")
    return Loaded(document)


def _over_bounds(document: Any, chunk: int) -> str | None:
    """Why a walk over ``document`` would not end, or None: the objects it visits (each
    reference again) and its depth, counted one level at a time in C, ``chunk`` objects of a
    level at once, before any is visited."""
    level = [document]
    visited = 1
    referents = gc.get_referents
    for _ in range(MAX_DUMP_DEPTH):
        if len(level) <= chunk:
            level = referents(*level)
            visited += len(level)
        else:
            below: list[Any] = []
            for at in range(0, len(level), chunk):
                below += referents(*level[at : at + chunk])
                if visited + len(below) > MAX_DUMP_OBJECTS:
                    break
            level = below
            visited += len(level)
        if visited > MAX_DUMP_OBJECTS:
            return (
                f"it refers to more than {MAX_DUMP_OBJECTS:,} objects (one object referenced "
                "over and over: a dump torch wrote holds under 1M)"
            )
        if not level:
            return None
    return f"nested more than {MAX_DUMP_DEPTH} deep (a dump torch wrote nests 5)"
