"""Two records of one process joined: the policy each field declares, one bound for both ways."""

from __future__ import annotations

from dataclasses import fields

import pytest

from nccldoctor.ncclog.joins import Join
from nccldoctor.ncclog.records import (
    MAX_BACKTRACE,
    MAX_WARNS,
    CommRank,
    LogSet,
    ProcessLog,
    Warn,
)


@pytest.mark.parametrize("record", [CommRank, ProcessLog, LogSet])
def test_every_field_declares_how_it_joins(record):
    assert all(isinstance(f.metadata.get("join"), Join) for f in fields(record))


def _process(version: str, lines: int, backtrace: int, warns: int, tag: str = "") -> ProcessLog:
    p = ProcessLog("h:1", "h", 1, ["a.log"])
    p.nccl_version, p.lines = version, lines
    p.backtrace = [f"{tag} frame {i}" for i in range(backtrace)]
    for i in range(warns):
        p.add_warn(Warn("f.cc", i, None, f"{tag} warn {i}", f"{tag} warn {i}"))
    return p


@pytest.mark.parametrize("way", ["merge", "continue_with"])
def test_a_joined_list_is_bounded_as_its_fold_bounds_it(way):
    first = LogSet(processes={"h:1": _process("2.21.5", 10, 20, 40)})
    second = LogSet(processes={"h:1": _process("2.21.5", 5, 20, 40, tag="second")})
    getattr(first, way)(second)
    p = first.processes["h:1"]
    assert len(p.backtrace) == MAX_BACKTRACE  # 32, not the 64 of the other lists
    assert len(p.warns) == MAX_WARNS
    assert p.lines == 15  # counts add up either way


def test_a_second_source_keeps_the_first_value_and_a_stretch_the_later():
    twin, later = _process("2.21.5", 1, 0, 0), _process("2.22.3", 1, 0, 0)
    merged = LogSet(processes={"h:1": _process("2.21.5", 1, 0, 0)})
    merged.merge(LogSet(processes={"h:1": twin}))
    assert merged.processes["h:1"].nccl_version == "2.21.5"
    read = LogSet(processes={"h:1": _process("2.21.5", 1, 0, 0)})
    read.continue_with(LogSet(processes={"h:1": later}))
    assert read.processes["h:1"].nccl_version == "2.22.3"


def test_a_quoted_line_is_the_first_in_the_file_however_it_was_cut():
    """``netfolds.quote`` keeps the first line of a fact: so does the next stretch's join."""
    first, later = _process("2.21.5", 1, 0, 0), _process("2.21.5", 1, 0, 0)
    first.quotes["bootstrap"] = "first line"
    later.quotes["bootstrap"] = "later line"
    read = LogSet(processes={"h:1": first})
    read.continue_with(LogSet(processes={"h:1": later}))
    assert read.processes["h:1"].quotes == {"bootstrap": "first line"}
