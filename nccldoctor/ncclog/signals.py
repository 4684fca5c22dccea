"""The one door from the parser to the known-signature catalogue (``checks/signatures.py``).

Every WARN and every line that is not an NCCL debug line (PyTorch, the launcher, the app) goes
through :func:`match` (the catalogue compiles itself on first use). Parse workers only record which lines matched (plain text pickles
cheaply); the main process turns those lines into Findings with :func:`findings_from_hits`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from checks.signatures import match_line
from nccldoctor.model import Finding

MAX_LINES_PER_SIGNATURE = 5


def match(text: str) -> list[Any]:
    """The catalogue's matches for ``text`` (``SignatureMatch`` objects), most specific first."""
    try:
        return match_line(text)
    except Exception:  # a broken catalogue entry must not stop the parse
        return []


@dataclass
class SignatureHit:
    """One signature seen in the logs: the first lines that matched, and how often."""

    id: str
    count: int = 0
    # (the text matched, the whole line for evidence, host:pid or None)
    lines: list[tuple[str, str, str | None]] = field(default_factory=list)

    def add(self, text: str, line: str, key: str | None) -> None:
        self.count += 1
        if len(self.lines) < MAX_LINES_PER_SIGNATURE:
            self.lines.append((text, line, key))

    @property
    def keys(self) -> set[str]:
        return {key for _, _, key in self.lines if key}


def record(hits: dict[str, SignatureHit], text: str, key: str | None, line: str = "") -> bool:
    """Match ``text`` (a WARN's message, or a whole line) and remember ``line`` under the most
    specific signature it matched (a generic twin would only repeat it); True when one did."""
    found = match(text)
    if found:
        sig_id = found[0].signature.id
        hits.setdefault(sig_id, SignatureHit(sig_id)).add(text, line or text, key)
    return bool(found)


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
        text, _, key = hit.lines[0]
        matched = [m for m in match(text) if m.signature.id == hit.id]
        if not matched:
            continue
        evidence = [line.strip() for _, line, _ in hit.lines]
        if hit.count > len(evidence):
            evidence.append(f"(seen {hit.count} times in all)")
        node, rank = where(key)
        findings.append(matched[0].to_finding(evidence, node, rank))
    return findings
