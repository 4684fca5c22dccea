"""Redaction: secrets never leave the machine in a report (JSON, HTML, JUnit or the terminal).

Reports get attached to bug tickets, so every string of a serialised report goes through here:
mappings lose the values of secret-looking names (whatever their JSON type), credentials inside
URLs are cut out, and text loses the value of every secret-named assignment: ``NAME=value``,
``name: value``, ``--name=value`` and ``--name value`` (at the start of the text too, in any
case), ``Authorization: Bearer x`` and a bare ``Bearer x``. In an argument list a secret-named
flag's value is the next item. Redacting twice gives the same text.

A report file this version wrote is sealed (:func:`seal`): it says which rules redacted it and
holds a checksum of its text, so reading it back (:func:`sealed`) need not redact it again, while
any other document (an older version's, one edited since) is redacted whole.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

REDACTED = "<redacted>"

# Any name containing one of these words (case-insensitive) holds a secret.
SECRET_WORDS = ("TOKEN", "SECRET", "KEY", "PASSWORD", "CREDENTIAL", "AUTH")
_LOWER_WORDS = tuple(word.lower() for word in SECRET_WORDS)
# What text must hold for a pattern below to match: a secret word, or a bearer token's scheme.
_TEXT_WORDS = (*_LOWER_WORDS, "bearer")

_WORD = "(?:" + "|".join(SECRET_WORDS) + ")"
_NAME_CHAR = r"[A-Za-z0-9_.-]"
# A secret-named name, matched from its first character only (the lookbehind) and without
# backtracking (the lookahead finds the word, the possessive run takes the name): a long run of
# name characters costs one pass, not one per way to split it.
_SECRET_NAME = rf"(?<!{_NAME_CHAR})(?={_NAME_CHAR}*?{_WORD})(?P<name>{_NAME_CHAR}++)"
_NOT_DONE = "(?!" + re.escape(REDACTED) + ")"
# An HTTP credential is a scheme and its token: the value of ``Authorization: Bearer x`` is both.
_SCHEME = r"(?:bearer|basic|digest|token)[ \t]+"

# scheme://user:pass@host or scheme://token@host: everything between "//" and "@".
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]+@")
# NAME=value, name: value, "name": "value": a quoted value runs to its quote, any other to
# whitespace, a quote, a comma or a semicolon.
_SECRET_ASSIGNMENT = re.compile(
    _SECRET_NAME + r"(?P<sep>[\"']?\s*[=:]\s*(?P<quote>[\"'])?)"
    rf"(?P<value>{_NOT_DONE}(?(quote)[^\"'\n]+|(?:{_SCHEME})?[^\s\"',;]+))",
    re.IGNORECASE,
)
# --name value (and -name value): a flag where an argument can start, and a value that is not
# the next flag.
_SECRET_FLAG = re.compile(
    r"(?<![^\s\"'(\[,])(?=--?)" + _SECRET_NAME + rf"(?P<sep>[ \t]+){_NOT_DONE}(?!-)[^\s\"',;]+",
    re.IGNORECASE,
)
# A bearer token anywhere (RFC 6750's b64token), as curl -v and HTTP client logs print one.
_BEARER = re.compile(rf"(?P<name>\bbearer[ \t]+){_NOT_DONE}[A-Za-z0-9._~+/-]+=*", re.IGNORECASE)
# A list item that is a whole flag without its value (argv: "--hf-token", "xyz").
_FLAG_ITEM = re.compile(rf"--?{_NAME_CHAR}+")

# Which rules redacted a sealed file: a change to the patterns or the words changes it by
# itself; one in the code (what a mapping or a list loses) must raise the version.
_CODE_VERSION = 2
RULES = "{:08x}".format(
    zlib.crc32(
        "\n".join(
            [str(_CODE_VERSION)]
            + [p.pattern for p in (_URL_CREDENTIALS, _SECRET_ASSIGNMENT, _SECRET_FLAG, _BEARER)]
        ).encode()
    )
)
SEAL_KEY = "redacted_by"
# The seal is the last key of the file: the rules, then the CRC-32 of the text before the seal.
_SEAL = re.compile(rb',\n "' + SEAL_KEY.encode() + rb'": "([0-9a-f]{8}):([0-9a-f]{8})"\n\}\n?\Z')


@lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    # cached: a document repeats the same few hundred key names thousands of times; str() on
    # a miss only, for the int keys of a mapping built in Python
    return _has_word(str(name), _LOWER_WORDS)


def _has_word(text: str, words: tuple[str, ...]) -> bool:
    # Plain substring tests in a loop: faster on log lines than any() or a regex alternation;
    # lower() because it is twice as fast as upper() on ASCII.
    lower = text.lower()
    for word in words:  # noqa: SIM110 (any() with a generator is slower here)
        if word in lower:
            return True
    return False


def _may_hold_secret(text: str) -> bool:
    """The cheap test every pattern needs to pass: an ``@`` or a secret word."""
    return "@" in text or _has_word(text, _TEXT_WORDS)


def redact_text(text: str) -> str:
    """``text`` with URL credentials, secret assignments and bearer tokens replaced."""
    if "@" in text:
        text = _URL_CREDENTIALS.sub(rf"\g<scheme>{REDACTED}@", text)
    # Cheap tests first (most strings are names and numbers): every pattern needs a separator,
    # = or : of an assignment, or the blank between a flag or a scheme and its value.
    separated = "=" in text or ":" in text or " " in text or "\t" in text
    if separated and _has_word(text, _TEXT_WORDS):  # the patterns are slow: most text has none
        text = _SECRET_ASSIGNMENT.sub(rf"\g<name>\g<sep>{REDACTED}", text)
        text = _SECRET_FLAG.sub(rf"\g<name>\g<sep>{REDACTED}", text)
        text = _BEARER.sub(rf"\g<name>{REDACTED}", text)
    return text


def redact_env(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a mapping with the value under every secret-looking name replaced by
    ``<redacted>`` (a list, a number, a mapping as much as a string; None stays: it holds
    nothing); every other value is redacted as :func:`redact_value` does."""
    return {
        name: REDACTED if value is not None and is_secret_name(name) else redact_value(value)
        for name, value in mapping.items()
    }


