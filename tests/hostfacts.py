"""Helpers for tests that probe the captured host trees under tests/fixtures/hosts."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

from checks import get_check
from nccldoctor.facts import NodeFacts
from nccldoctor.model import Finding
from nccldoctor.probes import collect_node_facts

HOSTS = Path(__file__).parent / "fixtures" / "hosts"


def host_facts(
    tree: str | Path, env: Mapping[str, str] | None = None, master: str | None = None
) -> NodeFacts:
    """Probe a fixture tree (by name, or a path) with exactly ``env`` as the environment."""
    root = tree if isinstance(tree, Path) else HOSTS / tree
    return collect_node_facts(root=root, env=dict(env or {}), master=master, node="test-node")


def findings(check_id: str, facts: NodeFacts) -> list[Finding]:
    """Run one check; a crash would come back as a ``.crashed`` finding, so forbid it."""
    check = get_check(check_id)
    assert check is not None, f"no check {check_id}"
    result = check.run(facts, node=facts.node)
    assert not [f for f in result if f.id.endswith(".crashed")], result
    return result


def copy_host(tree: str, dest: Path) -> Path:
    """A writable copy of a fixture tree (symlinks kept as links), to damage or extend."""
    target = dest / tree
    shutil.copytree(HOSTS / tree, target, symlinks=True)
    return target
