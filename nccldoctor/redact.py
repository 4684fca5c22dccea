"""Redaction: secrets never leave the machine in a report (JSON, HTML or JUnit).

Reports get attached to bug tickets, so every string of a serialised report goes through here:
environment mappings lose the values of secret-looking names, credentials inside URLs are cut
out, and ``NAME=value`` pairs with a secret-looking name (a command line, a log line, a
finding's evidence) lose the value. Redacting twice gives the same text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

REDACTED = "<redacted>"

# Any name containing one of these words (case-insensitive) holds a secret.
SECRET_WORDS = ("TOKEN", "SECRET", "KEY", "PASSWORD", "CREDENTIAL", "AUTH")

# scheme://user:pass@host or scheme://token@host: everything between "//" and "@".
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]+@")
# NAME=value (or "name": "value") where NAME holds a secret word; the value runs to whitespace,
# a quote, a comma or a semicolon.
_SECRET_ASSIGNMENT = re.compile(
    r"(?P<name>\b[A-Za-z_][A-Za-z0-9_.-]*(?:" + "|".join(SECRET_WORDS) + r")[A-Za-z0-9_.-]*)"
    r"(?P<sep>[\"']?\s*[=:]\s*[\"']?)(?P<value>(?!" + re.escape(REDACTED) + r")[^\s\"',;]+)",
    re.IGNORECASE,
)


@lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    # cached: a document repeats the same few hundred key names thousands of times
    return _has_secret_word(name)


def _has_secret_word(text: str) -> bool:
    # Plain substring tests in a loop: faster on log lines than any() or a regex alternation.
    upper = text.upper()
    for word in SECRET_WORDS:  # noqa: SIM110 (any() with a generator is slower here)
        if word in upper:
            return True
    return False


def redact_text(text: str) -> str:
    """``text`` with URL credentials and secret ``NAME=value`` assignments replaced."""
    if "@" in text:
        text = _URL_CREDENTIALS.sub(rf"\g<scheme>{REDACTED}@", text)
    if ("=" in text or ":" in text) and _has_secret_word(text):  # cheap tests first
        text = _SECRET_ASSIGNMENT.sub(rf"\g<name>\g<sep>{REDACTED}", text)
    return text


def redact_env(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of an environment mapping with secret values replaced by ``<redacted>``.

    A string under a secret-looking name is replaced whole; everything else is redacted as text.
    """
    return {
        name: REDACTED
        if isinstance(value, str) and is_secret_name(str(name))
        else redact_value(value)
        for name, value in mapping.items()
    }


def redact_value(value: Any) -> Any:
    """Redact every string inside ``value``; every mapping is treated as an environment."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return redact_env(value)
    if isinstance(value, list):
        if value and all(isinstance(item, str) for item in value):
            joined = "\n".join(value)  # a log tail: one test for all its lines, most have nothing
            if "@" not in joined and not _has_secret_word(joined):
                return list(value)
        return [redact_value(item) for item in value]
    return value


def redact_document(document: dict[str, Any]) -> dict[str, Any]:
    """The report document with every secret removed (what ``Report.to_dict`` returns)."""
    return redact_value(document)


def redact_secret_names(value: Any) -> None:
    """In place, in parsed JSON: every string under a secret-looking name, in every mapping at
    any depth, becomes ``<redacted>``, as :func:`redact_env` does.

    For a document read back from a file, which ``redact_document`` redacted whole when it was
    written: the mappings are where a secret is named (an environment, a conf file, a log's
    env echo), and a name this version counts as secret may not have been one to the writer.
    Only mappings are visited, not the text of every string (a 64-node report holds ~100k
    strings, most of them log lines), so a page renders from the file at once.
    """
    if isinstance(value, dict):
        for name, item in value.items():
            if isinstance(item, str):
                if is_secret_name(str(name)):
                    value[name] = REDACTED
            elif isinstance(item, (dict, list)):
                redact_secret_names(item)
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, (dict, list)):
                redact_secret_names(item)
