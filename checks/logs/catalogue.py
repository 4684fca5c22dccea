"""The log-signature catalogue's entries as rules of scope ``logs`` (each registered by its own
id), and the NCCL WARN lines no signature explains.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

from checks import Check, Problem, check, register
from checks.signatures import SIGNATURES, Signature, SignatureMatch, match_line
from nccldoctor.model import Severity
from nccldoctor.ncclog.summary import LogReading

# --- the catalogue of known signatures -----------------------------------------------------------


def _signature_rule(signature: Signature) -> Callable[[LogReading], Problem | None]:
    def rule(reading: LogReading) -> Problem | None:
        if signature.only_from:
            return _claimed(signature, reading)
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


def _claimed(signature: Signature, reading: LogReading) -> Problem | None:
    """A signature of some files' lines only: the parser filed a WARN by its message, which
    names no file, under a twin whose ``not_from`` leaves such lines to this one; it takes the
    lines of any signature that its pattern matches and its files printed."""
    lines = [
        h
        for hit in reading.logs.signatures.values()
        for h in hit.lines
        if signature.describes(h[1]) and signature.prefilter in h[0]
        and re.search(signature.pattern, h[0])
    ]  # fmt: skip
    if not lines:
        return None
    text, _, key = lines[0]
    found = re.search(signature.pattern, text)
    groups = {k: v for k, v in found.groupdict().items() if v is not None} if found else {}
    proc = reading.logs.processes.get(key or "")
    return SignatureMatch(signature, groups).to_problem(
        [line.strip() for _, line, _ in lines], proc.host if proc else None,
        proc.rank if proc else None,
    )  # fmt: skip


def _register_signatures(signatures: Iterable[Signature]) -> None:
    for sig in signatures:
        rule = _signature_rule(sig)
        register(Check(sig.id, "logs", sig.category, "logs", rule, sig.title, sig.explains))


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
