"""Finding ids that the code builds itself (the cluster run, the log parser, watch, report merge).

Checks and log signatures are registered; these are not: ``Finding("run.nat", "docker_network",
...)`` in ``nccldoctor/cluster/diagnosis/findings.py`` and the like. To give each a page that cannot drift,
the generator reads them from the source with :mod:`ast`: every call of ``Finding`` or of a
helper whose name contains ``finding`` whose id (first argument or ``id=``) is a string literal,
or a conditional choosing between literals. Category, area, title and fix are taken when they are
literals too; an f-string shows its replacement fields as ``…``. Ids built at run time (a
signature's id, ``<check>.crashed``) are not literals and are documented elsewhere.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

# The positions of Finding's fields (nccldoctor/model.py); the helpers keep the same order.
_POSITION = {"id": 0, "category": 1, "title": 3, "fix": 5}


@dataclass(frozen=True)
class EmittedFinding:
    """One finding id built in the code, with what its first call site tells about it."""

    id: str
    module: str  # path relative to the repository root
    category: str | None
    area: str | None
    title: str
    fix: str


def _text(node: ast.expr | None) -> str | None:
    """A literal string, or an f-string with its replacement fields shown as ``…``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "…" for v in node.values)
    return None


def _ids(node: ast.expr | None) -> list[str]:
    if isinstance(node, ast.IfExp):
        return _ids(node.body) + _ids(node.orelse)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    return []


def _argument(call: ast.Call, name: str) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    position = _POSITION.get(name)
    if position is not None and position < len(call.args):
        return call.args[position]
    return None


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


def emitted_findings(package: Path, root: Path) -> list[EmittedFinding]:
    """Every literal finding id built under ``package`` (sorted by id; first call site wins)."""
    found: dict[str, EmittedFinding] = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or "finding" not in _callee(node).lower():
                continue
            for finding_id in _ids(_argument(node, "id")):
                found.setdefault(
                    finding_id,
                    EmittedFinding(
                        id=finding_id,
                        module=path.relative_to(root).as_posix(),
                        category=_text(_argument(node, "category")),
                        area=_text(_argument(node, "area")),
                        title=_text(_argument(node, "title")) or "",
                        fix=_text(_argument(node, "fix")) or "",
                    ),
                )
    return [found[i] for i in sorted(found)]
