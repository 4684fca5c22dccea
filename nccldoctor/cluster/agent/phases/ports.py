"""Ports: connections to ephemeral ports both ways, before gloo/NCCL need them (F02)."""

from __future__ import annotations

from nccldoctor.cluster.agent import knock
from nccldoctor.cluster.agent.state import AgentState, PhaseEnd
from nccldoctor.cluster.records import PhaseStatus


def run(state: AgentState) -> PhaseEnd:
    c, run = state.config, state.run
    probe_port = run.observed.hello.probe_port if run.observed.hello else 0
    if run.is_master or not probe_port:
        return PhaseEnd.skipped("the master listens")
    probe = knock.probe_ports(run.observed.reach.addresses[0], c.gate_port, probe_port,
                             run.node, c.token, c.timeouts.port_probe)  # fmt: skip
    if probe.blocked:
        return PhaseEnd(f"{probe.to_master} or back: dropped", PhaseStatus.FAIL, probe)
    return PhaseEnd(f"{probe.to_master} and back: ok", result=probe)
