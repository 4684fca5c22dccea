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


def _as_version(document: dict, version: int) -> dict:
    """``document`` as an older nccldoctor wrote it: no summaries before 2, rates without
    units in their names before 3 (the wire's values were Gbit/s all along)."""
    old = {
        k: v for k, v in document.items() if version >= 2 or k not in ("headline", "consistency")
    }
    bandwidth = copy.deepcopy(old.get("bandwidth"))
    if version < 3 and isinstance(bandwidth, dict):
        for row in bandwidth["rows"]:
            row["algbw_gbps"], row["busbw_gbps"] = row.pop("algbw_GBps"), row.pop("busbw_GBps")
        bandwidth["tcp_wire_gbps"] = bandwidth.pop("tcp_wire_Gbitps")
        old["bandwidth"] = bandwidth
    return {**old, "schema_version": version}


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("name", ["healthy-check", "failed-check"])
def test_an_older_document_reads_as_the_current_one(name: str, version: int) -> None:
    """Version 1 had no ``headline`` or ``consistency``, version 2 named rates without units:
    reading one converts it to what to_dict writes now."""
    current = SCENARIOS[name]().to_dict()
    upgraded = upgrade(_as_version(current, version))
    assert upgraded == current and SCHEMA_VERSION == 3
    assert validate_report(upgraded) == []


def test_a_document_without_a_version_is_version_1() -> None:
    current = SCENARIOS["healthy-check"]().to_dict()
    old = _as_version(current, 1)
    del old["schema_version"]
    assert upgrade(old) == current


def test_a_current_document_keeps_what_it_says() -> None:
    document = fixture_document("preflight")
    document["headline"] = {**document["headline"], "answer": "as written"}
    assert upgrade(document)["headline"]["answer"] == "as written"


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
