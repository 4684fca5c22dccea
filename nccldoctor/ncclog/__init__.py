"""NCCL debug-log intelligence: a streaming parser and the summary of what the logs say.

``parse_sources`` gives the per-process records, ``explain_logs`` the summary and headline; the
rules over them are ``checks/logs/``, and :mod:`nccldoctor.explain` joins the two. The names
below are loaded when first used: a caller that only names its inputs (the ticket) does not
compile the parser's tables.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nccldoctor.ncclog.headline import answer, explain_logs
    from nccldoctor.ncclog.inputs import InputError, Source, expand_inputs
    from nccldoctor.ncclog.records import LogSet
    from nccldoctor.ncclog.sources import parse_source, parse_sources

_MODULE_OF = {
    "InputError": "inputs",
    "LogSet": "records",
    "Source": "inputs",
    "answer": "headline",
    "expand_inputs": "inputs",
    "explain_logs": "headline",
    "parse_source": "sources",
    "parse_sources": "sources",
}
__all__ = [
    "InputError",
    "LogSet",
    "Source",
    "answer",
    "expand_inputs",
    "explain_logs",
    "parse_source",
    "parse_sources",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
