"""A tool's JSON output read without trusting it: the document, or why it is none, and the
typed look-ups its readers share (``ncctests.py`` for nccl-tests ``-J``, ``ras.py`` for
``ncclras -f json``). A key of the wrong type is no data, never an exception.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def load(
    text: str, is_document: Callable[[Any], bool], what: str, cut_hint: str = ""
) -> tuple[dict[str, Any] | None, str | None]:
    """``text`` as the document ``is_document`` recognises, or None and why: not whole JSON
    (``cut_hint`` says what that usually means), or JSON of another tool."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        return None, f"not a whole JSON document ({exc}){cut_hint}"
    except RecursionError:
        return None, "not a JSON document it can read (nested too deep)"
    if not is_document(data):
        return None, f"JSON, but not {what}"
    return data, None


def as_list(value: Any) -> list[Any]:
    """A list a document holds, or none."""
    return value if isinstance(value, list) else []


def as_int(value: Any) -> int | None:
    """An integer a document holds (JSON's true and false are not numbers)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
