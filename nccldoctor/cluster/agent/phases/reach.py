"""Reach: where the master is, whether this node gets there, and whether it is the master. The
master hosts the store and the gate here; every other node says hello to the gate first, then
connects to the store port."""

from __future__ import annotations

import time
import uuid

from nccldoctor.cluster.agent import gate, knock, rendezvous, whoami
from nccldoctor.cluster.agent.reach import ReachResult, connect, locate
from nccldoctor.cluster.agent.state import AgentState, PhaseEnd, PhaseFailed
from nccldoctor.cluster.diagnosis.node_run import Role
from nccldoctor.facts.run import HelloReply
from nccldoctor.meet import is_local


def run(state: AgentState) -> PhaseEnd:
    c, t, run = state.config, state.config.timeouts, state.run
    deadline = time.monotonic() + t.reach
    assert run.facts is not None  # preflight's
    result = locate(run.facts.network)
    run.observed.reach = result
    if result.resolve_error:
        raise PhaseFailed(f"reach: {result.resolve_error}")
    address = result.addresses[0]
    master = c.node_rank == 0 or (c.node_rank is None and is_local(address))
    # a run id for the master's gate (and whoami's search for it); the others' come from the gate
    role = Role(uuid.uuid4().hex[:12] if master or c.node_rank is None else "", master)
    try:
        if c.node_rank is None and not master:
            role = Role(role.run_id, _find_master(state, address, role.run_id, deadline))
        if role.master:
            _host(state, role.run_id)
            if c.node_rank == 0:
                _check_alone(state, result, address)
        else:  # hello first: the master learns of this node even when its store port is blocked
            reply = _hello(state, result, deadline)
            role = Role(reply.run_id, master=False) if reply.ok else role
        connect(result, c.port, max(deadline, time.monotonic() + 3))
        if not result.connected:
            if not role.master:
                knock.send_note(address, c.gate_port, run.node, c.token, str(result.error))
            raise PhaseFailed(f"reach: {result.error}")
        if run.observed.hello and not run.observed.hello.ok:
            raise PhaseFailed(f"reach: {run.observed.hello.error}")
    except PhaseFailed as exc:  # who this node is stands in its report all the same
        exc.result = role
        raise
    return PhaseEnd(f"{result.interface} → {address}:{c.port}", result=role)


def _hello(state: AgentState, result: ReachResult, deadline: float) -> HelloReply:
    c, run = state.config, state.run
    address, advertised = result.addresses[0], result.source or ""
    reply = knock.say_hello(address, c.gate_port, run.node, advertised, c.token, deadline)
    # what the master saw (reply.seen): master.nat-bridge compares it with the route's source
    run.observed.hello, run.observed.gate = reply, f"{address}:{c.gate_port}"
    if reply.refused:
        raise PhaseFailed(
            f"reach: {reply.error}; this node's token: {gate.token_origin(c.token_from)}"
        )
    return reply


def _find_master(state: AgentState, address: str, run_id: str, deadline: float) -> bool:
    """No node owns ``address`` (Docker NAT): the master is the node whose own gate answers
    there (whoami); a node that cannot tell stops and says how to tell it."""
    state.gate, found = whoami.search(state.config, address, run_id, deadline)
    state.run.observed.master_search = found
    if found.undecided:
        raise PhaseFailed(f"reach: cannot tell whether this node is the master: no "
                          f"nccldoctor answered at {found.gate} ({found.error})")  # fmt: skip
    return state.gate is not None


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


def _host(state: AgentState, run_id: str) -> None:
    """The master's store and gate (kept from whoami's search), up before anyone knocks."""
    c = state.config
    budget = c.timeouts.rendezvous + c.timeouts.workers_total() + c.timeouts.exit_barrier
    try:
        state.store = rendezvous.host_store(c.port, budget)
        state.gate = state.gate or gate.open_gate(c, run_id)
    except Exception as exc:
        state.run.observed.listen_error = str(exc)
        raise PhaseFailed(f"reach: {exc}") from exc
