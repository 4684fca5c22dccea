"""Cross-node checks: what must be the same on every node for NCCL to work, compared over all.

Each takes the Facts of every node that joined the rendezvous (``scope="cluster"``). A value
that some node does not know (None) is left out of the comparison, never guessed.
References are to docs/failures.md (section B, consistency across nodes).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence

from checks import RANKS_STOPPED, Problem, check
from checks.ncclenv import settings_differ
from checks.netfacts import master_link
from nccldoctor.facts import NodeFacts
from nccldoctor.model import Severity


def _groups(
    nodes: Sequence[NodeFacts], value: Callable[[NodeFacts], object]
) -> dict[str, list[str]]:
    """value → the nodes that have it; only nodes where the value is known."""
    groups: dict[str, list[str]] = {}
    for facts in nodes:
        found = value(facts)
        if found is not None and found != "":
            groups.setdefault(str(found), []).append(facts.node)
    return groups


def _evidence(groups: dict[str, list[str]]) -> list[str]:
    return [f"{value}: {', '.join(names)}" for value, names in sorted(groups.items())]


def _mismatch(
    nodes: Sequence[NodeFacts], value: Callable[[NodeFacts], object], what: str,
    severity: Severity, fix: str,
) -> Problem | None:  # fmt: skip
    groups = _groups(nodes, value)
    if len(groups) < 2:
        return None
    return Problem(severity, f"{what} differs between nodes ({len(groups)} values)",
                   _evidence(groups), fix)  # fmt: skip


@check(
    "cluster.torch-version-differs", area="cluster", category="version_mismatch", scope="cluster"
)
def torch_version_differs(nodes: list[NodeFacts]) -> Problem | None:
    """The nodes run different torch versions."""
    return _mismatch(
        nodes,
        lambda f: f.software.torch_version,
        "torch version",
        Severity.FAIL,
        "Install the same torch on every node (pip install torch==<version>): "
        "collective implementations and the store protocol change between releases.",
    )


@check("cluster.nccl-version-differs", area="cluster", category="version_mismatch", scope="cluster")
def nccl_version_differs(nodes: list[NodeFacts]) -> Problem | None:
    """The NCCL that torch uses differs between nodes (F11: 'Message truncated', hangs)."""
    return _mismatch(
        nodes,
        _nccl_version,
        "NCCL version",
        Severity.FAIL,
        "Use one NCCL everywhere: the same torch wheel (and nvidia-nccl-cu12), no "
        "LD_PRELOAD/LD_LIBRARY_PATH copy on some nodes only.",
    )


def _nccl_version(facts: NodeFacts) -> str | None:
    loaded = [lib.version for lib in facts.software.nccl_libraries if lib.version]
    return facts.software.torch_nccl or (loaded[0] if loaded else None)


@check("cluster.cuda-version-differs", area="cluster", category="version_mismatch", scope="cluster")
def cuda_version_differs(nodes: list[NodeFacts]) -> Problem | None:
    """torch's CUDA build differs between nodes."""
    return _mismatch(
        nodes,
        lambda f: f.software.torch_cuda or f.gpu.torch.cuda_build,
        "torch's CUDA version",
        Severity.WARN,
        "Install the same torch CUDA build (the same +cuXXX wheel) on every node.",
    )


@check("cluster.driver-differs", area="cluster", category="version_mismatch", scope="cluster")
def driver_differs(nodes: list[NodeFacts]) -> Problem | None:
    """The NVIDIA driver version differs between nodes."""
    return _mismatch(
        nodes,
        lambda f: f.gpu.driver_version,
        "NVIDIA driver",
        Severity.WARN,
        "Run the same driver on every node; an older one may lack features (CUDA "
        "version, NVLS, CUMEM) that NCCL enables on the newer nodes.",
    )


@check("cluster.gpu-model-differs", area="cluster", category="version_mismatch", scope="cluster")
def gpu_model_differs(nodes: list[NodeFacts]) -> Problem | None:
    """The nodes have different GPU models: the slowest sets the pace, tuning may differ."""
    return _mismatch(
        nodes,
        lambda f: ", ".join(sorted({d.name for d in f.gpu.devices})) or None,
        "GPU model",
        Severity.INFO,
        "Mixed GPU models train at the slowest GPU's pace; expected if intended.",
    )


@check("cluster.nccl-env-differs", area="cluster", category="env_config", scope="cluster")
def nccl_env_differs(nodes: list[NodeFacts]) -> Problem | None:
    """NCCL_* variables differ between nodes (a setting on some nodes only)."""
    return settings_differ({f.node: f.env.variables for f in nodes}, "nodes", Severity.WARN)


@check("cluster.master-address-differs", area="cluster", category="env_config", scope="cluster")
def master_address_differs(nodes: list[NodeFacts]) -> Problem | None:
    """The master's name resolves to different addresses on different nodes.

    An /etc/hosts line on some nodes only: Debian's 127.0.1.1 hostname line on the master, a
    stale entry."""
    master = next((f.network.master for f in nodes if f.network.master), None)
    return _mismatch(
        nodes,
        lambda f: ", ".join(f.network.master_addresses) or None,
        f"the address of the master {master}",
        Severity.WARN,
        "Give the master by IP (--master / MASTER_ADDR), or make its name resolve to that IP on "
        "every node (the same /etc/hosts line or DNS); a node that resolves it to loopback "
        "advertises loopback.",
    )


