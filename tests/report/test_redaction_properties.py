"""A secret planted anywhere in a report reaches no view (hypothesis).

Every string of a report document is a place a secret can be: at its start, in its middle or at
its end, in every form a secret is written (``NAME=value``, ``name: value``, ``--name value``,
``Authorization: Bearer value``, a URL's credentials), and every mapping can hold a secret-named
key whose value is any JSON type. The document is read back as `nccldoctor report` reads a file
it did not write, and its JSON, HTML, JUnit and terminal views must not hold the value.
"""

from __future__ import annotations

import copy
import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nccldoctor.cli.cleanterm import CleanConsole
from nccldoctor.redact import REDACTED, SECRET_WORDS, redact_text, redact_value
from nccldoctor.report import write_report
from nccldoctor.report.load import read_document
from nccldoctor.views.html import render_document_html
from nccldoctor.views.junit import render_document_junit
from nccldoctor.views.terminal import render_terminal
from tests.report.hostile import hostile

REPO = Path(__file__).resolve().parents[2]
BASE = hostile().to_dict()
Where = tuple[Any, ...]


def _places(value: Any, path: Where = ()) -> tuple[list[Where], list[Where], list[Where]]:
    """The paths of every string, every mapping and every list in ``value``."""
    strings: list[Where] = []
    mappings: list[Where] = []
    lists: list[Where] = []
    if isinstance(value, str):
        strings.append(path)
    elif isinstance(value, dict):
        mappings.append(path)
        for key, item in value.items():
            found = _places(item, (*path, key))
            strings, mappings, lists = strings + found[0], mappings + found[1], lists + found[2]
    elif isinstance(value, list):
        lists.append(path)
        for index, item in enumerate(value):
            found = _places(item, (*path, index))
            strings, mappings, lists = strings + found[0], mappings + found[1], lists + found[2]
    return strings, mappings, lists


STRINGS, MAPPINGS, LISTS = _places(BASE)


def _at(document: Any, path: Where) -> Any:
    for step in path:
        document = document[step]
    return document


def _any_case(word: str) -> st.SearchStrategy[str]:
    return st.tuples(*(st.sampled_from([c.lower(), c.upper()]) for c in word)).map("".join)


# A name holding a secret word anywhere in it, in any case: PASSWORD, hf_token, MyApiKey.
NAMES = st.builds(
    lambda before, word, after: before + word + after,
    st.sampled_from(["", "HF_", "my", "db-", "x.", "AWS_"]),
    st.sampled_from(SECRET_WORDS).flatmap(_any_case),
    st.sampled_from(["", "_VALUE", "s", "-file", "2"]),
)
# The value: unique text no report holds, so finding it anywhere is a leak.
VALUES = st.text("abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789", min_size=6).map(
    lambda tail: f"Zq9{tail}"
)
# Every way a secret is written in text.
FORMS = (
    "{name}={value}",
    "{name}: {value}",
    '"{name}": "{value}"',
    "'{name}': '{value}'",
    '{name}="{value}"',
    "--{name}={value}",
    "--{name} {value}",
    "-{name} {value}",
    "export {name}={value}",
    "Authorization: Bearer {value}",
    "authorization: basic {value}",
    "Bearer {value}",
    "https://user:{value}@example.org/x",
    "git+ssh://{value}@github.com/org/repo",
)


