"""Checks over what a node's cluster run observed before its workers (``scope="run"``).

The subject is a :class:`~nccldoctor.facts.run.RunObserved`: reach (the connect to the store
port), the hello to the master's listener, the ephemeral-port probe, a listener that could not
bind, a world that closed before this node came, an internal error of the agent. The node checks
judge the facts; these judge what only the run can see.
"""

from __future__ import annotations

import ipaddress

from checks import RANKS_STOPPED, Problem, check
from checks.netfacts import master_link
from nccldoctor.facts.run import RunObserved
from nccldoctor.model import Severity


def _unanswered(seen: RunObserved) -> tuple[str, list[str]] | None:
    """Where a resolved master did not answer, and the evidence (master.unresolvable says when
    it did not resolve)."""
    r = seen.reach
    if r is None or r.resolve_error or r.connected or not r.attempts:  # not dialled: hello refused
        return None
    where = f"{r.addresses[0]}:{seen.port}" if r.addresses else f"{r.master}:{seen.port}"
    evidence = [
        f"{r.attempts} attempts in {r.elapsed_s:.1f} s; last: {r.error}",
        f"route: {r.interface or '?'} (source {r.source or '?'})",
    ]
    return where, evidence


@check("run.master-refused", area="network", category="connect_refused_or_timeout", scope="run")
def master_refused(seen: RunObserved) -> Problem | None:
    """The master's address answered the store port with a reset: nothing listens there."""
    unanswered = _unanswered(seen)
    if unanswered is None or not seen.reach.refused or seen.reach.timed_out:
        return None
    where, evidence = unanswered
    return Problem(
        Severity.FAIL,
        f"nothing listens on {where}: the master's nccldoctor never started, or --port differs",
        evidence,
        "Start `nccldoctor check` on the master (the node owning the address) with the same "
        "--port, or check that --master names the right node.",
    )


@check("run.master-port-blocked", area="network", category="firewall_or_port", scope="run")
def master_port_blocked(seen: RunObserved) -> Problem | None:
    """Connecting to the master's store port got no answer: a firewall drops it."""
    unanswered = _unanswered(seen)
    if unanswered is None or (seen.reach.refused and not seen.reach.timed_out):
        return None
    where, evidence = unanswered
    return Problem(
        Severity.FAIL,
        f"connecting from node {seen.node} to {where} got no answer: a firewall drops the port",
        evidence,
        f"Allow TCP port {seen.port} and {seen.port + 1} (and NCCL's ephemeral ports) between "
        "the nodes, e.g. on the master: iptables -I INPUT -p tcp -s <node subnet> -j ACCEPT "
        "(or ufw allow from <node subnet>, or open the cloud security group).",
    )


@check("run.master-unknown", area="cluster", category="docker_network", scope="run")
def master_unknown(seen: RunObserved) -> Problem | None:
    """No node owns --master (Docker NAT: it is the master's host) and no nccldoctor answered
    there, so this node cannot tell whether it is the master (docs/docker.md#whoami)."""
    found = seen.master_search
    if found is None or not found.undecided:
        return None
    port = seen.port
    evidence = [
        f"this node does not own {found.gate.rsplit(':', 1)[0]}: a container behind NAT, or "
        "--master is another node",
        f"whoami to {found.gate} for {found.elapsed_s:.1f} s: {found.error}",
    ]
    evidence += [f"own listener: {found.own_gate_error}"] if found.own_gate_error else []
    return Problem(
        Severity.FAIL,
        f"node {seen.node} cannot tell whether it is the master: it does not own --master and "
        f"no nccldoctor answered at {found.gate}",
        evidence,
        "On the container whose host is --master, say so, and publish both ports there:\n"
        f"docker run -p {port}:{port} -p {port + 1}:{port + 1} ...  # on the master's host\n"
        f"nccldoctor check --master <that host> --node-rank 0 ...  # in that container\n"
        "or run every container with --network host (then the master owns its address).",
    )


@check("run.second-master", area="cluster", category="env_config", scope="run")
def second_master(seen: RunObserved) -> Problem | None:
    """This node was told it is the master (--node-rank 0), yet --master leads to another
    node's nccldoctor: two masters, each waiting for the other's nodes."""
    found = seen.master_search
    if found is None or not found.second_master:
        return None
    return Problem(
        Severity.FAIL,
        f"node {seen.node} was started as the master (--node-rank 0), but --master leads to "
        f"another node's nccldoctor at {found.gate}",
        [f"whoami to {found.gate}: another listener answered (not this node's)"],
        "Give --node-rank 0 to one node only, the one --master leads to; start the others "
        "without --node-rank (or with 1..N-1).",
    )


@check("run.token-refused", area="cluster", category="env_config", scope="run")
def token_refused(seen: RunObserved) -> Problem | None:
    """The master's listener refused this node's token."""
    if seen.hello is None or not seen.hello.refused:
        return None
    return Problem(
        Severity.FAIL,
        f"the master refused node {seen.node}: {seen.hello.error}",
        [f"gate: {seen.gate}"],
        "Give every node the same --token (or NCCLDOCTOR_TOKEN).",
    )


