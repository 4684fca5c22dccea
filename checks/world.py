"""Checks over what the master saw of a `check` run's nodes (``scope="world"``).

The subject is a :class:`~nccldoctor.facts.world.WorldSeen`: the rendezvous (refused hellos,
nodes that knocked but never joined the store, a world that closed short), the clocks, the
nodes lost after they joined, the MTU of every node beside where the ranks stopped, and the
files a merge of node reports read. The cluster verdict (``cluster/diagnosis/causes.py``)
leads with ``run.mtu-stall`` when it explains the hang; a lost node's sentence is the verdict's
too (:func:`lost_sentence`): one wording.
"""

from __future__ import annotations

from checks import RANKS_STOPPED, Problem, check
from checks.netfacts import master_link
from nccldoctor.facts.network import Interface
from nccldoctor.facts.world import LostNode, WorldSeen
from nccldoctor.model import Severity
from nccldoctor.units import format_bytes, format_link_rate

SKEW_WARN_S = 5.0
IP_TCP_HEADERS = 40  # an IPv4 + TCP header without options: MTU 1500 carries 1460 bytes


@check("run.node-refused", area="cluster", category="env_config", scope="world")
def node_refused(seen: WorldSeen) -> list[Problem]:
    """The master's listener refused a node's hello (a wrong or missing --token)."""
    if seen.rendezvous is None:
        return []
    return [
        Problem(
            Severity.FAIL,
            f"node {h.node} ({h.seen}) was refused: {h.reason}",
            [f"hello from {h.seen}"],
            "Give every node the same --token (or NCCLDOCTOR_TOKEN).",
            node=h.node,
        )
        for h in seen.rendezvous.hellos
        if not h.accepted
    ]


_OUTSIDERS_FIX = (
    "Something besides this check's nodes talks to the master's ports (--port and the next): "
    "give every node one secret, --token SECRET or NCCLDOCTOR_TOKEN (a launcher's job id is the "
    "default under Slurm, torchrun and Kubernetes), and let only the cluster's nodes reach the "
    "ports (iptables -S / ufw status)."
)


@check("run.hello-flood", area="cluster", category="env_config", scope="world")
def hello_flood(seen: WorldSeen) -> Problem | None:
    """Far more hellos reached the master's listener than the run has nodes.

    The listener keeps the expected nodes' knocks (and the first refused ones) one by one and
    counts the rest: a node retries a few times at most, so the rest came from elsewhere."""
    flood = seen.rendezvous.flood if seen.rendezvous else None
    if flood is None:
        return None
    expected = f"the {flood.expected} nodes of the run" if flood.expected else "the nodes"
    refused = f", {flood.refused} of them without the token" if flood.refused else ""
    more = flood.addresses - len(flood.peers)
    sources = ", ".join(flood.peers) + (f" and {more} more addresses" if more > 0 else "")
    return Problem(
        Severity.FAIL,
        f"{flood.count} more hellos reached the master's listener than {expected}{refused}",
        [f"from {sources}"],
        _OUTSIDERS_FIX,
    )


@check("run.store-rejected", area="cluster", category="env_config", scope="world")
def store_rejected(seen: WorldSeen) -> list[Problem]:
    """Something written to the master's store as a node's entry or result was not one.

    The master checks each against the report's schema (size, nesting, types) before it uses
    it: a bad entry is left out of the world, a bad result out of the merge (the node's own
    result, when it came too, is merged), and so is a second report in one node's name."""
    if seen.rendezvous is None:
        return []
    problems = []
    for bad in seen.rendezvous.rejected:
        if bad.what == "entry":
            title = f"a node entry written as {bad.node} was left out of the world: {bad.why}"
        else:
            title = f"a result written as node {bad.node}'s was left out of the merge: {bad.why}"
        problems.append(Problem(Severity.FAIL, title, [f"store key {bad.key}: {bad.why}"],
                                _OUTSIDERS_FIX, node=bad.node))  # fmt: skip
    return problems


