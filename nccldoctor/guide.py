"""The field guide as the package carries it: the pages of docs/, a finding's page by its id.

The wheel ships docs/ as ``nccldoctor/guide`` (pyproject's force-include); a source checkout
reads docs/ itself. Every view may read a page: a report names where to read more about each
finding, and the HTML page carries that text folded, so it stays one self-contained file.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import nccldoctor

_GENERATED = re.compile(r"\A<!--.*?-->\s*", re.DOTALL)  # the generator's do-not-edit line
_FINDING_ID = re.compile(r"^[a-z0-9_]+(?:\.[a-z0-9_-]+)+$")  # never a path


@cache
def guide_dir() -> Path | None:
    """``nccldoctor/guide`` in an installed wheel, ``docs/`` in a source checkout; None when
    neither holds the findings' index (a copy of the package without its docs)."""
    package = Path(nccldoctor.__file__).resolve().parent
    for candidate in (package / "guide", package.parent / "docs"):
        if (candidate / "findings" / "README.md").is_file():
            return candidate
    return None


def finding_ids() -> list[str]:
    """Every finding id that has a page, sorted."""
    directory = guide_dir()
    if directory is None:
        return []
    return sorted(p.stem for p in (directory / "findings").glob("*.md") if p.stem != "README")


def page_path(finding_id: str) -> Path | None:
    """The page of ``finding_id``; None when it has none (or the id could name a path)."""
    directory = guide_dir()
    if directory is None or not _FINDING_ID.match(finding_id):
        return None
    path = directory / "findings" / f"{finding_id}.md"
    return path if path.is_file() else None


@cache
def finding_page(finding_id: str) -> str | None:
    """The page's Markdown without the generator's comment; None when there is no page."""
    path = page_path(finding_id)
    if path is None:
        return None
    try:
        return _GENERATED.sub("", path.read_text(encoding="utf-8"), count=1)
    except (OSError, UnicodeDecodeError):
        return None
