"""Causes and their consequences: a rule names the rules whose findings follow from its own
(``explains=``); the report marks them, the first line names the root cause and its fix, and
the views show a consequence under its cause without a fix of its own."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from checks import RANKS_STOPPED, all_checks, link_causes
from nccldoctor.model import Finding, Severity
from nccldoctor.report import Report
from nccldoctor.views.html import render_document_html
from nccldoctor.views.terminal import render_terminal


def _finding(id: str, title: str, severity: Severity = Severity.FAIL, **kw) -> Finding:
    area = {"container": "container", "cluster": "cluster", "run": "run"}.get(
        id.split(".")[0], "network"
    )
    return Finding(id=id, category="other", severity=severity, area=area, title=title,
                   evidence=[f"seen: {title}"], fix=f"fix for {id}", **kw)  # fmt: skip


def _docker_nat() -> list[Finding]:
    """What the Docker-bridge lab run reports, in the order the rules report it."""
    all_checks()  # the rules' explains= are read from the registry
    return [
        _finding(
            "run.ephemeral-port-blocked", "connections to ephemeral ports are dropped", node="node1"
        ),
        _finding(
            "container.bridge-network",
            "docker container on a bridge network",
            node="node0",
            remedy="run the containers with --network host",
        ),
        _finding(
            "container.bridge-network",
            "docker container on a bridge network",
            node="node1",
            remedy="run the containers with --network host",
        ),
        _finding(
            "run.rank-failed",
            "rank 1 failed: RuntimeError: Gloo connectFullMesh failed with "
            "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:152] "
            "timed out connecting",
            Severity.WARN,
            node="node1",
        ),
        _finding("cluster.advertised-address-shared", "2 nodes advertise the same address"),
    ]


def test_the_explaining_rules_name_registered_rules_and_never_a_cycle():
    rules = {c.id: c for c in all_checks()}
    for rule in rules.values():
        assert set(rule.explains) <= set(rules), rule.id
        assert rule.id not in rule.explains
    assert set(RANKS_STOPPED) <= set(rules)

    def reaches(start: str, goal: str, seen: frozenset = frozenset()) -> bool:
        return any(
            e == goal or (e not in seen and reaches(e, goal, seen | {e}))
            for e in rules[start].explains
        )

    assert not [r for r in rules if reaches(r, r)]


def test_consequences_name_their_root_cause_through_the_chain():
    findings = _docker_nat()
    link_causes(findings)
    causes = {f.id: f.explained_by for f in findings}
    assert causes == {
        "run.ephemeral-port-blocked": "container.bridge-network",
        "container.bridge-network": None,
        "run.rank-failed": "container.bridge-network",
        # explained by the container rule directly; the shared address is a symptom of it
        "cluster.advertised-address-shared": "container.bridge-network",
    }
    link_causes(findings)  # twice: the same answer
    assert {f.id: f.explained_by for f in findings} == causes


def test_without_the_container_the_shared_address_is_the_cause():
    findings = [f for f in _docker_nat() if f.id != "container.bridge-network"]
    link_causes(findings)
    assert {f.explained_by for f in findings} == {None, "cluster.advertised-address-shared"}


def test_a_passing_finding_neither_explains_nor_follows():
    findings = _docker_nat()
    findings[1].severity = findings[2].severity = Severity.OK
    link_causes(findings)
    assert findings[0].explained_by == "cluster.advertised-address-shared"


@pytest.fixture
def nat_document() -> dict:
    return Report(kind="check", findings=_docker_nat()).to_dict()


def test_the_first_line_is_the_root_cause_and_its_fix(nat_document):
    line = nat_document["headline"]["line"]
    assert line == (
        "Problems found: docker container on a bridge network → run the containers with "
        "--network host"
    )
    assert len(line) <= 160 and "/__w/" not in nat_document["headline"]["answer"]
    # one title per cause in the paragraph: the container rule fired on two nodes
    assert (
        "Problems: docker container on a bridge network; " not in nat_document["headline"]["answer"]
    )
    assert "(2 more follow from it)" in nat_document["headline"]["answer"]


def test_a_long_cause_is_cut_and_keeps_its_fix():
    long = _finding("container.bridge-network", "x" * 300, remedy="run with --network host")
    line = Report(kind="check", findings=[long]).to_dict()["headline"]["line"]
    assert len(line) == 160 and line.endswith("… → run with --network host")


def test_the_terminal_shows_consequences_under_the_cause_without_their_fixes(nat_document):
    console = Console(file=io.StringIO(), width=300, no_color=True)
    console.print(render_terminal(nat_document))
    shown = console.file.getvalue()
    assert shown.splitlines()[0].startswith("✗ Problems found: docker container on a bridge")
    assert "Explains:" in shown
    assert shown.count("follows from container.bridge-network: its fix covers this") == 3
    for consequence in ("run.ephemeral-port-blocked", "run.rank-failed", "cluster.advertised"):
        assert f"fix for {consequence}" not in shown
    assert "fix for container.bridge-network" in shown
    assert "/__w/pytorch" not in shown  # C++ source paths are for the JSON, not the reader


def test_the_page_shows_consequences_without_their_fixes(nat_document):
    html = render_document_html(nat_document)
    assert "run the containers with --network host" in html
    assert "fix for run.ephemeral-port-blocked" not in html
    assert 'follows from <a href="#finding-container.bridge-network">' in html


def test_a_diverged_rank_explains_the_others_watchdog_timeouts():
    """explain over a real shape of hang: rank 2 stopped early, and the watchdog's timeout on
    the others follows from it; the first line names the divergence and what to read."""
    from typer.testing import CliRunner

    from nccldoctor.cli.app import app

    logs = Path(__file__).parent / "fixtures" / "logs" / "v2.32-diverge"
    document = json.loads(CliRunner().invoke(app, ["explain", "--json", str(logs)]).stdout)
    causes = {f["id"]: f.get("explained_by") for f in document["findings"]}
    assert causes["torch.watchdog-timeout"] == "logs.collective-divergence"
    assert causes["logs.collective-divergence"] is None
    assert document["headline"]["line"].startswith("Problems found: ranks diverged")
    assert document["headline"]["line"].endswith(
        "→ read the early ranks' stacks and Flight Recorder dumps"
    )
