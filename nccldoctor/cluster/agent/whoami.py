"""Which node is the master when none owns ``--master``: the one whose own listener answers.

Behind Docker NAT no container owns the address users pass as ``--master`` (the master's host);
the rendezvous ports published there lead into one container. So a node that neither owns the
address nor was given ``--node-rank`` opens its listener first, then asks whoever answers at
``--master``'s gate port for its nonce: its own nonce back means the ports lead here and this
node is the master. A node given ``--node-rank 0`` asks too, to catch a second master
(docs/docker.md#whoami).
"""

from __future__ import annotations

import time

from nccldoctor.cluster.agent import gate as gates
from nccldoctor.cluster.agent import knock
from nccldoctor.cluster.config import CheckConfig
from nccldoctor.facts.run import MasterSearch

# A --node-rank 0 node only checks that --master does not lead elsewhere: its own listener is
# up already, so an answer, when there is one, comes at once.
CONFLICT_WAIT_S = 2.0


def search(
    config: CheckConfig, address: str, run_id: str, deadline: float
) -> tuple[gates.Gate | None, MasterSearch]:
    """Open this node's listener and ask ``address``: the listener to keep when this node is
    the master (None otherwise), and what was seen."""
    found = MasterSearch(f"{address}:{config.gate_port}", config.node_rank)
    t0 = time.monotonic()
    try:
        gate: gates.Gate | None = gates.open_gate(config, run_id)
    except OSError as exc:  # someone else's listener holds the port here: not ours to be
        gate, found.own_gate_error = None, str(exc)
    nonce, found.error = knock.whose_gate(
        address, config.gate_port, config.node_name, config.token, deadline
    )
    found.answered = nonce is not None
    found.mine = gate is not None and nonce == gate.nonce
    found.elapsed_s = round(time.monotonic() - t0, 3)
    if gate is not None and not found.mine:
        gate.close()
        gate = None
    return gate, found


def check_alone(config: CheckConfig, address: str, gate: gates.Gate) -> MasterSearch:
    """A master by ``--node-rank 0``: does ``address`` lead to its own listener (or nowhere)?"""
    found = MasterSearch(f"{address}:{config.gate_port}", config.node_rank)
    t0 = time.monotonic()
    nonce, found.error = knock.whose_gate(
        address, config.gate_port, config.node_name, config.token,
        time.monotonic() + CONFLICT_WAIT_S,
    )  # fmt: skip
    found.answered, found.mine = nonce is not None, nonce == gate.nonce
    found.elapsed_s = round(time.monotonic() - t0, 3)
    return found
