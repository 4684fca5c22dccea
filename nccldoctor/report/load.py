"""Reading report documents back: any version this tool knows, bad input as a clear error."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from nccldoctor.jsondoc import parse
from nccldoctor.limits import MAX_JSON_BYTES
from nccldoctor.redact import SEAL_KEY, redact_document, sealed
from nccldoctor.report.document import (
    NOTES_KEY,
    SCHEMA_VERSION,
    SUMMARY_KEYS,
    Report,
    document_exit_code,
    document_verdict,
    with_summaries,
)
from nccldoctor.report.shape import items, section
from nccldoctor.units import format_bytes

# Version 3 put the unit in every rate's name; the values of version 2 stay as they were: the
# TCP probe always measured Gbit/s (cluster/agent/tcpprobe.py), only its name said GB/s.
_RENAMED_IN_3 = {"algbw_gbps": "algbw_GBps", "busbw_gbps": "busbw_GBps"}
_WIRE_BEFORE_3, _WIRE = "tcp_wire_gbps", "tcp_wire_Gbitps"
# What a bandwidth row needs to be drawn and tabled; a row without one is shown with a note.
_ROW_FIELDS = ("size_bytes", "algbw_GBps", "busbw_GBps")


class ReportError(ValueError):
    """A file that is not a report this nccldoctor can read; the message says why."""


def read_document(path: str | Path) -> dict[str, Any]:
    """The JSON document in ``path``, checked to be a report of a schema version we read and
    redacted: what the views render. A file this version wrote and nobody changed since
    (``sealed``) is redacted already; any other is redacted again, whole."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_JSON_BYTES + 1)  # a longer file is never read whole, nor parsed
        if len(data) > MAX_JSON_BYTES:
            raise ValueError(f"of over {MAX_JSON_BYTES >> 20} MiB")
        document = parse(data.decode("utf-8"))
    except OSError as exc:
        raise ReportError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportError(f"{path}: not a JSON report: {exc}") from exc
    except ValueError as exc:  # within the bounds of every document read (jsondoc.parse)
        raise ReportError(f"{path}: not read: a JSON document {exc}") from exc
    if not isinstance(document, dict) or "kind" not in document:
        raise ReportError(f"{path}: not a nccldoctor report (no 'kind' key)")
    document.pop(SEAL_KEY, None)  # the file's, not the document's: write_report seals anew
    if not sealed(data):  # before upgrade: rebuilt summaries quote what it leaves
        document = _as_its_findings_say(redact_document(document))
    return upgrade(document, source=str(path))


def _as_its_findings_say(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` with the verdict and exit code its findings and ``completed`` give, and
    its summaries rebuilt when it stated others: a stranger's file said healthy, exit 0, over
    300k failing findings, and its banner said so."""
    stated = {"verdict": document_verdict(document), "exit_code": document_exit_code(document)}
    if all(document.get(key) == value for key, value in stated.items()):
        return document
    return {k: v for k, v in document.items() if k not in SUMMARY_KEYS} | stated


def upgrade(document: dict[str, Any], source: str = "report") -> dict[str, Any]:
    """``document`` in the current schema, with ``load_notes`` saying what could not be read.

    Schema history (docs/report.md): version 1 is the first; version 2 adds ``headline`` and
    ``consistency``; version 3 names every rate with its unit (``busbw_GBps``,
    ``tcp_wire_Gbitps``). An older document is converted and its summaries rebuilt; one without
    ``schema_version`` predates the key and is read as version 1. A newer one is read for what
    this version knows, with a note. When a key changes meaning, SCHEMA_VERSION goes up and a
    step from the old version is added here, so old reports load.
    """
    version = document.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ReportError(f"{source}: schema_version {version!r} is not a positive integer")
    notes = []
    if version > SCHEMA_VERSION:
        notes.append(
            f"written by nccldoctor {document.get('tool_version', '?')} with report schema "
            f"{version}; this one reads up to {SCHEMA_VERSION}: shown is what it knows "
            "(upgrade nccldoctor to see the rest)"
        )
    if version < 3:
        document = with_summaries(_units_in_names(document))
    elif any(key not in document for key in SUMMARY_KEYS):  # written by hand or cut short
        document = with_summaries(document)
    unknown = sorted(str(k) for k in document if k not in known_keys())
    if unknown:
        notes.append(f"keys this nccldoctor does not know, not shown: {', '.join(unknown)}")
    notes += _row_notes(document)
    upgraded = {**document, "schema_version": SCHEMA_VERSION}
    if notes:
        upgraded[NOTES_KEY] = notes
    return upgraded


def _units_in_names(document: dict[str, Any]) -> dict[str, Any]:
    bandwidth = section(document, "bandwidth")
    if not bandwidth:
        return document
    converted = {k: v for k, v in bandwidth.items() if k != _WIRE_BEFORE_3}
    if isinstance(bandwidth.get("rows"), list):
        converted["rows"] = [
            {_RENAMED_IN_3.get(k, k): v for k, v in row.items()} if isinstance(row, dict) else row
            for row in bandwidth["rows"]
        ]
    if _WIRE_BEFORE_3 in bandwidth:
        converted[_WIRE] = bandwidth[_WIRE_BEFORE_3]
    return {**document, "bandwidth": converted}


def _row_notes(document: dict[str, Any]) -> list[str]:
    """ "bandwidth row 3 (64 MiB) has no busbw_GBps: shown as unknown" for each such row."""
    notes = []
    for index, row in enumerate(items(section(document, "bandwidth").get("rows")), 1):
        missing = [f for f in _ROW_FIELDS if row.get(f) is None]
        if missing:
            size = row.get("size_bytes")
            where = f" ({format_bytes(size)})" if size is not None else ""
            notes.append(
                f"bandwidth row {index}{where} has no {', '.join(missing)}: shown as unknown"
            )
    return notes


@cache
def known_keys() -> frozenset[str]:
    """The top-level keys the shipped schema describes."""
    text = resources.files("nccldoctor.report").joinpath("schema.json").read_text("utf-8")
    return frozenset(json.loads(text)["properties"])


def report_from_document(document: dict[str, Any], source: str = "report") -> Report:
    """The Report of a document (raises ReportError when it is malformed)."""
    try:
        return Report.from_dict(document)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ReportError(f"{source}: malformed report: {type(exc).__name__}: {exc}") from exc


def load_document_report(path: str | Path) -> Report:
    """Read, upgrade and rebuild the Report in ``path`` (raises ReportError on bad input)."""
    return report_from_document(read_document(path), source=str(path))
