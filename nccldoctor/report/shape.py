"""Tolerant readers of a report document's sections: a key that is missing, null or shaped
differently reads as empty, so nothing built from a document crashes on one."""

from __future__ import annotations

from typing import Any


def items(value: Any) -> list[dict[str, Any]]:
    """The dict entries of a list section (anything else: none)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def values(value: Any) -> list[Any]:
    """A list section's entries (anything else: none)."""
    return value if isinstance(value, list) else []


def section(document: dict[str, Any], key: str) -> dict[str, Any]:
    """The dict under ``key`` (anything else: {})."""
    value = document.get(key)
    return value if isinstance(value, dict) else {}
