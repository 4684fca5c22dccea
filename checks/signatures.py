"""The catalogue of known failure signatures in NCCL, PyTorch and gloo log lines.

The entries are data (``signatures.toml`` next to this module): an id, a category from the shared
vocabulary, a regex, a literal prefilter the regex always contains, the cause, a pasteable fix and
the source/issue references. This module loads and validates them once and matches lines fast:

- Load-time validation rejects an unknown key, category, severity or source, a regex that does not
  compile, a title placeholder that is not a named group, and a prefilter that a match of the
  pattern would not necessarily contain (checked on the parsed regex, see ``checks.literals.implied``).
- ``match_line`` first runs ONE combined regex (a trie of each prefilter's rarest tail, so any line
  containing a prefilter passes); a line that passes none (nearly every line of a healthy log)
  costs that single search. Only when it hits are the individual prefilters and regexes tried.
- Specificity: when several signatures match one line, the one whose pattern spells out more fixed
  text comes first (e.g. ``nccl.cuda-driver-insufficient`` before the generic ``nccl.cuda-failure``,
  ``nccl.ib-completion-retry-exceeded`` before ``nccl.ib-completion-error``); ties keep file order.
  ``SIGNATURES`` is stored in that order.
"""

from __future__ import annotations

import functools
import re
import string
import tomllib
from dataclasses import dataclass
from importlib.resources import files
from re import _parser as sre_parse  # the stdlib regex parser (module sre_parse before 3.11)
from typing import Any

from checks import Problem
from checks.literals import gate_literal, implied, mandatory_runs, trie_regex
from nccldoctor.model import CATEGORIES, Severity
from nccldoctor.units import format_seconds

SOURCES: tuple[str, ...] = ("nccl", "torch", "gloo")
CATALOGUE_FILE = "signatures.toml"

_KEYS = (
    "id",
    "source",
    "versions",
    "category",
    "severity",
    "title",
    "prefilter",
    "pattern",
    "cause",
    "fix",
    "reference",
)
# optional: not_from, the source files (as NCCL's WARN head names them, ``ras/client_support.cc``)
# whose lines with this text are not this problem; only_from, the files whose lines alone are
# (``transport/nvls.cc``: a CUDA failure there is NVLink SHARP's); units, {group: unit} of what a
# group captures, so that a title reads "10 min" where the line said 600061 milliseconds;
# explains, the ids of signatures whose lines follow from this one's when both are in a log
_OPTIONAL = ("not_from", "only_from", "units", "explains")
_UNITS = {"ms": lambda digits: format_seconds(int(digits) / 1000)}
_ID = re.compile(r"^(?P<source>[a-z]+)\.[a-z0-9]+(?:-[a-z0-9]+)*$")
_FRAGMENT = re.compile(r"\{\{(\w+)\}\}")


class SignatureError(ValueError):
    """The catalogue is malformed; the message names the entry and the problem."""


@dataclass(frozen=True)
class Signature:
    id: str
    category: str
    severity: Severity
    title: str
    pattern: str
    prefilter: str
    cause: str
    fix: str
    reference: tuple[str, ...]
    source: str
    versions: str
    not_from: tuple[str, ...] = ()
    only_from: tuple[str, ...] = ()
    explains: tuple[str, ...] = ()  # the signatures whose lines are this one's consequences
    units: tuple[tuple[str, str], ...] = ()  # (group, unit) pairs, the unit a key of _UNITS
    weight: int = 0  # how much fixed text the pattern spells out: its specificity

    def describes(self, line: str) -> bool:
        """Whether ``line`` (a whole log line) is this problem: not printed from a ``not_from``
        file (``file.cc:NNN`` in its head), and from an ``only_from`` file when it names some.
        A WARN's message alone names no file: only a signature without ``only_from`` takes it."""
        if any(f"{name}:" in line for name in self.not_from):
            return False
        return not self.only_from or any(f"{name}:" in line for name in self.only_from)


@dataclass(frozen=True)
class SignatureMatch:
    signature: Signature
    groups: dict[str, str]  # the named groups that took part in the match

    @property
    def title(self) -> str:
        """The signature's title with ``{group}`` filled ("?" for a group that did not match),
        a group with a unit in the unit a person reads (600061 ms: "10 min")."""
        shown = dict(self.groups)
        for group, unit in self.signature.units:
            if shown.get(group, "").isdigit():
                shown[group] = _UNITS[unit](shown[group])
        return self.signature.title.format_map(_Filled(shown))

    def to_problem(
        self, evidence: list[str], node: str | None = None, rank: int | None = None
    ) -> Problem:
        """What the signature's rule reports (its id, area and category come from the registry,
        ``checks/logs/catalogue.py``)."""
        sig = self.signature
        return Problem(
            severity=sig.severity,
            title=self.title,
            evidence=list(evidence),
            fix=f"{sig.cause}\n\n{sig.fix}",
            links=list(sig.reference),
            node=node,
            rank=rank,
        )


