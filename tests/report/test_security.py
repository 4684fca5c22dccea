"""XSS payloads render as text; secrets never reach JSON, HTML or JUnit."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from nccldoctor.cli.app import app
from nccldoctor.redact import REDACTED, redact_env, redact_text
from nccldoctor.views.html import render_html
from nccldoctor.views.junit import render_junit
from tests.report.hostile import IMG, PAYLOADS, SCRIPT, SECRETS, URL_PASSWORD, hostile

SECRET_VALUES = (*SECRETS.values(), URL_PASSWORD)


@pytest.fixture(scope="module")
def outputs() -> dict[str, str]:
    report = hostile()
    return {
        "json": json.dumps(report.to_dict()),
        "html": render_html(report),
        "junit": render_junit(report),
    }


@pytest.mark.parametrize("form", ["json", "html", "junit"])
@pytest.mark.parametrize("secret", SECRET_VALUES)
def test_no_secret_in_any_output(outputs: dict[str, str], form: str, secret: str) -> None:
    assert secret not in outputs[form]


def test_secret_names_stay_with_redacted_values(outputs: dict[str, str]) -> None:
    document = json.loads(outputs["json"])
    variables = document["nodes"][0]["env"]["variables"]
    assert {name: variables[name] for name in SECRETS} == dict.fromkeys(SECRETS, REDACTED)
    assert variables["PIP_INDEX_URL"] == f"https://{REDACTED}@pypi.example.org/simple"
    assert document["command"][1] == f"HF_TOKEN={REDACTED}"


def test_payloads_are_escaped_in_the_html(outputs: dict[str, str]) -> None:
    html = outputs["html"]
    for payload in PAYLOADS:
        assert payload not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in html
    # The page's only script is its own, and no element carries an event handler.
    assert len(re.findall(r"<script\b", html)) == 1
    assert not re.search(r"<[^>]*\son\w+\s*=", html)
    assert 'href="javascript:' not in html


def test_payloads_are_text_in_the_junit_xml(outputs: dict[str, str]) -> None:
    root = ET.fromstring(outputs["junit"])
    texts = [el.text or "" for el in root.iter()] + [
        v for el in root.iter() for v in el.attrib.values()
    ]
    assert any(SCRIPT in t for t in texts) and any(IMG in t for t in texts)
    assert "<script>" not in outputs["junit"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("https://u:p@host/x", f"https://{REDACTED}@host/x"),
        ("git+ssh://token@github.com/org/repo", f"git+ssh://{REDACTED}@github.com/org/repo"),
        ("export GITHUB_TOKEN=ghp_abc", f"export GITHUB_TOKEN={REDACTED}"),
        ('{"api_key": "abc", "n": 1}', f'{{"api_key": "{REDACTED}", "n": 1}}'),
        ("NCCL_SOCKET_IFNAME=eth0", "NCCL_SOCKET_IFNAME=eth0"),
        ("user@host: ok", "user@host: ok"),
        (f"HF_TOKEN={REDACTED}", f"HF_TOKEN={REDACTED}"),
    ],
)
def test_redact_text(text: str, expected: str) -> None:
    assert redact_text(text) == expected
    assert redact_text(redact_text(text)) == expected


def test_redact_env_by_name_case_insensitive() -> None:
    env = {
        "hf_token": "a",
        "MyPassword": "b",
        "Authorization": "c",
        "NCCL_DEBUG": "INFO",
        "N": None,
    }
    assert redact_env(env) == {
        "hf_token": REDACTED,
        "MyPassword": REDACTED,
        "Authorization": REDACTED,
        "NCCL_DEBUG": "INFO",
        "N": None,
    }


def test_no_secret_reaches_the_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI prints the Report a run returns through print_report: the redacted document, as
    every other view renders it, not the object with the secrets still in it."""
    from nccldoctor.cli.console import print_report

    print_report(hostile().to_dict(), verbose=True)
    out = capsys.readouterr().out
    assert f"WANDB_API_KEY={REDACTED}" in out and f"https://{REDACTED}@pypi.example.org" in out
    for secret in SECRET_VALUES:
        assert secret not in out


def _mappings(value: Any) -> list[dict[str, Any]]:
    """Every mapping in parsed JSON, at any depth."""
    found = []
    if isinstance(value, dict):
        found.append(value)
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            found += _mappings(item)
    return found


@pytest.mark.invalid_reports  # the planted keys are in no schema
def test_a_document_read_back_shows_no_secret_named_value_in_any_view(tmp_path: Path) -> None:
    """`nccldoctor report FILE` renders the file's document without rebuilding a Report, so its
    redaction is the loader's: a secret-named variable planted in every mapping of a document
    (as a writer that did not count the name as secret would leave it) reaches no view."""
    document = hostile().to_dict()
    planted = {}
    for index, mapping in enumerate(_mappings(document)):
        planted[f"PLANTED_{index}_TOKEN"] = f"plantedSecretValue{index}x"
        mapping[f"PLANTED_{index}_TOKEN"] = planted[f"PLANTED_{index}_TOKEN"]
    variables = document["nodes"][0]["env"]["variables"]
    variables.update(SECRETS)  # the values as they were, before any redaction
    variables["NCCL_SHOWN"] = "visibleValue123"  # the page shows this mapping, so it could leak
    path = tmp_path / "run.json"
    path.write_text(json.dumps(document))
    page, junit = tmp_path / "report.html", tmp_path / "junit.xml"
    shown = CliRunner().invoke(app, ["report", str(path), "-o", str(page), "--junit", str(junit)])
    as_json = CliRunner().invoke(app, ["report", str(path), "--json"])
    outputs = {
        "html": page.read_text(),
        "junit": junit.read_text(),
        "terminal": shown.stdout,
        "json": as_json.stdout,
    }
    assert "visibleValue123" in outputs["html"]
    assert len(planted) > 80  # the nodes' facts, the findings, ranks, phases, summaries ...
    for form, text in outputs.items():
        for secret in (*planted.values(), *SECRETS.values()):
            assert secret not in text, (form, secret)
    variables = json.loads(as_json.stdout)["nodes"][0]["env"]["variables"]
    assert {name: variables[name] for name in SECRETS} == dict.fromkeys(SECRETS, REDACTED)