@st.composite
def planted(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """The base document with one secret planted somewhere, and the secret's text."""
    document = copy.deepcopy(BASE)
    name, value = draw(NAMES), draw(VALUES)
    where = draw(st.sampled_from(["text", "mapping", "argv"]))
    if where == "text":
        path = draw(st.sampled_from(STRINGS))
        text = _at(document, path)
        cut = draw(st.sampled_from([0, len(text) // 2, len(text)]))
        secret = draw(st.sampled_from(FORMS)).format(name=name, value=value)
        # where text ends a word, the secret starts after a space, as it would be written; the
        # text after it may follow at once (the value then runs on into it)
        before = " " if cut and not text[cut - 1].isspace() else ""
        after = draw(st.sampled_from([" ", "", ",", "; ", "\n", "\t"]))
        _at(document, path[:-1])[path[-1]] = f"{text[:cut]}{before}{secret}{after}{text[cut:]}"
    elif where == "mapping":
        number = draw(st.integers(10**11, 10**12))
        value = str(number)
        item = draw(st.sampled_from([value, number, [value], {"inner": value}, [[number]]]))
        _at(document, draw(st.sampled_from(MAPPINGS)))[name] = item
    else:
        items = _at(document, draw(st.sampled_from(LISTS)))
        items.insert(draw(st.integers(0, len(items))), f"--{name}")
        items.insert(items.index(f"--{name}") + 1, value)
    return document, value


def _views(document: dict[str, Any]) -> dict[str, str]:
    terminal = io.StringIO()
    console = CleanConsole(file=terminal, width=200, markup=False, highlight=False, emoji=False)
    console.print(render_terminal(document, verbose=True))
    return {
        "json": json.dumps(document),
        "html": render_document_html(document),
        "junit": render_document_junit(document),
        "terminal": terminal.getvalue(),
    }


@pytest.mark.invalid_reports  # the planted keys are in no schema
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planted())
def test_a_secret_planted_anywhere_reaches_no_view(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[dict[str, Any], str]
) -> None:
    """The document read back as `nccldoctor report` reads a file this version did not write."""
    document, value = case
    path = tmp_path_factory.mktemp("planted") / "run.json"
    path.write_text(json.dumps(document, indent=1))
    for form, text in _views(read_document(path)).items():
        assert value not in text, form


@given(planted())
@settings(max_examples=50, deadline=None)
def test_redacting_twice_changes_nothing(case: tuple[dict[str, Any], str]) -> None:
    once = redact_value(case[0])
    assert redact_value(once) == once


@given(st.lists(st.one_of(st.text(max_size=20), NAMES, VALUES, st.sampled_from(FORMS))))
@example(["PASSWORD=", "Authorization: Bearer <redacted>", "x"])
def test_redact_text_is_idempotent(parts: list[str]) -> None:
    text = " ".join(parts)
    once = redact_text(text)
    assert redact_text(once) == once


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("PASSWORD=x", f"PASSWORD={REDACTED}"),
        ("password=x y", f"password={REDACTED} y"),
        ("token: x", f"token: {REDACTED}"),
        ("SECRET=x", f"SECRET={REDACTED}"),
        ("--password=x", f"--password={REDACTED}"),
        ("--hf-token X --verbose", f"--hf-token {REDACTED} --verbose"),
        ("Authorization: Bearer abc.def", f"Authorization: {REDACTED}"),
        ("curl -H 'Authorization: Bearer a1'", f"curl -H 'Authorization: {REDACTED}'"),
        ("got Bearer eyJh.x-y_z== back", f"got Bearer {REDACTED} back"),
        ('password="a b c" next', f'password="{REDACTED}" next'),
        ('"token": 12345', f'"token": {REDACTED}'),
        # prose with a secret word but no assignment stays as it is
        ("the token is missing", "the token is missing"),
        ("token-based auth failed; key rotated", "token-based auth failed; key rotated"),
        ("a non-token word", "a non-token word"),
    ],
)
def test_every_assignment_form(text: str, expected: str) -> None:
    assert redact_text(text) == expected


def test_values_of_any_type_under_secret_names_and_argv_flags() -> None:
    document = {
        "env": {"token": [1, 2], "API_KEY": {"a": 1}, "pw_secret": 5, "auth": None, "N": 3},
        "command": ["sh", "-c", "echo password=S51; exit 1", "--hf-token", "S52", "--token"],
    }
    assert redact_value(document) == {
        "env": {"token": REDACTED, "API_KEY": REDACTED, "pw_secret": REDACTED, "auth": None, "N": 3},
        "command": ["sh", "-c", f"echo password={REDACTED}; exit 1", "--hf-token", REDACTED, "--token"],
    }  # fmt: skip


@pytest.mark.invalid_reports  # the planted key is in no schema
def test_a_sealed_file_is_read_as_written_and_an_edited_one_redacted_again(tmp_path: Path) -> None:
    path = write_report(hostile(), tmp_path / "run.json")
    written = path.read_text()
    assert re.search(r'\n "redacted_by": "[0-9a-f]{8}:[0-9a-f]{8}"\n\}\n\Z', written)
    document = read_document(path)
    assert "redacted_by" not in document
    assert document["command"] == BASE["command"]
    # a tool that adds to the file keeps the seal but not its checksum: all is redacted again
    path.write_text(written.replace('"kind": "check"', '"kind": "check", "x": "PASSWORD=S54"'))
    assert read_document(path)["x"] == f"PASSWORD={REDACTED}"


def test_watch_reports_none_of_the_secrets_on_its_command_line(tmp_path: Path) -> None:
    """The command of the issue: a secret in the job's output, a flag and its value as two
    arguments, a flag=value and a NAME=value, each at the start of its argument."""
    secrets = ("Zq9out51", "Zq9flag52", "Zq9eq53", "Zq9env54")
    command = [sys.executable, "-m", "nccldoctor", "watch", "--out", str(tmp_path), "--",
               "sh", "-c", f"echo password={secrets[0]}; exit 1",
               "--hf-token", secrets[1], f"--password={secrets[2]}", f"PASSWORD={secrets[3]}"]  # fmt: skip
    subprocess.run(command, capture_output=True, timeout=120, cwd=REPO, check=False)
    (report,) = {path.resolve() for path in tmp_path.rglob("report.json")}  # latest/ is a link
    shown = subprocess.run([sys.executable, "-m", "nccldoctor", "report", str(report), "-v"],
                           capture_output=True, text=True, timeout=120, cwd=REPO, check=False)  # fmt: skip
    assert "hf-token" in report.read_text()
    for text in (report.read_text(), report.with_name("report.html").read_text(), shown.stdout):
        assert not [secret for secret in secrets if secret in text]
