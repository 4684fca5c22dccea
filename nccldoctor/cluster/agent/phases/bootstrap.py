"""Bootstrap: NCCL's own interface choice (libnccl's ncclGetUniqueId, no GPU needed; started
right after preflight, in the background), compared with the kernel's route to the master and
the user's NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME (the node run's facts take libnccl's pick)."""

from __future__ import annotations

from nccldoctor.cluster.agent.state import AgentState, PhaseEnd
from nccldoctor.cluster.diagnosis.node_report import bootstrap_interface
from nccldoctor.facts.run import NcclBootstrap

BOOTSTRAP_LINES = 20  # of libnccl's output, kept in the report


def run(state: AgentState) -> PhaseEnd:
    if state.bootstrap_probe is None:
        return PhaseEnd.skipped("no loadable libnccl")
    library, future = state.bootstrap_probe
    probe = future.result(timeout=state.config.timeouts.bootstrap + 5)
    used = bootstrap_interface(probe.output_lines)
    seen = NcclBootstrap(
        library, probe.rc, probe.error, used, probe.output_lines[-BOOTSTRAP_LINES:]
    )
    return PhaseEnd(f"NCCL picks {used[0]} ({used[1]})" if used else str(probe.error), result=seen)
