"""Rendezvous: every node publishes its entry on the master's store; the master plans the world
(node ranks, rank offsets, who is missing) and every node reads it."""

from __future__ import annotations

import time

from nccldoctor.cluster.agent import rendezvous
from nccldoctor.cluster.agent.state import AgentState, PhaseEnd, PhaseFailed
from nccldoctor.cluster.diagnosis.node_run import Place
from nccldoctor.cluster.records import NodeEntry
from nccldoctor.facts import NodeFacts
from nccldoctor.facts.run import HelloReply
from nccldoctor.facts.world import Rejected


def run(state: AgentState) -> PhaseEnd:
    c, t, run = state.config, state.config.timeouts, state.run
    assert run.preflight is not None and run.facts is not None
    state.keys = rendezvous.Keys(run.run_id)
    deadline = time.monotonic() + t.rendezvous
    hello = run.observed.hello or HelloReply(False)  # the master says none
    entry = NodeEntry(
        slot=0 if run.is_master else -1,
        name=run.node,
        advertised=hello.advertised or c.master,
        seen=hello.seen or c.master,
        procs=_procs(state, run.facts),
        cuda=run.preflight.cuda,
        requested_rank=0 if run.is_master else c.node_rank,
        skew_s=hello.skew_s,
        facts=run.facts,
    )
    if not run.is_master:
        state.store = rendezvous.connect_store(
            c.master, c.port, max(1.0, deadline - time.monotonic())
        )
    slot = rendezvous.publish_entry(state.store, state.keys, entry)
    entries: list[NodeEntry] = []
    rejected: list[Rejected] = []  # store entries that were not node entries
    if run.is_master:
        entries = rendezvous.gather_entries(
            state.store,
            state.keys,
            c.nodes,
            deadline,
            t.settle,
            on_join=lambda nodes: state.progress(rendezvous.Joined(nodes, c.nodes)),
            rejected=rejected,
            own=entry,
        )
        world = rendezvous.plan_world(run.run_id, c.backend, entries, c.nodes)
        state.store.set(state.keys.world, world.to_json())
    else:
        world = rendezvous.wait_world(state.store, state.keys, t.rendezvous + t.settle + 5)
    me = world.node(slot)
    place = Place(world, me.node_rank if me else None, tuple(entries), tuple(rejected))
    if me and me.name != run.node:  # another node has this one's name
        run.rename(me.name)
    if world.abort:
        raise PhaseFailed(f"rendezvous: {world.abort}", place)
    if me is None:
        run.observed.late_for = [n.name for n in world.nodes]
        raise PhaseFailed("rendezvous: arrived too late", place)
    return PhaseEnd(f"{len(world.nodes)} node(s), world size {world.world_size}", result=place)


def _procs(state: AgentState, facts: NodeFacts) -> int:
    if state.config.procs_per_node:
        return state.config.procs_per_node
    gpu = facts.gpu
    if gpu is None:
        return 1
    visible = gpu.visible_nvml_indices if gpu.visible_nvml_indices is not None else gpu.devices
    return max(1, len(visible))
