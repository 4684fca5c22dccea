"""Reach: where the master is and whether this node gets there. The master hosts the store and
the gate here; every other node says hello to the gate first, then connects to the store port."""

from __future__ import annotations

import time
import uuid

from nccldoctor.cluster.agent import gate, knock, rendezvous, whoami
from nccldoctor.cluster.agent.reach import ReachResult, connect, locate
from nccldoctor.cluster.agent.state import AgentState, PhaseEnd, PhaseFailed
from nccldoctor.meet import is_local


def run(state: AgentState) -> PhaseEnd:
    c, t, run = state.config, state.config.timeouts, state.run
    deadline = time.monotonic() + t.reach
    result = locate(run.facts.network)
    run.observed.reach = result
    if result.resolve_error:
        raise PhaseFailed(f"reach: {result.resolve_error}")
    address = result.addresses[0]
    run.is_master = c.node_rank == 0 or (c.node_rank is None and is_local(address))
    if c.node_rank is None and not run.is_master:
        _find_master(state, address, deadline)
    if run.is_master:
        _host(state)
        if c.node_rank == 0:
            _check_alone(state, result, address)
    else:  # hello first: the master learns of this node even when its store port is blocked
        _hello(state, result, deadline)
    connect(result, c.port, max(deadline, time.monotonic() + 3))
    if not result.connected:
        if not run.is_master:
            knock.send_note(address, c.gate_port, run.node, c.token, str(result.error))
        raise PhaseFailed(f"reach: {result.error}")
    if run.observed.hello and not run.observed.hello.ok:
        raise PhaseFailed(f"reach: {run.observed.hello.error}")
    return PhaseEnd(f"{result.interface} → {address}:{c.port}")


def _hello(state: AgentState, result: ReachResult, deadline: float) -> None:
    c, run = state.config, state.run
    address, advertised = result.addresses[0], result.source or ""
    reply = knock.say_hello(address, c.gate_port, run.node, advertised, c.token, deadline)
    # what the master saw: master.nat-bridge compares it with the route's source
    run.facts.network.seen_by_master = reply.seen or None
    run.observed.hello, run.observed.gate = reply, f"{address}:{c.gate_port}"
    if reply.refused:
        raise PhaseFailed(
            f"reach: {reply.error}; this node's token: {gate.token_origin(c.token_from)}"
        )
    if reply.ok:
        run.run_id = reply.run_id


def _find_master(state: AgentState, address: str, deadline: float) -> None:
    """No node owns ``address`` (Docker NAT): the master is the node whose own gate answers
    there (whoami); a node that cannot tell stops and says how to tell it."""
    run = state.run
    run.run_id = uuid.uuid4().hex[:12]
    state.gate, found = whoami.search(state.config, address, run.run_id, deadline)
    run.observed.master_search, run.is_master = found, state.gate is not None
    if found.undecided:
        raise PhaseFailed(f"reach: cannot tell whether this node is the master: no "
                          f"nccldoctor answered at {found.gate} ({found.error})")  # fmt: skip


def _check_alone(state: AgentState, result: ReachResult, address: str) -> None:
    """``--node-rank 0``: stop when ``--master`` leads to another node's gate, and tell that
    node why this one will not join."""
    c = state.config
    assert state.gate is not None  # _host made it
    found = whoami.check_alone(c, address, state.gate)
    state.run.observed.master_search = found
    if found.second_master:
        _hello(state, result, time.monotonic() + 3)
        why = f"started as the master (--node-rank 0) too, but --master leads to {found.gate}"
        knock.send_note(address, c.gate_port, state.run.node, c.token, why)
        raise PhaseFailed(f"reach: {why}, another node's nccldoctor")


def _host(state: AgentState) -> None:
    """The master's store and gate (kept from whoami's search), up before anyone knocks."""
    c = state.config
    state.run.run_id = state.run.run_id or uuid.uuid4().hex[:12]
    budget = c.timeouts.rendezvous + c.timeouts.workers_total() + c.timeouts.exit_barrier
    try:
        state.store = rendezvous.host_store(c.port, budget)
        state.gate = state.gate or gate.open_gate(c, state.run.run_id)
    except Exception as exc:
        state.run.observed.listen_error = str(exc)
        raise PhaseFailed(f"reach: {exc}") from exc
