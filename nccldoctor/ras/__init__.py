"""NCCL RAS output as data: ``ncclras``'s own output, text and ``-f json`` (``status.py``), and
NCCL 2.31+'s diagnostics reports (``NCCL DIAG`` lines, ``diag.py``), read into the records of
``records.py``. It judges nothing: the rules are ``checks/ras/``."""

from nccldoctor.ras.records import (
    CommGroup,
    DiagReport,
    DiagResult,
    Entry,
    Inventory,
    Peer,
    RasReading,
    RasReport,
)
from nccldoctor.ras.status import is_json_document, parse_json, parse_text

__all__ = [
    "CommGroup",
    "DiagReport",
    "DiagResult",
    "Entry",
    "Inventory",
    "Peer",
    "RasReading",
    "RasReport",
    "is_json_document",
    "parse_json",
    "parse_text",
]
