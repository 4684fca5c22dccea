"""Probe: container (initial skeleton; grows in issue 2)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from nccldoctor.facts import ContainerFacts


def probe(root: Path, env: Mapping[str, str]) -> ContainerFacts:
    return ContainerFacts()
