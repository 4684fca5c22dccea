"""What `nccldoctor preflight` run alone leaves unsaid (``scope="preflight"``).

Without ``--master``, ``MASTER_ADDR`` or a ``WORLD_SIZE`` beyond this node, nothing says that
peers are elsewhere, and the rules that only matter across nodes (the hostname on loopback, a
Docker bridge, NCCL_SOCKET_IFNAME=lo ...) stay silent there, while `check --master` reports
them. The node's rules are run a second time as if it were one of several; what only that run
finds is said here, so that preflight and check never give two answers about one node.
"""

from __future__ import annotations

from dataclasses import dataclass

from checks import Problem, check
from nccldoctor.model import Finding, Severity


@dataclass(frozen=True)
class NodeRoles:
    """One node's findings judged as a node alone and as one node of several."""

    alone: list[Finding]
    one_of_several: list[Finding]

    def only_across_nodes(self) -> list[Finding]:
        seen = {(f.id, f.title) for f in self.alone}
        problems = (Severity.WARN, Severity.FAIL)
        return [
            f for f in self.one_of_several if f.severity in problems and (f.id, f.title) not in seen
        ]


@check("preflight.judged-alone", area="network", category="env_config", scope="preflight")
def judged_alone(roles: NodeRoles) -> Problem | None:
    """Judged as a single node (no master known): problems it has as one node of several."""
    more = roles.only_across_nodes()
    if not more:
        return None
    return Problem(
        Severity.WARN,
        f"judged as a single node (no --master, no MASTER_ADDR): in a multi-node job it has "
        f"{len(more)} more problem(s)",
        [f"{f.title} ({f.id})" for f in more],
        "Judge this node as one of several, as `nccldoctor check` does:\n"
        "nccldoctor preflight --master <the master's address>   # or export MASTER_ADDR",
    )
