"""Probe: network (initial skeleton; grows in issue 2)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from nccldoctor.facts import NetworkFacts


def probe(root: Path, env: Mapping[str, str], master: str | None) -> NetworkFacts:
    return NetworkFacts()
