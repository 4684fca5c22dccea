"""TCP: the raw wire's throughput from this node to the master's gate (tcpprobe)."""

from __future__ import annotations

import time

from nccldoctor.cluster.agent import knock
from nccldoctor.cluster.agent.state import AgentState, PhaseEnd
from nccldoctor.cluster.diagnosis.node_run import TcpMeasured
from nccldoctor.cluster.records import PhaseStatus
from nccldoctor.units import format_link_rate


def run(state: AgentState) -> PhaseEnd:
    c, run = state.config, state.run
    if run.is_master:
        return PhaseEnd.skipped("the master receives")
    # The nodes take turns at the master (they share its link); the turns together
    # stay within tcp_total, so that the first workers do not wait in init for the last.
    probers = len(run.world.nodes) - 1 if run.world else 1
    seconds = c.timeouts.tcp_turn(probers)
    deadline = time.monotonic() + probers * (seconds + 6)
    address = run.observed.reach.addresses[0]
    gbps, error = knock.measure_tcp(address, c.gate_port, run.node, c.token, seconds, deadline)
    if gbps is None:
        return PhaseEnd(error, PhaseStatus.FAIL)
    return PhaseEnd(format_link_rate(gbps), result=TcpMeasured(gbps))  # the views' one unit
