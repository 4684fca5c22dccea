"""The import contracts of pyproject.toml ([tool.importlinter]) hold: imports go one way, and no
package or module depends on itself through its siblings."""

from __future__ import annotations

import os
from pathlib import Path

from importlinter.cli import lint_imports

REPO = Path(__file__).resolve().parents[1]


def test_imports_follow_the_layers(monkeypatch, capsys) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.syspath_prepend(str(REPO))
    code = lint_imports(config_filename=os.fspath(REPO / "pyproject.toml"), no_cache=True)
    assert code == 0, capsys.readouterr().out
