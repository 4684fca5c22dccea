"""The schema rejects what is wrong, the loader reads old documents and refuses bad ones clearly."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from nccldoctor.report import SCHEMA_VERSION
from nccldoctor.report.load import ReportError, load_document_report, read_document, upgrade
from tests.report.conftest import fixture_document
from tests.report.helpers import report_schema, validate_report
from tests.report.scenarios import SCENARIOS


def test_schema_is_draft_2020_12_and_itself_valid() -> None:
    from jsonschema import Draft202012Validator

    schema = report_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("findings", 0, "severity"), "fatal", "findings/0/severity: 'fatal' is not one of"),
        (("phases", 0, "status"), "done", "phases/0/status: 'done' is not one of"),
        (("bandwidth", "rows", 0, "size_bytes"), "1 MiB", "bandwidth/rows/0/size_bytes"),
        (("hang",), {"phase": "init"}, "hang: 'stuck' is a required property"),
        (("exit_code",), 7, "exit_code: 7 is not one of"),
        (("area_status",), {"bogus": "x"}, "area_status"),
    ],
)
def test_schema_rejects_wrong_values(path: tuple, value: object, expected: str) -> None:
    document = copy.deepcopy(
        fixture_document("failed-check" if path[0] != "bandwidth" else "healthy-check")
    )
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    errors = validate_report(document)
    assert any(expected in e for e in errors), errors


def test_missing_core_key_is_reported() -> None:
    document = fixture_document("preflight")
    del document["findings"]
    assert validate_report(document) == ["<root>: 'findings' is a required property"]


def test_a_version_1_document_gains_the_headline_and_table_a_new_one_has() -> None:
    """Version 1 had no ``headline`` or ``consistency``; reading one builds them as to_dict does."""
    current = SCENARIOS["failed-check"]().to_dict()
    old = {k: v for k, v in current.items() if k not in ("headline", "consistency")}
    upgraded = upgrade({**old, "schema_version": 1})
    assert upgraded == current and SCHEMA_VERSION == 2
    assert upgrade({k: v for k, v in old.items() if k != "schema_version"}) == current
    assert validate_report(upgraded) == []


def test_a_current_document_keeps_what_it_says() -> None:
    document = fixture_document("preflight")
    document["headline"] = {**document["headline"], "answer": "as written"}
    assert upgrade(document)["headline"]["answer"] == "as written"


def test_newer_schema_is_refused_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "new.json"
    path.write_text(json.dumps({**fixture_document("preflight"), "schema_version": 99}))
    with pytest.raises(ReportError, match="schema 99 by a newer nccldoctor"):
        read_document(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "not a JSON report"),
        (b"\xff\xfe garbage", "not a JSON report"),
        (b"[1, 2]", "not a nccldoctor report"),
        (b'{"kind": "check", "findings": [{"id": "x"}]}', "malformed report"),
        (b'{"kind": "check", "nodes": [{"node": "a", "gpu": 3}]}', "malformed report"),
    ],
)
def test_bad_files_are_a_clear_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(ReportError, match=message):
        load_document_report(path)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="cannot read"):
        read_document(tmp_path / "absent.json")


def test_a_real_preflight_of_this_machine_follows_the_schema() -> None:
    from typer.testing import CliRunner

    from nccldoctor.cli.app import app

    result = CliRunner().invoke(app, ["preflight", "--json"])
    assert result.exit_code in (0, 1), result.output
    assert validate_report(json.loads(result.stdout)) == []
