"""Isolate: when the all-node run failed, which node or link is at fault, in rounds of small groups
(cluster/isolate/rounds.py; docs/design.md#isolation). The master decides and schedules; every
node takes its place in its group of each round. Never fatal: what could not be decided is said."""

from __future__ import annotations

from nccldoctor.cluster.agent.state import AgentState, PhaseEnd
from nccldoctor.cluster.isolate import rounds
from nccldoctor.cluster.isolate.budget import below_links, link_budgets, ran_at_wire
from nccldoctor.cluster.isolate.messages import Plan
from nccldoctor.cluster.records import PhaseStatus

MIN_NODES = 3  # two nodes alone cannot tell a node from the link between them


def run(state: AgentState) -> PhaseEnd:
    c, run, world = state.config, state.run, state.run.world
    if c.isolate == "never":
        return PhaseEnd.skipped("--isolate never")
    if state.store is None or state.keys is None or world is None or run.node_rank is None:
        return PhaseEnd.skipped("no world to isolate in")
    if len(world.nodes) < MIN_NODES:
        return PhaseEnd.skipped(f"{len(world.nodes)} node(s): pairs need three")
    keys = rounds.IsoKeys(state.keys.prefix)
    workers = next((p for p in reversed(run.phases) if p.phase == "workers"), None)
    ok = workers is not None and workers.status is PhaseStatus.OK
    why = "" if ok else (workers.detail if workers else "") or "the workers did not run"
    reach = run.observed.reach
    me = rounds.Member(
        name=run.node,
        rank=run.node_rank,
        master=reach.addresses[0] if reach and reach.addresses else c.master,
        port=c.port,
        backend=world.backend,
        interface=_interface(state),
        deadline_s=c.timeouts.isolate_group,
    )
    round_wait = c.timeouts.isolate_group + 2 * rounds.MARGIN_S
    try:
        rounds.publish_state(state.store, keys, run.node_rank, ok, why, me.interface)
    except Exception as exc:  # the master's store is gone: nothing to isolate with
        return PhaseEnd.skipped(f"the store went away: {type(exc).__name__}")
    if run.is_master:
        names = {n.node_rank: n.name for n in world.nodes}
        tcp = state.gate.tcp_gbps if state.gate else {}
        slots = {n.slot: n.name for n in world.nodes}
        transport, budget = link_budgets(run.place.entries, slots, world.backend)
        results = run.workers.results.values() if run.workers else ()
        rates = [row.busbw_GBps for result in results for row in result.bandwidth]
        busbw = max(rates, default=None)
        # NCCL's busbw against its links' rating; gloo's (no transport) against the TCP probes
        slow = below_links(busbw, transport, budget) if transport else ran_at_wire(busbw, tcp)
        try:
            answer = rounds.coordinate(state.store, keys, me, names, c.isolate, tcp,
                                       c.timeouts.exit_barrier, state.progress, budget,
                                       gone=lambda rank: _handed(state, rank),
                                       below_links=slow)  # fmt: skip
        except Exception as exc:  # torch's store errors; the report says what was not decided
            return PhaseEnd(
                f"the rounds stopped: {type(exc).__name__}: {exc}"[:300], PhaseStatus.FAIL
            )
        if isinstance(answer, Plan):
            return PhaseEnd.skipped(answer.why)
        culprits = ", ".join(f"{v.node} {v.state}" for v in answer.culprits)
        links = ", ".join(f"{'–'.join(v.nodes)} {v.state}" for v in answer.links)
        found = "; ".join(x for x in (culprits, links, answer.network_wide and "network-wide") if x)
        return PhaseEnd(
            f"{answer.rounds} round(s): {found or 'no node or link at fault'}", result=answer
        )
    plan = rounds.wait_plan(state.store, keys, c.timeouts.exit_barrier + rounds.MARGIN_S)
    if plan is None or not plan.run:
        return PhaseEnd.skipped(plan.why if plan else "no plan came from the master")
    try:
        notes = rounds.take_part(state.store, keys, me, round_wait)
    except Exception as exc:  # the master's store went away mid-round: its report says why
        return PhaseEnd(f"the rounds stopped: {type(exc).__name__}: {exc}"[:300], PhaseStatus.FAIL)
    return PhaseEnd("; ".join(notes) or "took part in the rounds")


def _interface(state: AgentState) -> str | None:
    """The one the workers bound to: the user's GLOO_SOCKET_IFNAME, else the one towards the
    master (agent/launcher.py)."""
    chosen = state.env.get("GLOO_SOCKET_IFNAME", "").split(",")[0].strip()
    reach = state.run.observed.reach
    return chosen or (reach.interface if reach else None)


def _handed(state: AgentState, rank: int) -> bool:
    """Whether node ``rank`` handed its report over already: it stopped before the rounds."""
    try:
        return bool(state.store.check([state.keys.results(rank)]))
    except Exception:  # the master's own store: as good as not handed, the deadline decides
        return False
