"""The hand-written part of the finding pages: ``docs/finding_refs.toml``.

``[categories.<name>]`` gives every category of :data:`nccldoctor.model.CATEGORIES` a title, a
background paragraph, links and threads; ``[notes]`` gives single finding ids a "What goes
wrong" paragraph.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nccldoctor.model import CATEGORIES

REFS_NAME = "finding_refs.toml"


@dataclass(frozen=True)
class CategoryRef:
    """Background for one finding category, from ``docs/finding_refs.toml``."""

    title: str
    background: str
    see_also: tuple[str, ...] = ()  # markdown links, relative to docs/findings/
    references: tuple[str, ...] = ()  # owner/repo#N or plain text


def _load(docs_dir: Path) -> dict[str, Any]:
    return tomllib.loads((docs_dir / REFS_NAME).read_text(encoding="utf-8"))


def load_notes(docs_dir: Path) -> dict[str, str]:
    """Hand-written notes for single finding ids (``[notes]``: id = markdown)."""
    return {i: text.strip() for i, text in _load(docs_dir).get("notes", {}).items()}


def load_refs(docs_dir: Path) -> dict[str, CategoryRef]:
    """The per-category background table; every category must have exactly one entry."""
    data = _load(docs_dir)
    refs = {
        name: CategoryRef(
            title=entry["title"],
            background=entry["background"].strip(),
            see_also=tuple(entry.get("see_also", ())),
            references=tuple(entry.get("references", ())),
        )
        for name, entry in data.get("categories", {}).items()
    }
    missing = [c for c in CATEGORIES if c not in refs]
    unknown = [c for c in refs if c not in CATEGORIES]
    if missing or unknown:
        raise ValueError(
            f"{REFS_NAME}: categories missing {missing or 'none'}, unknown {unknown or 'none'}"
        )
    return refs
