"""Preflight: read this node, judge it, return the Report. No network, no torch import."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from checks import run_checks, run_node_checks
from nccldoctor.probes import collect_node_facts
from nccldoctor.report import Report
from nccldoctor.report.status import area_state, area_status


def run_preflight(
    root: str | Path = "/",
    master: str | None = None,
    env: Mapping[str, str] | None = None,
    only: Sequence[str] | None = None,
    command: Sequence[str] = (),
    local_ranks: int | None = None,
) -> Report:
    facts = collect_node_facts(root=root, env=env, master=master, local_ranks=local_ranks)
    findings = run_node_checks(facts, only=only)
    # nothing says where the peers are (a launcher's WORLD_SIZE would): say what `check
    # --master` would add about this node
    if not facts.multi_node and "WORLD_SIZE" not in facts.env.variables:
        from checks.preflight import NodeRoles

        several = run_node_checks(dataclasses.replace(facts, multi_node=True), only=only)
        findings += run_checks("preflight", NodeRoles(findings, several), node=facts.node)
    return Report(
        kind="preflight",
        nodes=[facts],
        findings=findings,
        command=list(command),
        area_status=area_status(facts),
        area_state=area_state(facts),
    )