@check("run.node-never-joined", area="cluster", category="firewall_or_port", scope="world")
def node_never_joined(seen: WorldSeen) -> list[Problem]:
    """A node reached nccldoctor's listener on the master but never joined the store.

    The store's port (``--port``) is blocked while nccldoctor's own, the next one, passes."""
    rdzv = seen.rendezvous
    if rdzv is None:
        return []
    joined = {(name, m.seen) for m in rdzv.members for name in (m.name, m.given)}
    reasons = {(h.node, h.seen): h.reason for h in rdzv.hellos if h.accepted}
    return [
        Problem(
            Severity.FAIL,
            f"node {name} ({address}) reached nccldoctor's port {rdzv.port + 1} but never "
            f"joined the store on port {rdzv.port}",
            [f"hello from {address}", f"the node says: {reasons[name, address] or 'nothing more'}"],
            f"Allow TCP port {rdzv.port} on the master for {address} (iptables -S / ufw status).",
            node=name,
        )
        for name, address in sorted(set(reasons) - joined)
    ]


@check("run.nodes-missing", area="cluster", category="connect_refused_or_timeout", scope="world")
def nodes_missing(seen: WorldSeen) -> Problem | None:
    """The rendezvous closed without every node (too few came in time, or node ranks clashed)."""
    rdzv = seen.rendezvous
    if rdzv is None or not rdzv.abort:
        return None
    return Problem(
        Severity.FAIL,
        f"{rdzv.abort}; missing: {', '.join(rdzv.missing) or 'none'}",
        [f"joined: {', '.join(f'{m.name} ({m.address})' for m in rdzv.members)}"],
        "Start `nccldoctor check` on every node within the rendezvous timeout, with the same "
        "--master, --port and --nodes.",
    )


@check("run.clock-skew", area="cluster", category="other", scope="world")
def clock_skew(seen: WorldSeen) -> Problem | None:
    """A node's clock differs from the master's by more than 5 s."""
    skewed = [c for c in seen.clocks if abs(c.skew_s) > SKEW_WARN_S]
    if not skewed:
        return None
    return Problem(
        Severity.WARN,
        f"clocks differ from the master's by more than {SKEW_WARN_S:.0f} s on "
        f"{', '.join(c.node for c in skewed)}",
        [f"{c.node}: {c.skew_s:+.2f} s" for c in skewed],
        "Run chrony/ntpd on every node: timestamps in logs and timeouts compare across nodes.",
    )


def lost_sentence(lost: LostNode) -> str:
    """A lost node, as its finding's title and the hang verdict say it."""
    return f"node {lost.name} (node rank {lost.node_rank}) stopped reporting during its {lost.phase} phase"


@check("run.node-lost", area="cluster", category="remote_peer_closed", scope="world")
def node_lost(seen: WorldSeen) -> list[Problem]:
    """A node joined, then stopped reporting before the exit barrier's deadline."""
    return [
        Problem(
            Severity.FAIL,
            lost_sentence(lost),
            [f"no result before the exit barrier's deadline; last phase announced: {lost.phase}"],
            "The node died or lost its network: check its kernel log (dmesg: OOM killer), its "
            "nccldoctor report on its own disk, and the link between the nodes.",
            node=lost.name,
        )
        for lost in seen.lost
    ]


