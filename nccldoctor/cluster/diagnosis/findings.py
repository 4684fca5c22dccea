"""Findings about the run's own observations before the workers: reach, gate, rendezvous.

Node facts are judged by ``checks/`` (node and cluster scope); what only the run can see — a
connect that timed out, the address the master saw, a refused token, a node that never came —
is judged here. Each function is pure: observations in, findings out.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping, Sequence

from checks.netfacts import interface_named, master_interface
from nccldoctor.cluster.agent.listener import Hello, HelloReply, PortProbe
from nccldoctor.cluster.agent.reach import ReachResult
from nccldoctor.cluster.agent.rendezvous import NodeEntry, World
from nccldoctor.facts import NodeFacts
from nccldoctor.model import Finding, Severity

SKEW_WARN_S = 5.0


def reach_findings(r: ReachResult, port: int, node: str) -> list[Finding]:
    """A master that resolved but did not answer (master.unresolvable says when it did not)."""
    if r.resolve_error:
        return []
    if r.connected:
        return []
    where = f"{r.addresses[0]}:{port}" if r.addresses else f"{r.master}:{port}"
    evidence = [
        f"{r.attempts} attempts in {r.elapsed_s:.1f} s; last: {r.error}",
        f"route: {r.interface or '?'} (source {r.source or '?'})",
    ]
    if r.refused and not r.timed_out:
        return [
            Finding(
                "run.master-refused",
                "connect_refused_or_timeout",
                Severity.FAIL,
                f"nothing listens on {where}: the master's nccldoctor never started, or --port differs",
                evidence,
                "Start `nccldoctor check` on the master (the node owning the address) with the same "
                "--port, or check that --master names the right node.",
                area="network",
                node=node,
            )
        ]
    return [
        Finding(
            "run.master-port-blocked",
            "firewall_or_port",
            Severity.FAIL,
            f"connecting from node {node} to {where} got no answer: a firewall drops the port",
            evidence,
            f"Allow TCP port {port} and {port + 1} (and NCCL's ephemeral ports) between the nodes, "
            f"e.g. on the master: iptables -I INPUT -p tcp -s <node subnet> -j ACCEPT "
            "(or ufw allow from <node subnet>, or open the cloud security group).",
            area="network",
            node=node,
        )
    ]


def hello_findings(reply: HelloReply, node: str, gate: str) -> list[Finding]:
    if reply.refused:
        return [
            Finding(
                "run.token-refused",
                "env_config",
                Severity.FAIL,
                f"the master refused node {node}: {reply.error}",
                [f"gate: {gate}"],
                "Give every node the same --token (or NCCLDOCTOR_TOKEN).",
                area="cluster",
                node=node,
            )
        ]
    if not reply.ok:
        return [
            Finding(
                "run.gate-unreachable",
                "firewall_or_port",
                Severity.FAIL,
                f"node {node} reached the store port but not nccldoctor's port {gate}",
                [reply.error],
                "Open the port after --port too (nccldoctor's own listener).",
                area="network",
                node=node,
            )
        ]
    return []


def master_lost_findings(
    node: str, master: str, address: str, port: int, error: str, phase: str,
    ranks: Sequence[Mapping],
) -> list[Finding]:  # fmt: skip
    """A node outlived the master: its store stopped answering after rendezvous. The ranks here
    that lost a peer at the master's address are the evidence that it died, not this node."""
    peers = [f"rank {r['rank']}: {_last_line(r.get('error'))}" for r in ranks
             if address in (r.get("error") or "")]  # fmt: skip
    return [
        Finding(
            "run.master-lost",
            "remote_peer_closed",
            Severity.FAIL,
            f"the master {master} ({address}) was lost during node {node}'s {phase} phase: its "
            "store no longer answers and this node's result never reached it",
            [f"store: {error}", *peers],
            f"Check the master {master}: its kernel log (dmesg: OOM killer), whether it rebooted, "
            "the link to it. Every surviving node wrote its own report; combine them with\n"
            "nccldoctor report merge check-<node>.json... -o report.html",
            area="cluster",
            node=master,
        )
    ]


def _last_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def port_findings(probe: PortProbe, node: str, facts: NodeFacts | None) -> list[Finding]:
    """An ephemeral port that cannot be reached while the rendezvous ports can: a firewall that
    lets the store through and will hang gloo's/NCCL's connections (failures.md F02)."""
    ways = [  # (the side whose INPUT drops it, the connection, connected, error)
        ("the master", f"this node → {probe.to_master}", probe.to_master_ok, probe.to_master_error),
        (f"node {node}", f"the master → {probe.from_master}", probe.from_master_ok,
         probe.from_master_error),
    ]  # fmt: skip
    blocked = [w for w in ways if w[2] is False]
    if not blocked:
        return []
    net = facts.network if facts else None
    ports = net.ip_local_port_range if net else None
    span = f"{ports[0]}:{ports[1]}" if ports else "32768:60999"
    iface = interface_named(net, master_interface(net)) if net else None
    subnet = (str(ipaddress.ip_interface(iface.ipv4[0]).network) if iface and iface.ipv4
              else "<the nodes' subnet>")  # fmt: skip
    where = " and ".join(side for side, *_ in blocked)
    evidence = [
        f"{how}: connected"
        if ok
        else f"{how}: {error or 'no answer'} (deadline {probe.timeout_s:g} s)"
        for _, how, ok, error in ways
        if ok is not None
    ]
    evidence += [
        f"ip_local_port_range on node {node}: {span.replace(':', '-')} (gloo's and NCCL's "
        "listeners take their ports from it; no NCCL_*/GLOO_* variable pins them)",
        "the rendezvous ports answered: reach, hello, store and TCP throughput all passed",
    ]
    return [
        Finding(
            "run.ephemeral-port-blocked",
            "firewall_or_port",
            Severity.FAIL,
            f"connections to ephemeral ports on {where} are dropped while the rendezvous ports "
            "pass: gloo and NCCL connect to such ports (NCCL both ways) and hang there",
            evidence,
            f"# on {where}: allow TCP from the other nodes (gloo and NCCL use ephemeral ports, "
            "both ways)\n"
            f"iptables -I INPUT -p tcp -s {subnet} -j ACCEPT\n"
            f"# or: ufw allow from {subnet} proto tcp   (cloud: allow all TCP between the nodes "
            "in the security group)\n"
            f"# or only the ephemeral range: iptables -I INPUT -p tcp -s {subnet} --dport {span} "
            "-j ACCEPT",
            area="network",
            node=node,
        )
    ]


def rendezvous_findings(world: World, hellos: Sequence[Hello], port: int) -> list[Finding]:
    """The master's view: refused nodes, nodes that never arrived, node-rank clashes."""
    findings = []
    joined = {(n.name, n.seen) for n in world.nodes}
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
