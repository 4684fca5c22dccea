"""The one door from the parser to the known-signature catalogue (``checks/signatures.py``).

Every WARN and every line that is not an NCCL debug line (PyTorch, the launcher, the app) goes
through :func:`match`. Parse workers only record which lines matched (plain text pickles
cheaply); the main process turns those lines into Findings with :func:`findings_from_hits`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nccldoctor.model import Finding

try:  # the catalogue lands separately; without it no line matches
    from checks.signatures import match_line as _match_line
except ImportError:  # pragma: no cover - depends on what is merged
    _match_line = None

MAX_LINES_PER_SIGNATURE = 5

Matcher = Callable[[str], list[Any]]


def match(text: str) -> list[Any]:
    """The catalogue's matches for ``text`` (``SignatureMatch`` objects), or none."""
    if _match_line is None:
        return []
    try:
        return list(_match_line(text))
    except Exception:  # a broken catalogue entry must not stop the parse
        return []


@dataclass
class SignatureHit:
    """One signature seen in the logs: the first lines that matched, and how often."""

    id: str
    count: int = 0
    lines: list[tuple[str, str | None]] = field(default_factory=list)  # (text, host:pid)

    def add(self, text: str, key: str | None) -> None:
        self.count += 1
        if len(self.lines) < MAX_LINES_PER_SIGNATURE:
            self.lines.append((text, key))


def record(hits: dict[str, SignatureHit], text: str, key: str | None) -> None:
    """Match ``text`` and remember it under each signature it matched."""
    for found in match(text):
        sig_id = found.signature.id
        hit = hits.get(sig_id)
        if hit is None:
            hit = hits[sig_id] = SignatureHit(sig_id)
        hit.add(text, key)


def merge_hits(into: dict[str, SignatureHit], other: dict[str, SignatureHit]) -> None:
    for sig_id, hit in other.items():
        mine = into.setdefault(sig_id, SignatureHit(sig_id))
        mine.count += hit.count
        room = MAX_LINES_PER_SIGNATURE - len(mine.lines)
        mine.lines.extend(hit.lines[: max(0, room)])


def findings_from_hits(
    hits: dict[str, SignatureHit], where: Callable[[str | None], tuple[str | None, int | None]]
) -> list[Finding]:
    """One Finding per signature; ``where`` maps ``host:pid`` to (node, rank)."""
    findings = []
    for hit in hits.values():
        text, key = hit.lines[0]
        matched = [m for m in match(text) if m.signature.id == hit.id]
        if not matched:
            continue
        evidence = [line for line, _ in hit.lines]
        if hit.count > len(evidence):
            evidence.append(f"(seen {hit.count} times in all)")
        node, rank = where(key)
        findings.append(matched[0].to_finding(evidence, node, rank))
    return findings
