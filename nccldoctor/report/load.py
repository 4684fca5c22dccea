"""Reading report documents back: any version this tool knows, bad input as a clear error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nccldoctor.report.document import SCHEMA_VERSION, Report, with_summaries


class ReportError(ValueError):
    """A file that is not a report this nccldoctor can read; the message says why."""


def read_document(path: str | Path) -> dict[str, Any]:
    """The JSON document in ``path``, checked to be a report of a schema version we read."""
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReportError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportError(f"{path}: not a JSON report: {exc}") from exc
    if not isinstance(document, dict) or "kind" not in document:
        raise ReportError(f"{path}: not a nccldoctor report (no 'kind' key)")
    return upgrade(document, source=str(path))


def upgrade(document: dict[str, Any], source: str = "report") -> dict[str, Any]:
    """``document`` in the current schema.

    Schema history (docs/report.md): version 1 is the first; version 2 adds ``headline`` and
    ``consistency``, built here for an older document. A document without ``schema_version``
    predates the key and is read as version 1. When a key changes meaning, SCHEMA_VERSION goes up
    and a step from the old version is added here, so old reports load.
    """
    version = document.get("schema_version", 1)
    if not isinstance(version, int) or version < 1:
        raise ReportError(f"{source}: schema_version {version!r} is not a positive integer")
    if version > SCHEMA_VERSION:
        raise ReportError(
            f"{source}: written with report schema {version} by a newer nccldoctor; "
            f"this one reads up to {SCHEMA_VERSION}: upgrade nccldoctor"
        )
    if version < 2:
        document = with_summaries(document)
    return {**document, "schema_version": SCHEMA_VERSION}


def report_from_document(document: dict[str, Any], source: str = "report") -> Report:
    """The Report of a document (raises ReportError when it is malformed)."""
    try:
        return Report.from_dict(document)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ReportError(f"{source}: malformed report: {type(exc).__name__}: {exc}") from exc


def load_document_report(path: str | Path) -> Report:
    """Read, upgrade and rebuild the Report in ``path`` (raises ReportError on bad input)."""
    return report_from_document(read_document(path), source=str(path))
