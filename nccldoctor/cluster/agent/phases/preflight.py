"""Preflight: this node's Facts and findings, and NCCL's own bootstrap probe started in the
background (the bootstrap phase collects it)."""

from __future__ import annotations

from nccldoctor.cluster.agent.state import AgentState, PhaseEnd
from nccldoctor.preflight import run_preflight
from nccldoctor.probes.libnccl import bootstrap_probe


def run(state: AgentState) -> PhaseEnd:
    config, run = state.config, state.run
    # Preflight loads libnccl and libcudart by path to ask their versions. The dynamic
    # loader hands a loaded soname to every later DT_NEEDED of that name, so loaded
    # before torch's own, torch (and every worker forked from here) would run them.
    state.torch_loaded.wait(config.timeouts.startup)
    pf = run_preflight(
        master=config.master,
        env=state.env,
        command=state.command,
        local_ranks=config.procs_per_node,
    )
    run.facts = pf.nodes[0]
    for finding in pf.findings:  # the node's name in this run, not its hostname
        finding.node = run.node if finding.node == pf.nodes[0].node else finding.node
    run.facts.node = run.node
    run.cuda = _cuda(state)
    run.findings.extend(pf.findings)
    libraries = [lib.path for lib in run.facts.software.nccl_libraries if not lib.error]
    if libraries:
        future = state.background.submit(
            bootstrap_probe, libraries[0], state.env, config.timeouts.bootstrap
        )
        state.bootstrap_probe = (libraries[0], future)
    run.area_status.update(pf.area_status)
    run.area_state.update(pf.area_state)
    return PhaseEnd()


def _cuda(state: AgentState) -> bool:
    if state.config.backend == "gloo":
        return False
    gpu = state.run.facts.gpu if state.run.facts else None
    return bool(gpu and gpu.devices and gpu.torch.cuda_build is not None)
