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
    if r.resolve_error:
        return [
            Finding(
                "run.master-unresolvable",
                "env_config",
                Severity.FAIL,
                f"the master {r.master!r} does not resolve on node {node}",
                [r.resolve_error],
                "Use the master's numeric IP on every node (--master 10.10.10.2), or fix /etc/hosts "
                "or DNS so that every node resolves the same address.",
                area="network",
                node=node,
            )
        ]
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


def master_loopback_findings(
    r: ReachResult, node: str, interfaces: Mapping[str, Sequence[str]]
) -> list[Finding]:
    """The master's own name resolves to loopback on the master (Debian's 127.0.1.1 hostname
    line, F05): the store listens on every address, so the others join, but what the master's
    ranks advertise (gloo: the hostname's address; the route to the master: lo) is loopback, and
    the other nodes' ranks connect to their own 127.0.0.1."""
    if not r.loopback or _is_ip(r.master) or r.master == "localhost":
        return []  # a loopback address or localhost on purpose: nodes of one host
    routable = [(name, a) for name, addrs in sorted(interfaces.items()) for a in addrs
                if not ipaddress.ip_address(a).is_loopback]  # fmt: skip
    address = routable[0][1] if len(routable) == 1 else "<this node's address on the fast network>"
    where = "/etc/hosts: " + "; ".join(r.hosts_lines) if r.hosts_lines else "not from /etc/hosts"
    if r.hosts_lines:
        fix = (f"# on node {node}, in /etc/hosts replace {r.hosts_lines[0]!r} with:\n"
               f"{address} {r.master}")  # fmt: skip
    else:
        fix = f"# make {r.master} resolve to {address} on node {node} (DNS, or /etc/hosts)"
    return [
        Finding(
            "run.master-name-loopback",
            "interface_selection",
            Severity.FAIL,
            f"the master's name {r.master} resolves to {', '.join(r.addresses)} on the master "
            f"(node {node}): its ranks advertise loopback and the other nodes cannot connect back",
            [
                f"{r.master} -> {', '.join(r.addresses)} on node {node} ({where})",
                "routable addresses here: "
                + (", ".join(f"{n} {a}" for n, a in routable) or "none"),
                f"route to the master: {r.interface} (source {r.source}): gloo and NCCL would "
                "bind and advertise this",
            ],
            f"{fix}\n# or give the master by IP on every node: --master {address} "
            f"(MASTER_ADDR={address})",
            area="network",
            node=node,
        )
    ]


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def hello_findings(reply: HelloReply, advertised: str, node: str, gate: str) -> list[Finding]:
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
    if reply.seen and advertised and reply.seen != advertised:
        return [
            Finding(
                "run.nat",
                "docker_network",
                Severity.FAIL,
                f"node {node} sits behind NAT: it advertises {advertised}, the master sees "
                f"{reply.seen}; NCCL's peers will not reach the advertised address",
                [f"advertised (route source): {advertised}", f"seen by the master: {reply.seen}"],
                "Run the container with --network host (and --ipc host or a large --shm-size); "
                "publishing ports (-p) does not help NCCL, which uses random ports.",
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


def interface_findings(
    node: str,
    route_interface: str | None,
    interfaces: Mapping[str, Sequence[str]],
    env: Mapping[str, str],
    nccl_pick: str | None,
) -> list[Finding]:
    """The interface the kernel routes to the master through vs the one NCCL/gloo will use."""
    findings = []
    fix = (
        f"export NCCL_SOCKET_IFNAME=={route_interface} GLOO_SOCKET_IFNAME={route_interface}"
        if route_interface
        else "Set NCCL_SOCKET_IFNAME to the interface that reaches the master."
    )
    gloo = env.get("GLOO_SOCKET_IFNAME")
    if gloo:
        names = [n.strip() for n in gloo.split(",") if n.strip()]
        bad = [n for n in names if n not in interfaces or not interfaces[n]]
        if bad or any(n.startswith(("^", "=")) for n in names):
            findings.append(
                Finding(
                    "run.gloo-ifname-wrong",
                    "interface_selection",
                    Severity.FAIL,
                    f"GLOO_SOCKET_IFNAME={gloo} names no usable interface on node {node}",
                    [
                        f"interfaces with IPv4: {', '.join(sorted(k for k, v in interfaces.items() if v))}",
                        f"route to the master: {route_interface}",
                    ],
                    fix + "  (gloo takes exact names only, no ^ or =)",
                    area="network",
                    node=node,
                )
            )
    nccl = env.get("NCCL_SOCKET_IFNAME")
    if nccl:
        matched = nccl_matches(nccl, interfaces)
        if not matched or (route_interface and route_interface not in matched):
            findings.append(
                Finding(
                    "run.nccl-ifname-wrong",
                    "interface_selection",
                    Severity.FAIL,
                    f"NCCL_SOCKET_IFNAME={nccl} on node {node} selects "
                    f"{', '.join(matched) or 'no interface'}, but the master is reached via "
                    f"{route_interface}",
                    [
                        f"interfaces with IPv4: {', '.join(sorted(k for k, v in interfaces.items() if v))}"
                    ],
                    fix,
                    area="network",
                    node=node,
                )
            )
    elif nccl_pick and route_interface not in (None, "lo") and nccl_pick != route_interface:
        # (a master on loopback means one host: every local address reaches it)
        findings.append(
            Finding(
                "run.nccl-picks-wrong-interface",
                "interface_selection",
                Severity.FAIL,
                f"without NCCL_SOCKET_IFNAME NCCL on node {node} picks {nccl_pick}, but the master "
                f"is reached via {route_interface}",
                [
                    f"{nccl_pick}: {', '.join(interfaces.get(nccl_pick, [])) or 'no IPv4'}",
                    f"{route_interface}: {', '.join(interfaces.get(route_interface, []))}",
                    "nccldoctor's own workers were pinned to the routed interface",
                ],
                fix,
                area="network",
                node=node,
            )
        )
    return findings


def nccl_matches(value: str, interfaces: Mapping[str, Sequence[str]]) -> list[str]:
    """Interfaces (with IPv4) that NCCL_SOCKET_IFNAME selects: prefix list, ``^`` excludes,
    ``=`` exact (NVIDIA/nccl src/misc/socket.cc, matchIfList)."""
    exclude = value.startswith("^")
    value = value[1:] if exclude else value
    exact = value.startswith("=")
    value = value[1:] if exact else value
    wanted = [w.split(":")[0] for w in value.split(",") if w]

    def hit(name: str) -> bool:
        return any(name == w if exact else name.startswith(w) for w in wanted)

    return sorted(n for n, addrs in interfaces.items() if addrs and hit(n) != exclude)


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