@check("run.gate-unreachable", area="network", category="firewall_or_port", scope="run")
def gate_unreachable(seen: RunObserved) -> Problem | None:
    """The store port answered but nccldoctor's own listener on the next port did not."""
    hello = seen.hello
    if hello is None or hello.ok or hello.refused or not (seen.reach and seen.reach.connected):
        return None
    return Problem(
        Severity.FAIL,
        f"node {seen.node} reached the store port but not nccldoctor's port {seen.gate}",
        [hello.error],
        "Open the port after --port too (nccldoctor's own listener).",
    )


@check("run.port-in-use", area="network", category="firewall_or_port", scope="run")
def port_in_use(seen: RunObserved) -> Problem | None:
    """The master could not listen on its store port or on nccldoctor's own port."""
    if seen.listen_error is None:
        return None
    return Problem(
        Severity.FAIL,
        f"the master cannot listen on port {seen.port} or {seen.port + 1}: {seen.listen_error}",
        [seen.listen_error],
        f"Pick a free port with --port (ss -ltnp | grep {seen.port} shows the owner).",
    )


@check("run.node-late", area="cluster", category="connect_refused_or_timeout", scope="run")
def node_late(seen: RunObserved) -> Problem | None:
    """This node arrived after the master closed the join window."""
    if seen.late_for is None:
        return None
    return Problem(
        Severity.FAIL,
        f"node {seen.node} arrived after the master closed the join window",
        [f"world: {', '.join(seen.late_for)}"],
        "Start every node within the rendezvous timeout, or pass --nodes.",
    )


@check("run.crashed", area="run", category="other", scope="run")
def crashed(seen: RunObserved) -> Problem | None:
    """nccldoctor's own agent failed with an internal error."""
    if seen.crash is None:
        return None
    return Problem(
        Severity.FAIL,
        f"nccldoctor itself failed: {seen.crash}",
        [],
        "This is a bug in nccldoctor; please report it with this report attached.",
    )


@check(
    "run.ephemeral-port-blocked", area="network", category="firewall_or_port", scope="run",
    explains=("network.ephemeral-ports", *RANKS_STOPPED),
    remedy="allow TCP between the nodes on every port (the firewall rule below)",
)  # fmt: skip
def ephemeral_port_blocked(seen: RunObserved) -> Problem | None:
    """An ephemeral port cannot be reached while the rendezvous ports can: a firewall that lets
    the store through and will hang gloo's/NCCL's connections (docs/failures.md#f02)."""
    probe = seen.port_probe
    if probe is None:
        return None
    ways = [  # (the side whose INPUT drops it, the connection, connected, error)
        ("the master", f"this node → {probe.to_master}", probe.to_master_ok, probe.to_master_error),
        (f"node {seen.node}", f"the master → {probe.from_master}", probe.from_master_ok,
         probe.from_master_error),
    ]  # fmt: skip
    blocked = [w for w in ways if w[2] is False]
    if not blocked:
        return None
    net = seen.network
    ports = net.ip_local_port_range if net else None
    span = f"{ports[0]}:{ports[1]}" if ports else "32768:60999"
    iface = master_link(net) if net else None
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
        f"ip_local_port_range on node {seen.node}: {span.replace(':', '-')} (gloo's and NCCL's "
        "listeners take their ports from it; no NCCL_*/GLOO_* variable pins them)",
        "the rendezvous ports answered: reach, hello, store and TCP throughput all passed",
    ]
    return Problem(
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
    )


@check("run.master-lost", area="cluster", category="remote_peer_closed", scope="run")
def master_lost(seen: RunObserved) -> Problem | None:
    """A node outlived the master: its store stopped answering after rendezvous. The ranks here
    that lost a peer at the master's address are the evidence that it died, not this node."""
    lost = seen.master_lost
    if lost is None:
        return None
    peers = [
        f"rank {rank}: {_last_line(error)}"
        for rank, error in lost.rank_errors.items()
        if lost.address in error
    ]
    return Problem(
        Severity.FAIL,
        f"the master {lost.master} ({lost.address}) was lost during node {seen.node}'s "
        f"{lost.phase} phase: its store no longer answers and this node's result never reached it",
        [f"store: {lost.error}", *peers],
        f"Check the master {lost.master}: its kernel log (dmesg: OOM killer), whether it "
        "rebooted, the link to it. Every surviving node wrote its own report; combine them with\n"
        "nccldoctor report merge check-<node>.json... --html report.html",
        node=lost.master,
    )


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


@check("run.incomplete", area="run", category="other", scope="run")
def incomplete(seen: RunObserved) -> Problem | None:
    """The run stopped before its end (the report keeps it only where no other finding fails)."""
    if seen.aborted is None:
        return None
    return Problem(
        Severity.FAIL, f"the run stopped: {seen.aborted}", [], "See the phases of this report."
    )
