"""NCCL debug-log intelligence: a streaming parser and the summary of what the logs say.

``parse_sources`` gives the per-process records, ``explain_logs`` the summary and headline; the
rules over them are ``checks/logs/``, and :mod:`nccldoctor.explain` joins the two.
"""

from nccldoctor.ncclog.headline import answer, explain_logs
from nccldoctor.ncclog.inputs import InputError, Source, expand_inputs
from nccldoctor.ncclog.parser import LogSet, parse_source, parse_sources

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
