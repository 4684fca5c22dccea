"""Bad input never crashes a view: any JSON value in any section still renders."""

from __future__ import annotations

import copy
import io
import json
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from nccldoctor.report.answer import answer, banner
from nccldoctor.report.load import ReportError, read_document, report_from_document
from nccldoctor.views.html import render_document_html, render_html
from nccldoctor.views.junit import render_document_junit, render_junit
from nccldoctor.views.terminal import render_terminal
from tests.report.conftest import fixture_document
from tests.strategies import JSON

KEYS = ("findings", "nodes", "nccl", "phases", "bandwidth", "cluster", "ranks", "hang", "mnist",
        "command", "area_status", "watch", "answer", "completed", "verdict", "kind", "nranks",
        "network", "interfaces", "algorithms", "created", "headline", "consistency")  # fmt: skip

# Values shaped like the sections, with wrong types inside (the likelier kind of bad input).
section_like = st.dictionaries(
    st.sampled_from(["rows", "stuck", "nodes", "connections", "rings", "trees", "communicators",
                     "ranks", "size_bytes", "busbw_GBps", "started", "rank", "title", "severity",
                     "evidence", "links", "env", "variables", "gpu", "software", "devices", "columns",
                     "cells", "flags", "banner", "answer"]),
    JSON, max_size=5,
) | st.lists(st.dictionaries(st.sampled_from(["rank", "node", "phase", "status", "started", "ended",
                                               "last_nccl_lines", "title", "severity", "evidence",
                                               "size_bytes", "busbw_GBps", "algbw_GBps"]),
                             JSON, max_size=6), max_size=4)  # fmt: skip

BASE = {name: fixture_document(name) for name in ("healthy-check", "hang-check", "explain-ncclog")}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.sampled_from(sorted(BASE)),
    changes=st.dictionaries(st.sampled_from(KEYS), JSON | section_like, min_size=1, max_size=4),
)
def test_any_section_value_renders(base: str, changes: dict) -> None:
    document = copy.deepcopy(BASE[base])
    document.update(changes)
    assert banner(document) in ("healthy", "warnings", "problems", "hang", "incomplete")
    assert isinstance(answer(document), str)
    assert render_document_html(document).startswith("<!doctype html>")
    ET.fromstring(render_document_junit(document))
    Console(file=io.StringIO()).print(render_terminal(document, verbose=True))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.sampled_from(sorted(BASE)),
    changes=st.dictionaries(st.sampled_from(KEYS), JSON | section_like, min_size=1, max_size=4),
)
def test_the_report_command_path_renders_or_refuses_clearly(base: str, changes: dict) -> None:
    """What `nccldoctor report` does with one file: read it (or a clear ReportError), render
    the document as read; with several (merge): rebuild each Report, render its document."""
    document = copy.deepcopy(BASE[base])
    document.update(changes)
    with tempfile.TemporaryDirectory() as tmp:  # a hypothesis example is not a pytest test
        path = Path(tmp) / "run.json"
        path.write_text(json.dumps(document))
        try:
            read = read_document(path)
        except ReportError:
            read = None
    if read is not None:
        assert render_document_html(read).startswith("<!doctype html>")
        ET.fromstring(render_document_junit(read))
        Console(file=io.StringIO()).print(render_terminal(read, verbose=True))
    try:
        report = report_from_document(document)
    except ReportError:
        return
    assert render_html(report).startswith("<!doctype html>")
    ET.fromstring(render_junit(report))
