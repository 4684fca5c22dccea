"""The log-signature catalogue's entries as rules of scope ``logs`` (each registered by its own
id), and the NCCL WARN lines no signature explains.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from checks import Check, Problem, check, register
from checks.signatures import SIGNATURES, Signature, match_line
from nccldoctor.model import Severity
from nccldoctor.ncclog.summary import LogReading

# --- the catalogue of known signatures -----------------------------------------------------------


def _signature_rule(signature: Signature) -> Callable[[LogReading], Problem | None]:
    def rule(reading: LogReading) -> Problem | None:
        hit = reading.logs.signatures.get(signature.id)
        if hit is None:
            return None
        lines = [h for h in hit.lines if signature.describes(h[1])]
        if not lines:
            return None
        text, _, key = lines[0]
        matched = [m for m in match_line(text) if m.signature.id == signature.id]
        if not matched:
            return None
        evidence = [line.strip() for _, line, _ in lines]
        if len(lines) == len(hit.lines) and hit.count > len(evidence):
            evidence.append(f"(seen {hit.count} times in all)")
        proc = reading.logs.processes.get(key or "")
        return matched[0].to_problem(
            evidence, proc.host if proc else None, proc.rank if proc else None
        )

    return rule


def _register_signatures(signatures: Iterable[Signature]) -> None:
    for sig in signatures:
        register(Check(sig.id, "logs", sig.category, "logs", _signature_rule(sig), sig.title))


_register_signatures(SIGNATURES)


@check("logs.nccl-warning", area="logs", category="other", scope="logs")
def unexplained_warnings(reading: LogReading) -> Iterator[Problem]:
    """NCCL printed WARN lines that no known signature explains (one finding per process)."""
    for p in reading.logs.processes.values():
        plain = [w for w in p.warns if not match_line(w.msg)]
        if not plain:
            continue
        evidence = []
        for w in plain[:6]:
            where = f"{w.file}:{w.line}" + (f" ({w.func})" if w.func else "") if w.file else ""
            evidence.append(f"{where} {w.msg}".strip())
            evidence.extend(f"  {h}" for h in w.hints[:2])
        yield Problem(
            Severity.WARN,
            f"NCCL printed {len(plain)} warning(s) in {p.key}",
            evidence,
            "Read the warnings (and the HINT lines under them); rerun with NCCL_DEBUG=INFO for context.",
            node=p.host,
            rank=p.rank,
        )
