"""What literal text a regex always contains, and one regex that looks for many literals at once:
the signature catalogue's load-time check of each prefilter and its fast gate over every line."""

from __future__ import annotations

import re
from re import _parser as sre_parse  # the stdlib regex parser (module sre_parse before 3.11)
from typing import Any

# Characters ordered from most to least frequent in healthy NCCL INFO output (measured on the
# bench/signatures.py corpus). The gate looks for each prefilter's tail starting at its rarest
# character: sre skips positions whose character starts no gate literal, so rare first characters
# make the gate ~3x faster. Any substring of a prefilter is a correct gate; this only tunes speed.
_FREQUENT_CHARS = " 01noea.4:C7tNd-I/[]s2clri9LmO5F86Bf3|pg>Rku,xhbvAETDU_MSPy=<G{};wH()"
_GATE_MIN = 8


def gate_literal(prefilter: str) -> str:
    """The tail of ``prefilter``'s longest run without digits that starts at its rarest
    character (at least 8 characters). Without digits, the gate is blind to them: the parser
    asks it once per shape of a line (its digits as 0, ncclog/parser.py)."""
    prefilter = max(re.split(r"[0-9]+", prefilter), key=len)
    if len(prefilter) <= _GATE_MIN:
        return prefilter

    def rarity(char: str) -> int:
        index = _FREQUENT_CHARS.find(char)
        return len(_FREQUENT_CHARS) if index < 0 else index

    start = min(range(len(prefilter) - _GATE_MIN + 1), key=lambda i: (-rarity(prefilter[i]), i))
    return prefilter[start:]


def trie_regex(words: set[str]) -> str:
    """One regex matching any of ``words``, with common prefixes merged: sre then decides at each
    position from the first character which few alternatives to try (about 2x faster than a flat
    alternation of 90 literals in bench/signatures.py)."""
    trie: dict[str, dict] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def emit(node: dict[str, dict]) -> str:
        if "" in node:  # a whole word ends here: the gate needs no more (longer words imply it)
            return ""
        alternatives = [re.escape(c) + emit(child) for c, child in sorted(node.items())]
        return alternatives[0] if len(alternatives) == 1 else f"(?:{'|'.join(alternatives)})"

    return emit(trie) or r"(?!)"


# --- what a regex always contains -------------------------------------------------------------
# Walk the parsed regex (sre's tree). A "run" is text made of consecutive LITERAL nodes that every
# match contains; zero-width assertions do not break a run. A prefilter is implied when it lies in
# such a run, or in every alternative of a branch that every match passes through.


_REPEATS = (sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT, sre_parse.POSSESSIVE_REPEAT)


def mandatory_runs(items: Any) -> tuple[list[str], list[Any]]:
    """The mandatory literal runs of a sequence, and its mandatory sub-branches."""
    runs: list[str] = []
    branches: list[Any] = []
    current: list[str] = []

    def flush() -> None:
        if current:
            runs.append("".join(current))
            current.clear()

    def walk(seq: Any) -> None:
        for op, av in seq:
            if op is sre_parse.LITERAL:
                current.append(chr(av))
            elif op is sre_parse.SUBPATTERN:
                walk(av[-1])  # a plain group is mandatory: its text continues the run
            elif op is sre_parse.AT:
                continue
            elif op in _REPEATS and av[0] >= 1:
                flush()
                inner_runs, inner_branches = mandatory_runs(av[2])
                runs.extend(inner_runs)
                branches.extend(inner_branches)
            elif op is sre_parse.BRANCH:
                flush()
                branches.append(av[1])
            else:
                flush()

    walk(items)
    flush()
    return runs, branches


def implied(runs: list[str], branches: list[Any], literal: str) -> bool:
    """Whether ``literal`` is in every match of a sequence whose mandatory runs and branches
    (``mandatory_runs``) these are."""
    return any(literal in run for run in runs) or any(
        all(implied(*mandatory_runs(alternative), literal) for alternative in alternatives)
        for alternatives in branches
    )
