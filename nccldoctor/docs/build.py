"""Generate the finding pages in memory, compare them with docs/, and write them."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from nccldoctor.docs import FINDINGS_DIR, finding_doc_path
from nccldoctor.docs.pages import INDEX_NAME, render_check_page, render_index, render_signature_page
from nccldoctor.docs.refs import load_notes, load_refs

DEFAULT_DOCS_DIR = Path(__file__).resolve().parents[2] / "docs"
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def catalogue() -> tuple[list[Any], list[Any]]:
    """The registered checks and the log signatures, by id: every finding id there is."""
    from checks import all_checks
    from checks.signatures import SIGNATURES

    signatures = sorted(SIGNATURES, key=lambda s: s.id)
    catalogued = {s.id for s in signatures}  # registered as rules too, with pages of their own
    checks = [c for c in all_checks() if c.id not in catalogued]
    return checks, signatures


def generate(docs_dir: Path, checks: Iterable[Any], signatures: Iterable[Any]) -> dict[str, str]:
    """Every generated file, as ``{path relative to docs_dir: text}``."""
    checks, signatures = list(checks), list(signatures)
    refs = load_refs(docs_dir)
    pages: dict[str, str] = {}
    for entry in [*checks, *signatures]:
        own_page = finding_doc_path(entry.id) == f"{FINDINGS_DIR}/{entry.id}.md"
        if not _SAFE_ID.match(entry.id) or not own_page:
            raise ValueError(f"finding id {entry.id!r} cannot name a page")
        path = f"findings/{entry.id}.md"
        if path in pages or entry.id == INDEX_NAME.removesuffix(".md"):
            raise ValueError(f"finding id {entry.id!r} is used twice")
        pages[path] = ""
    notes = load_notes(docs_dir)
    unknown = sorted(i for i in notes if f"findings/{i}.md" not in pages)
    if unknown:
        raise ValueError(f"finding_refs.toml has notes for ids nothing registers: {unknown}")
    for c in checks:
        related = [s for s in signatures if s.category == c.category]
        pages[f"findings/{c.id}.md"] = render_check_page(c, refs, related, notes.get(c.id, ""))
    # "Checks that look for this before a job runs": the node and cluster rules, not the rules
    # over a run's, a job's or the logs' own records.
    beforehand = [c for c in checks if c.scope in ("node", "cluster")]
    for s in signatures:
        related = [c for c in beforehand if c.category == s.category]
        pages[f"findings/{s.id}.md"] = render_signature_page(s, refs, related, notes.get(s.id, ""))
    pages[f"findings/{INDEX_NAME}"] = render_index(checks, signatures, refs)
    return pages


def stale_files(docs_dir: Path, pages: Mapping[str, str]) -> list[str]:
    """Generated files that are missing, differ, or should no longer exist (sorted)."""
    stale = [
        path
        for path, text in pages.items()
        if not (docs_dir / path).is_file() or (docs_dir / path).read_text(encoding="utf-8") != text
    ]
    findings = docs_dir / "findings"
    if findings.is_dir():
        stale += [
            f"findings/{p.name}" for p in findings.glob("*.md") if f"findings/{p.name}" not in pages
        ]
    return sorted(stale)


def write_pages(docs_dir: Path, pages: Mapping[str, str]) -> list[str]:
    """Bring ``docs_dir`` up to date; returns the files written or removed."""
    changed = stale_files(docs_dir, pages)
    for path in changed:
        target = docs_dir / path
        if path in pages:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(pages[path], encoding="utf-8")
        else:
            target.unlink()
    return changed