@check(
    "run.mtu-stall", area="network", category="interface_selection", scope="world",
    explains=("cluster.mtu-differs", *RANKS_STOPPED), remedy="set one MTU on every node's link",
)  # fmt: skip
def mtu_stall(seen: WorldSeen) -> Problem | None:
    """The MTU differs between nodes and a collective stalled above the smaller one.

    A collective stalled at a message bigger than the smaller MTU after smaller ones passed:
    the path drops the big frames (docs/failures.md#f20).

    Only a path that drops frames stalls: TCP endpoints with different MTUs agree on the smaller
    MSS by themselves. A 1500 switch port between two jumbo nodes drops their big frames and
    sends no ICMP back, so TCP never learns to send smaller segments."""
    links = {f.node: master_link(f.network) for f in seen.facts}
    mtus = {node: i.mtu for node, i in links.items() if i is not None and i.mtu}
    if len(set(mtus.values())) < 2:
        return None
    low, high = min(mtus.values()), max(mtus.values())
    stalled = [s for s in seen.stalls if s.in_flight_bytes > low - IP_TCP_HEADERS]
    if not stalled:
        return None
    phase, size, passed = (
        stalled[0].phase,
        stalled[0].in_flight_bytes,
        stalled[0].largest_passed_bytes,
    )
    jumbo = sorted(n for n, m in mtus.items() if m > low)
    small = sorted(n for n, m in mtus.items() if m == low)
    groups = "; ".join(
        f"{m} on {', '.join(sorted(n for n, v in mtus.items() if v == m))}"
        for m in sorted(set(mtus.values()), reverse=True)
    )
    passed_text = f"{format_bytes(passed)} passed" if passed else "nothing larger passed"
    evidence = [
        "MTU of the interface towards the master: "
        + ", ".join(f"{n} {links[n].name} {m}" for n, m in sorted(mtus.items())),
        f"{phase}: every rank got through {passed or 0} B; ranks "  # exact: the MTU is in bytes
        f"{', '.join(str(s.rank) for s in stalled)} stopped with {size} B in flight",
        f"frames over {low} B: sent by {', '.join(jumbo)} (MTU {high}), dropped by a hop at {low}",
    ]
    if seen.tcp_gbps:
        evidence.append(
            "raw TCP to the master: "
            + ", ".join(f"{n} {format_link_rate(g)}" for n, g in sorted(seen.tcp_gbps.items()))
        )
    peer = _address(links[jumbo[1] if len(jumbo) > 1 else small[0]])
    return Problem(
        Severity.FAIL,
        f"{phase} stalled at {format_bytes(size)} ({passed_text}): the MTU differs between nodes "
        f"({groups}) and frames over {low} B are dropped on the path",
        evidence,
        f"Use one MTU end to end. Lower the jumbo nodes:\n"
        f"ip link set dev {links[jumbo[0]].name} mtu {low}   # on {', '.join(jumbo)}\n"
        f"or set {high} on {', '.join(small)} and on every switch port between the nodes.\n"
        f"Check the path from {jumbo[0]}: ping -M do -s {high - 28} -c 1 {peer}  (must answer)",
    )


@check("report.merged", area="run", category="other", scope="world")
def merged(seen: WorldSeen) -> Problem | None:
    """The cluster report was merged from node report files; it warns when one is missing.

    A merge of files (``nccldoctor report merge``) says which node's report came from which
    file, and names the nodes the run lists that left no report: their results are unknown.
    The master's own report, merged at the exit barrier, has no such note."""
    if seen.merged is None:
        return None
    sources, missing = seen.merged.sources, seen.merged.missing
    title = f"cluster report merged from the reports of {len(sources)} node"
    title += "s" if len(sources) != 1 else ""
    title += f" ({', '.join(sources)})"
    if missing:
        title += f"; no report from {', '.join(missing)}"
    return Problem(
        Severity.WARN if missing else Severity.INFO,
        title,
        [f"{node}: {source}" for node, source in sources.items()]
        + [f"{node}: missing" for node in missing],
        "Every node writes its own report; copy the missing nodes' report files here and run\n"
        "nccldoctor report merge <every node's report.json> --html report.html"
        if missing
        else "",
    )


@check("report.section-unread", area="run", category="other", scope="world")
def section_unread(seen: WorldSeen) -> list[Problem]:
    """A section of a node's report did not read, and the merge went on without it.

    Each section the merge judges by (the phases, the ranks, the port probe, the TCP rates, the
    world listed) is read with its types checked: a value of another type than nccldoctor
    writes there (another version's report, an edited file, a stranger's write to the store)
    leaves that section out, and what rests on it is judged without that node's part."""
    return [
        Problem(
            Severity.WARN,
            f"node {bad.node}'s report: its {bad.section} section was left out of the merge: "
            f"{bad.why}",
            [f"{bad.source or 'its report'}: {bad.section}: {bad.why}"],
            "Run the same nccldoctor version on every node, and merge the reports as they wrote "
            "them:\nnccldoctor report merge <every node's report.json>",
            node=bad.node,
        )
        for bad in seen.unread
    ]


def _address(iface: Interface | None) -> str:
    return iface.ipv4[0].split("/")[0] if iface and iface.ipv4 else "<peer address>"