class _Filled(dict):
    def __missing__(self, key: str) -> str:
        return "?"


class SignatureMatcher:
    """Matches lines against a validated catalogue; build it once, call ``match`` per line."""

    def __init__(self, signatures: tuple[Signature, ...]) -> None:
        # sorted() is stable: ties keep file order
        self.signatures: tuple[Signature, ...] = tuple(sorted(signatures, key=lambda s: -s.weight))
        self._gate = re.compile(trie_regex({gate_literal(sig.prefilter) for sig in signatures}))
        self._compiled: dict[str, re.Pattern[str]] = {}

    def gate(self, text: str) -> bool:
        """Whether some signature's prefilter may occur in ``text``: a cheap test of many lines."""
        return self._gate.search(text) is not None

    def _regex(self, sig: Signature) -> re.Pattern[str]:
        # compiled when a line first holds its prefilter: most runs never need a pattern, and a
        # log with a few WARNs needs a few (all of them cost ~9 ms, a third of loading the catalogue)
        rx = self._compiled.get(sig.id)
        if rx is None:
            rx = self._compiled[sig.id] = re.compile(sig.pattern)
        return rx

    def match(self, text: str) -> list[SignatureMatch]:
        """All signatures matching ``text``, most specific first; ``[]`` for most lines."""
        if self._gate.search(text) is None:
            return []
        found = []
        for sig in self.signatures:
            if (
                sig.prefilter in text
                and (m := self._regex(sig).search(text))
                and sig.describes(text)
            ):
                groups = {k: v for k, v in m.groupdict().items() if v is not None}
                found.append(SignatureMatch(sig, groups))
        return found