@check("cluster.mtu-differs", area="cluster", category="interface_selection", scope="cluster")
def mtu_differs(nodes: list[NodeFacts]) -> Problem | None:
    """The MTU of the interfaces the nodes talk over differs (large messages stall, F-MTU)."""
    return _mismatch(
        nodes,
        lambda f: getattr(master_link(f.network), "mtu", None),
        "MTU of the interface towards the master",
        Severity.FAIL,
        "Set one MTU on every node's interface and the switch ports between them, "
        "e.g. ip link set dev eth0 mtu 9000 (or 1500) on each node.",
    )


@check("cluster.subnet-differs", area="cluster", category="interface_selection", scope="cluster")
def subnet_differs(nodes: list[NodeFacts]) -> Problem | None:
    """The nodes reach the master from different subnets: routed, NATed, or the wrong interface."""

    def subnet(facts: NodeFacts) -> str | None:
        iface = master_link(facts.network)
        if iface is None or not iface.ipv4:
            return None
        return str(ipaddress.ip_interface(iface.ipv4[0]).network)

    return _mismatch(
        nodes,
        subnet,
        "subnet of the interface towards the master",
        Severity.WARN,
        "NCCL connects every pair of ranks directly: routed subnets work when every "
        "node can reach every other; a private 172.17.x subnet means a Docker bridge "
        "(use --network host).",
    )


@check(
    "cluster.nccl-interface-differs", area="cluster", category="interface_selection",
    scope="cluster",
)  # fmt: skip
def nccl_interface_differs(nodes: list[NodeFacts]) -> Problem | None:
    """NCCL bootstraps on differently named interfaces on different nodes (one node on docker0,
    lo or a second NIC while the others use eth0): each rank must reach every other's address."""
    groups = _groups(nodes, lambda f: f.network.nccl_pick)
    if len(groups) < 2:
        return None
    addresses = {f.node: f.network.nccl_pick_address for f in nodes}
    return Problem(
        Severity.WARN,
        f"NCCL bootstraps on {len(groups)} different interfaces: "
        + ", ".join(f"{name} ({', '.join(n)})" for name, n in sorted(groups.items())),
        [
            f"{name}: " + ", ".join(f"{n} {addresses[n] or ''}".strip() for n in names)
            for name, names in sorted(groups.items())
        ],
        "Pick the interface of the network the nodes share on every node (its name may differ "
        "from node to node):\nexport NCCL_SOCKET_IFNAME==<that interface>   # on each node\n"
        "ip route get <another node's address>   # names it",
    )


DOCKER_NAT_FIX = (
    "Run every container on the host's network, so each node advertises its own host's "
    "address:\n"
    "docker run --network host --ipc host ...   # on every node\n"
    "Publishing ports (-p) does not help: gloo and NCCL listen on random ports and each rank "
    "advertises its own address. Alternatives that work: a routable container network "
    "(a macvlan or ipvlan Docker network, an overlay with one address per container), or "
    "hostNetwork: true in Kubernetes; then set NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME to that "
    "interface."
)


def advertised(facts: NodeFacts) -> str | None:
    """The address this node's ranks advertise: the source of its route to the master; where
    no route was read (the Facts of a log), the address NCCL said it bootstraps on."""
    net = facts.network
    if net.route_to_master is not None:
        return net.route_to_master.source
    return net.nccl_pick_address if net.nccl_pick_measured else None


def _advertised_how(facts: NodeFacts) -> str:
    return (
        "NCCL's bootstrap"
        if facts.network.route_to_master is None
        else "route source to the master"
    )


@check(
    "cluster.advertised-address-shared", area="cluster", category="docker_network",
    scope="cluster", explains=("run.ephemeral-port-blocked", *RANKS_STOPPED),
    remedy="give every node its own address (containers: --network host)",
)  # fmt: skip
def advertised_address_shared(nodes: list[NodeFacts]) -> Problem | None:
    """Several nodes advertise one address (each host's first Docker container gets the same
    bridge address): a rank connecting to it reaches its own node, never the peer."""
    shared = {
        a: names
        for a, names in _groups(nodes, advertised).items()
        if len(names) > 1 and not ipaddress.ip_address(a).is_loopback  # master.loopback's
    }
    if not shared:
        return None
    address, names = sorted(shared.items())[0]
    how = {f.node: _advertised_how(f) for f in nodes}
    evidence = [f"advertised ({how[n[0]]}) {a}: {', '.join(n)}"
                for a, n in sorted(shared.items())]  # fmt: skip
    evidence += [f"seen by the master: {f.node} {f.network.seen_by_master}" for f in nodes
                 if f.network.seen_by_master]  # fmt: skip
    return Problem(
        Severity.FAIL,
        f"{len(names)} nodes advertise the same address {address} ({', '.join(names)}): "
        "a connection to it stays on the node that makes it",
        evidence,
        DOCKER_NAT_FIX,
    )