def redact_value(value: Any) -> Any:
    """Redact every string inside ``value``; every mapping is treated as an environment."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return redact_env(value)
    if isinstance(value, list):
        # a log tail: one test for all its lines, most have nothing (the types are looked at in
        # C: a generator over 13k lines of a 64-node report was a tenth of the redaction)
        if value and set(map(type, value)) == {str} and not _may_hold_secret("\n".join(value)):
            return list(value)
        return _redact_items(value)
    return value


def _redact_items(items: list[Any]) -> list[Any]:
    """The items redacted; the item after a secret-named flag (``--password``, then its value,
    as argv holds them) is replaced whole unless it is the next flag."""
    redacted: list[Any] = []
    flag_before = False
    for item in items:
        is_flag = isinstance(item, str) and item.startswith("-")
        if flag_before and not is_flag and item is not None:
            redacted.append(REDACTED)
        else:
            redacted.append(redact_value(item))
        flag_before = (
            is_flag and _FLAG_ITEM.fullmatch(item) is not None and _has_word(item, _LOWER_WORDS)
        )
    return redacted


def redact_document(document: dict[str, Any]) -> dict[str, Any]:
    """The report document with every secret removed (what ``Report.to_dict`` returns)."""
    return redact_value(document)


def seal(json_text: str) -> str:
    """``json_text`` (a JSON object as ``json.dumps(..., indent=1)`` writes it, redacted by
    these rules) with a last key that says so: the rules and a checksum of the text before it."""
    body = json_text.rstrip()
    if not body.endswith("}") or body[:-1].rstrip() == "{":
        return body + "\n"  # not an object with keys: nothing to add a key to
    body = body[:-1].rstrip()
    return f'{body},\n "{SEAL_KEY}": "{RULES}:{zlib.crc32(body.encode()):08x}"\n}}\n'


def sealed(data: bytes) -> bool:
    """Whether ``data`` (a report file's bytes) is as :func:`seal` left it: redacted by these
    rules and unchanged since, so redacting it again would change nothing. A CRC is no proof
    against forgery, and needs none: whoever forges a seal put the secrets there themselves."""
    found = _SEAL.search(data, max(0, len(data) - 64))
    return (
        found is not None
        and found[1].decode() == RULES
        and f"{zlib.crc32(data[: found.start()]):08x}" == found[2].decode()
    )