def load_signatures(text: str) -> tuple[Signature, ...]:
    """Parse and validate a catalogue (TOML text); raise SignatureError on the first problem."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SignatureError(f"catalogue is not valid TOML: {exc}") from exc
    unknown_tables = set(data) - {"fragments", "signature"}
    if unknown_tables:
        raise SignatureError(f"unknown top-level keys: {sorted(unknown_tables)}")
    fragments = data.get("fragments", {})
    entries = data.get("signature", [])
    if not isinstance(entries, list) or not entries:
        raise SignatureError("catalogue has no [[signature]] entries")
    signatures: list[Signature] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        sig = _build(entry, fragments, where=f"signature #{index + 1} ({entry.get('id', '?')})")
        if sig.id in seen:
            raise SignatureError(f"duplicate signature id {sig.id!r}")
        seen.add(sig.id)
        signatures.append(sig)
    return tuple(signatures)


def _build(entry: dict[str, Any], fragments: dict[str, str], where: str) -> Signature:
    missing = [k for k in _KEYS if k not in entry]
    extra = sorted(set(entry) - set(_KEYS) - set(_OPTIONAL))
    if missing or extra:
        raise SignatureError(f"{where}: missing keys {missing}, unknown keys {extra}")
    for key in _KEYS:
        if key != "reference" and not (isinstance(entry[key], str) and entry[key].strip()):
            raise SignatureError(f"{where}: {key} must be a non-empty string")
    reference = entry["reference"]
    if not (
        isinstance(reference, list) and reference and all(isinstance(r, str) for r in reference)
    ):
        raise SignatureError(f"{where}: reference must be a non-empty list of strings")
    not_from, only_from = entry.get("not_from", []), entry.get("only_from", [])
    for key, names in (("not_from", not_from), ("only_from", only_from)):
        if not (isinstance(names, list) and all(isinstance(f, str) and f for f in names)):
            raise SignatureError(f"{where}: {key} must be a list of file names")
    explains = entry.get("explains", [])
    if not (
        isinstance(explains, list) and all(isinstance(e, str) and _ID.match(e) for e in explains)
    ):
        raise SignatureError(f"{where}: explains must be a list of signature ids")
    id_match = _ID.match(entry["id"])
    if not id_match or id_match["source"] != entry["source"]:
        raise SignatureError(f"{where}: id must look like '<source>.<words-with-dashes>'")
    if entry["source"] not in SOURCES:
        raise SignatureError(f"{where}: unknown source {entry['source']!r} (one of {SOURCES})")
    if entry["category"] not in CATEGORIES:
        raise SignatureError(f"{where}: unknown category {entry['category']!r}")
    try:
        severity = Severity(entry["severity"])
    except ValueError:
        raise SignatureError(f"{where}: unknown severity {entry['severity']!r}") from None
    pattern = _expand(entry["pattern"], fragments, where)
    try:  # parsed once for every test below; compiled when first needed (SignatureMatcher)
        tree = sre_parse.parse(pattern)
    except re.error as exc:
        raise SignatureError(f"{where}: pattern does not compile: {exc}") from exc
    if tree.state.flags & (re.IGNORECASE | re.VERBOSE):
        raise SignatureError(f"{where}: inline flags (?i)/(?x) are not allowed")
    runs, branches = mandatory_runs(tree)  # walked once for the prefilter test and the weight
    if not implied(runs, branches, entry["prefilter"]):
        raise SignatureError(
            f"{where}: prefilter {entry['prefilter']!r} is not literal text that every match "
            "of the pattern contains"
        )
    placeholders = {f for _, f, _, _ in string.Formatter().parse(entry["title"]) if f}
    units = entry.get("units", {})
    if not (isinstance(units, dict) and set(units) <= set(tree.state.groupdict)):
        raise SignatureError(f"{where}: units must map named groups of the pattern to units")
    if unknown := sorted(set(map(str, units.values())) - set(_UNITS)):
        raise SignatureError(f"{where}: units {unknown} are not among {sorted(_UNITS)}")
    if not placeholders <= set(tree.state.groupdict):
        raise SignatureError(
            f"{where}: title placeholders {sorted(placeholders - set(tree.state.groupdict))} "
            "are not named groups of the pattern"
        )
    return Signature(
        id=entry["id"],
        category=entry["category"],
        severity=severity,
        title=entry["title"],
        pattern=pattern,
        prefilter=entry["prefilter"],
        cause=entry["cause"].strip(),
        fix=entry["fix"].strip(),
        reference=tuple(reference),
        source=entry["source"],
        versions=entry["versions"],
        not_from=tuple(not_from),
        only_from=tuple(only_from),
        explains=tuple(explains),
        units=tuple(units.items()),
        weight=sum(map(len, runs)),  # the fixed text every match spells out: its specificity
    )


def _expand(pattern: str, fragments: dict[str, str], where: str) -> str:
    def fragment(m: re.Match[str]) -> str:
        if m[1] not in fragments:
            raise SignatureError(f"{where}: unknown fragment {{{{{m[1]}}}}}")
        return fragments[m[1]]

    return _FRAGMENT.sub(fragment, pattern)


@functools.cache
def _default() -> SignatureMatcher:
    """The shipped catalogue, compiled on first use: preflight, which never matches a log line,
    does not pay for it."""
    text = files(__package__ or "checks").joinpath(CATALOGUE_FILE).read_text(encoding="utf-8")
    return SignatureMatcher(load_signatures(text))


def __getattr__(name: str) -> Any:
    if name == "SIGNATURES":  # tuple[Signature, ...], loaded lazily like match_line's matcher
        return _default().signatures
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def match_line(text: str) -> list[SignatureMatch]:
    """Every catalogue signature matching one log line (raw or envelope-stripped), most specific
    first; ``[]`` when none does."""
    return _default().match(text)


def _most_specific(text: str) -> Signature | None:
    found = _default().match(text)
    return found[0].signature if found else None


def identify(text: str) -> str | None:
    """The id of the most specific signature matching ``text``, or None: what the log parser
    records while it reads (module-level, so a parse pool can pickle it by reference)."""
    sig = _most_specific(text)
    return sig.id if sig else None


def category_of(text: str | None) -> str:
    """The category of the most specific signature matching ``text`` (a line or a whole error,
    its lines searched alike), ``"other"`` when none does: how a rank's own error is judged
    (``checks/ranks.py``), in the catalogue's one vocabulary."""
    sig = _most_specific(text or "")
    return sig.category if sig else "other"


def _gate(text: str) -> bool:
    """Whether any signature may match somewhere in ``text`` (a chunk of many lines)."""
    return _default().gate(text)


identify.gate = _gate  # type: ignore[attr-defined]  # the parser's bulk test (ncclog/signals.py)
