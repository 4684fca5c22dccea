"""Preflight: this node's Facts and findings, and NCCL's own bootstrap probe started in the
background (the bootstrap phase collects it)."""

from __future__ import annotations

import dataclasses

from nccldoctor.cluster.agent.state import AgentState, PhaseEnd
from nccldoctor.cluster.diagnosis.node_run import Preflight
from nccldoctor.facts import NodeFacts
from nccldoctor.preflight import run_preflight
from nccldoctor.probes.libnccl import bootstrap_probe


def run(state: AgentState) -> PhaseEnd:
    config, name = state.config, state.run.node
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
    hostname = pf.nodes[0].node
    facts = dataclasses.replace(pf.nodes[0], node=name)  # the node's name in this run
    findings = tuple(
        dataclasses.replace(f, node=name if f.node == hostname else f.node) for f in pf.findings
    )
    libraries = [lib.path for lib in facts.software.nccl_libraries if not lib.error]
    if libraries:
        future = state.background.submit(
            bootstrap_probe, libraries[0], state.env, config.timeouts.bootstrap
        )
        state.bootstrap_probe = (libraries[0], future)
    found = Preflight(facts, findings, pf.area_status, pf.area_state, _cuda(state, facts))
    return PhaseEnd(result=found)


def _cuda(state: AgentState, facts: NodeFacts) -> bool:
    if state.config.backend == "gloo":
        return False
    gpu = facts.gpu
    return bool(gpu and gpu.devices and gpu.torch.cuda_build is not None)
