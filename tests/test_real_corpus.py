"""Score `explain` on the corpus of real logs copied out of public threads.

Each ``tests/fixtures/real/<slug>/`` holds ``log.txt`` as the thread had it and ``expect.toml``,
written by reading the log: ``source`` (the thread), and any of ``nccl_version``, ``network``,
``gdrdma``, ``nranks``, ``interfaces``, ``init_complete``, ``category``. An omitted key is not
scored. The score is printed per fact kind and per NCCL minor version; below 95% of all facts
right the test fails. ``known_misses`` lists facts the parser is known not to read yet: they are
scored apart (printed, never dropped) until the parser gets them, and do not count to the target.
"""

from __future__ import annotations

import re
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from checks import link_causes
from nccldoctor.explain import explain
from nccldoctor.model import Finding, Severity
from nccldoctor.ncclog import expand_inputs

CORPUS = Path(__file__).parent / "fixtures" / "real"
FACTS = ("nccl_version", "network", "gdrdma", "nranks", "interfaces", "init_complete", "category",
         "bootstrap")  # fmt: skip
TARGET = 0.95
CASES = sorted(p.parent for p in CORPUS.glob("*/expect.toml"))


# what the other ranks see when one fails: a reader files the log under the cause, not these
CONSEQUENCES = {"collective_timeout_hang", "remote_peer_closed", "other"}


def category(findings: list[Finding]) -> str:
    """The failure category a reader would file the log under: a failing catalogue signature
    that names a cause, else any failing signature, else a failing rule, else a warning
    signature, else healthy; a finding another one explains is never the cause."""

    link_causes(findings)  # a consequence names its cause (explains=), as the report shows it
    causes = [f for f in findings if not f.explained_by]

    def pick(severity: Severity, signature: bool, cause: bool = False) -> str | None:
        for f in causes:
            named = f.severity == severity and (not f.id.startswith("logs.")) == signature
            if named and (not cause or f.category not in CONSEQUENCES):
                return f.category
        return None

    return (
        pick(Severity.FAIL, True, cause=True)
        or pick(Severity.FAIL, True)
        or pick(Severity.FAIL, False)
        or pick(Severity.WARN, True)
        or "healthy"
    )


def facts(case: Path) -> dict[str, Any]:
    extra, findings = explain(expand_inputs([str(case / "log.txt")]), jobs=1, network=True)
    got = {k: extra[k] for k in FACTS if k in extra}
    got["category"] = category(findings)
    got["bootstrap"] = extra.get("nccl", {}).get("bootstrap")
    return got


def same(kind: str, want: Any, got: Any) -> bool:
    if kind == "interfaces":
        return sorted(want) == sorted(got or [])
    if kind == "nccl_version":
        return str(want) == str(got)
    return want == got


def test_corpus_exists() -> None:
    assert CASES, f"no expect.toml under {CORPUS}"
    for case in CASES:
        expect = tomllib.loads((case / "expect.toml").read_text())
        assert expect.get("source", "").startswith("https://"), f"{case.name}: no source URL"
        assert (case / "log.txt").is_file(), case.name
        for kind in expect.get("known_misses", []):
            assert kind in FACTS and kind in expect, f"{case.name}: known miss {kind!r} not a fact"


def minor(expect: dict[str, Any]) -> str:
    """The NCCL minor version a log's facts are counted under ("2.21"), "?" where unknown."""
    m = re.match(r"\d+\.\d+", str(expect.get("nccl_version", "")))
    return m.group() if m else "?"


def test_corpus_score(capsys: pytest.CaptureFixture[str]) -> None:
    right = {k: 0 for k in FACTS}
    total = {k: 0 for k in FACTS}
    by_minor: dict[str, Counter[bool]] = {}
    known: Counter[bool] = Counter()
    misses: list[str] = []
    for case in CASES:
        expect = tomllib.loads((case / "expect.toml").read_text())
        got = facts(case)
        for kind in FACTS:
            if kind not in expect:
                continue
            ok = same(kind, expect[kind], got.get(kind))
            line = f"{case.name}: {kind} expected {expect[kind]!r}, got {got.get(kind)!r}"
            if kind in expect.get("known_misses", []):
                known[ok] += 1
                misses.append(("known miss, now right " if ok else "known miss ") + line)
                continue
            total[kind] += 1
            right[kind] += ok
            by_minor.setdefault(minor(expect), Counter())[ok] += 1
            if not ok:
                misses.append("miss " + line)
    scored = sum(total.values())
    score = sum(right.values()) / scored if scored else 0.0
    with capsys.disabled():
        print(f"\nreal corpus: {len(CASES)} logs, {scored} facts")
        for kind in FACTS:
            if total[kind]:
                print(
                    f"  {kind:14} {right[kind]:3}/{total[kind]:<3} {right[kind] / total[kind]:.0%}"
                )
        print(f"  {'all':14} {sum(right.values()):3}/{scored:<3} {score:.1%}")
        for name in sorted(by_minor, key=lambda m: [int(p) for p in re.findall(r"\d+", m)] or [99]):
            seen = by_minor[name]
            print(f"  NCCL {name:9} {seen[True]:3}/{seen[True] + seen[False]:<3}")
        print(f"  {'known misses':14} {known[True]:3}/{known[True] + known[False]:<3} right now")
        for miss in misses:
            print(f"  {miss}")
    assert score >= TARGET, f"{score:.1%} of facts right (target {TARGET:.0%})"
