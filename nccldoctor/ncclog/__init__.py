"""NCCL debug-log intelligence: a streaming parser, a summary, cross-rank findings.

``explain(sources)`` is the entry point; ``parse_sources`` gives the raw per-process records.
"""

from nccldoctor.ncclog.explain import answer, explain, explain_logs
from nccldoctor.ncclog.inputs import InputError, Source, expand_inputs
from nccldoctor.ncclog.parser import LogSet, parse_source, parse_sources

__all__ = [
    "InputError",
    "LogSet",
    "Source",
    "answer",
    "expand_inputs",
    "explain",
    "explain_logs",
    "parse_source",
    "parse_sources",
]
