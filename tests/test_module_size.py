"""A bar of the house: no module of nccldoctor/ or checks/ over 400 lines. A module that grows
past it holds more than one thing; split it by what its parts do (a package per scope, as
checks/ras/ and checks/logs/ are), never by cutting it in halves."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAX_LINES = 400


def _sizes() -> dict[str, int]:
    paths = sorted((REPO / "nccldoctor").rglob("*.py")) + sorted((REPO / "checks").rglob("*.py"))
    return {
        path.relative_to(REPO).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in paths
    }


def test_no_module_is_over_the_bar():
    sizes = _sizes()
    assert len(sizes) > 100 and "checks/__init__.py" in sizes
    over = {p: n for p, n in sizes.items() if n > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines: {over}"
