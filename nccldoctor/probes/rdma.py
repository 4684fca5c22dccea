"""Probe: rdma (initial skeleton; grows in issue 2)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from nccldoctor.facts import RdmaFacts


def probe(root: Path, env: Mapping[str, str]) -> RdmaFacts:
    return RdmaFacts()
