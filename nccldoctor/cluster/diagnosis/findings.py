"""The master's findings about the rendezvous (refused nodes, nodes that never joined, missing
nodes, clock skew) and the relaxing of GPU findings on a gloo run.

What one node observed of its run is judged by the ``run`` rules of ``checks/run.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from nccldoctor.cluster.agent.gate import Hello
from nccldoctor.cluster.agent.rendezvous import NodeEntry, World, given_name
from nccldoctor.model import Finding, Severity

SKEW_WARN_S = 5.0


def rendezvous_findings(world: World, hellos: Sequence[Hello], port: int) -> list[Finding]:
    """The master's view: refused nodes, nodes that never arrived, node-rank clashes."""
    findings = []
    joined = {(name, n.seen) for n in world.nodes for name in (n.name, given_name(n.name))}
    for h in hellos:
        if not h.accepted:
            findings.append(
                Finding(
                    "run.node-refused",
                    "env_config",
                    Severity.FAIL,
                    f"node {h.node} ({h.seen}) was refused: {h.reason}",
                    [f"hello from {h.seen}"],
                    "Give every node the same --token (or NCCLDOCTOR_TOKEN).",
                    area="cluster",
                    node=h.node,
                )
            )
    reasons = {(h.node, h.seen): h.reason for h in hellos if h.accepted}
    for name, seen in sorted(set(reasons) - joined):
        findings.append(
            Finding(
                "run.node-never-joined",
                "firewall_or_port",
                Severity.FAIL,
                f"node {name} ({seen}) reached nccldoctor's port {port + 1} but never joined the "
                f"store on port {port}",
                [f"hello from {seen}", f"the node says: {reasons[name, seen] or 'nothing more'}"],
                f"Allow TCP port {port} on the master for {seen} (iptables -S / ufw status).",
                area="cluster",
                node=name,
            )
        )
    if world.abort:
        missing = ", ".join(world.missing) or "none"
        findings.append(
            Finding(
                "run.nodes-missing",
                "connect_refused_or_timeout",
                Severity.FAIL,
                f"{world.abort}; missing: {missing}",
                [f"joined: {', '.join(f'{n.name} ({n.address})' for n in world.nodes)}"],
                "Start `nccldoctor check` on every node within the rendezvous timeout, with the same "
                "--master, --port and --nodes.",
                area="cluster",
            )
        )
    return findings


def skew_findings(entries: Sequence[NodeEntry]) -> list[Finding]:
    skewed = [e for e in entries if abs(e.skew_s) > SKEW_WARN_S]
    if not skewed:
        return []
    return [
        Finding(
            "run.clock-skew",
            "other",
            Severity.WARN,
            f"clocks differ from the master's by more than {SKEW_WARN_S:.0f} s on "
            f"{', '.join(e.name for e in skewed)}",
            [f"{e.name}: {e.skew_s:+.2f} s" for e in skewed],
            "Run chrony/ntpd on every node: timestamps in logs and timeouts compare across nodes.",
            area="cluster",
        )
    ]


def gpu_findings_on_gloo(findings: list[Finding], forced: bool) -> list[Finding]:
    """A run on gloo needs no GPU: GPU failures become warnings (info with ``--backend gloo``),
    so a CPU-only check can be healthy while the report still shows what NCCL would lack."""
    relaxed = []
    for f in findings:
        if f.area == "gpu" and f.severity is Severity.FAIL:
            f = dataclasses.replace(
                f,
                severity=Severity.INFO if forced else Severity.WARN,
                title=f"{f.title} (this check ran on gloo)",
            )
        relaxed.append(f)
    return relaxed
