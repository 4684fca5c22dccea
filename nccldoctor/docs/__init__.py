"""The field guide's finding pages, generated from the check registry and the signature catalogue.

``python -m nccldoctor.docs`` writes one page per finding id, ``docs/findings/<id>.md``, and the
index ``docs/findings/README.md`` (checks grouped by area, log signatures by category). The pages
are made from what the code registers (each check's id, area, category, scope and docstring;
each signature's pattern, cause, fix and references) plus the per-category background in
``docs/finding_refs.toml``, so they cannot drift: ``--check`` regenerates them in memory and
exits 1, naming the stale files, when ``docs/`` differs. Output is deterministic (sorted, no
paths or dates), so the committed tree is the expected output.

Stable anchors: the index has ``<a id="area-<area>">`` and ``<a id="category-<category>">``;
each page's headings are fixed words ("What it checks", "Cause", "Fix", "Background: ...").
"""

from __future__ import annotations

FINDINGS_DIR = "docs/findings"
CRASHED_SUFFIX = ".crashed"  # the runner's id for a check that raised (checks/__init__.py)


def finding_doc_path(finding_id: str) -> str:
    """The guide page of ``finding_id``, relative to the repository root.

    A ``<check id>.crashed`` finding (a check that raised) points at its check's page; an id
    that is only ``<area>.crashed`` (``run.crashed``) is a finding of its own.
    """
    check_id = finding_id.removesuffix(CRASHED_SUFFIX)
    return f"{FINDINGS_DIR}/{check_id if '.' in check_id else finding_id}.md"
