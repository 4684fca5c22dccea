"""Which lines a signature catalogue recognised, recorded while the parser reads them.

The parser knows no catalogue: its caller hands it an :data:`Identify` (text -> the most specific
signature id, or None), and every WARN and every line that is not an NCCL debug line (PyTorch,
the launcher, the app) goes through it. Matching while parsing keeps memory constant (the app's
own lines are never stored); parse workers record only ids and text, which pickle cheaply. The
findings are made by the rules (``checks/logs/``), not here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

MAX_LINES_PER_SIGNATURE = 5

Identify = Callable[[str], str | None]


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


def record(
    hits: dict[str, SignatureHit], identify: Identify, text: str, key: str | None, line: str = ""
) -> bool:
    """Identify ``text`` (a WARN's message, or a whole line) and remember ``line`` under the most
    specific signature it matched (a generic twin would only repeat it); True when one did."""
    try:
        sig_id = identify(text)
    except Exception:  # a broken catalogue entry must not stop the parse
        return False
    if sig_id:
        hits.setdefault(sig_id, SignatureHit(sig_id)).add(text, line or text, key)
    return bool(sig_id)


def may_match(identify: Identify, text: str) -> bool:
    """Whether any line of ``text`` (many lines at once) may be recognised: the catalogue's own
    gate (``identify.gate``) decides when it offers one, so lines it cannot match skip the
    per-line call. The gate must be blind to digits: the parser asks it about the shapes of
    application lines (every digit as 0), once per shape."""
    gate = getattr(identify, "gate", None)
    return True if gate is None else bool(gate(text))


def merge_hits(into: dict[str, SignatureHit], other: dict[str, SignatureHit]) -> None:
    for sig_id, hit in other.items():
        mine = into.setdefault(sig_id, SignatureHit(sig_id))
        mine.count += hit.count
        room = MAX_LINES_PER_SIGNATURE - len(mine.lines)
        mine.lines.extend(hit.lines[: max(0, room)])
