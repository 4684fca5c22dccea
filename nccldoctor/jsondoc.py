"""A tool's JSON output read without trusting it: the document, or why it is none, and the
typed look-ups its readers share (``ncctests/json_output.py`` for nccl-tests ``-J``,
``ras/status.py`` for ``ncclras -f json``). A key of the wrong type is no data, never an
exception.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from nccldoctor.limits import MAX_DIGITS, MAX_JSON_BYTES, MAX_JSON_CONTAINERS, MAX_JSON_DEPTH

# A JSON string (its brackets are no nesting), and what is left of a document without them
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_A_BRACKET = re.compile(r"[^\[\]{}]+")


def too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON ``text`` nests more than ``limit`` deep, told in C before it is parsed
    (the parser and every walk over what it builds recurse): its brackets alone, with each pass
    taking away the innermost pairs, are gone within ``limit`` passes. Cut or bad JSON is no
    deeper than it looks; ``json.loads`` then says what is wrong with it."""
    brackets = _NOT_A_BRACKET.sub("", _STRING.sub("", text))
    for _ in range(limit):
        inner = brackets.replace("[]", "").replace("{}", "")
        if len(inner) == len(brackets):
            return False
        brackets = inner
    return bool(brackets)


def parse(text: str) -> Any:
    """``text`` parsed as JSON within the readers' bounds; raises ValueError saying why not
    (``json.JSONDecodeError`` for bad JSON)."""
    if len(text) > MAX_JSON_BYTES:
        raise ValueError(f"of over {MAX_JSON_BYTES >> 20} MiB")
    if text.count("[") + text.count("{") > MAX_JSON_CONTAINERS:  # strings' brackets too: a bound
        raise ValueError(f"of more than {MAX_JSON_CONTAINERS:,} lists and objects")
    if too_deep(text):
        raise ValueError(f"nested more than {MAX_JSON_DEPTH} deep")
    try:
        return json.loads(text)
    except RecursionError:  # brackets the depth test did not see as a pair
        raise ValueError(f"nested more than {MAX_JSON_DEPTH} deep") from None
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError):
            raise
        raise ValueError(f"with a number of more than {MAX_DIGITS} digits") from None


def load(
    text: str, is_document: Callable[[Any], bool], what: str, cut_hint: str = ""
) -> tuple[dict[str, Any] | None, str | None]:
    """``text`` as the document ``is_document`` recognises, or None and why: not whole JSON
    (``cut_hint`` says what that usually means), or JSON of another tool."""
    try:
        data = parse(text)
    except json.JSONDecodeError as exc:
        return None, f"not a whole JSON document ({exc}){cut_hint}"
    except ValueError as exc:
        return None, f"not read: a JSON document {exc}"
    if not is_document(data):
        return None, f"JSON, but not {what}"
    return data, None


def json_object(line: str | bytes) -> dict[str, Any] | None:
    """The JSON object one line of another process holds, or None (not JSON, nested past the
    parser's recursion, or JSON of another shape): its record's reader checks the fields."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def as_list(value: Any) -> list[Any]:
    """A list a document holds, or none."""
    return value if isinstance(value, list) else []


def as_int(value: Any) -> int | None:
    """An integer a document holds (JSON's true and false are not numbers)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
