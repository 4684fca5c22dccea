"""The isolation rounds of `check`, run through the master's store (docs/design.md#isolation).

After its workers, every node writes how its part of the all-node run went (``state/<rank>``).
The master waits for them (the exit barrier's budget), decides whether to isolate
(:func:`should_isolate`) and writes the ``plan``. Then, round by round, it asks the scheduler for
the groups, writes ``round/<k>``, and reads what each member wrote: ``took/<k>/<rank>`` when it
took its place, ``result/<k>/<rank>`` when its test ended. Every node, the master included (in a
thread), takes its place in its group of each round (grouptest.py) until ``round/<k>`` says done.

Every wait has a deadline: the master's for the states (exit_barrier), for a round's results (the
group deadline and a margin); a member's for the plan and for each next round. What the master
reads was written by whoever reaches the store: each value is a record of messages.py, bounded and
checked, and one that is refused counts as no answer, with why.
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

from nccldoctor.cluster.isolate import grouptest
from nccldoctor.cluster.isolate.messages import MemberResult, Plan, RoundCall, RunState
from nccldoctor.cluster.isolate.results import Pace, group_test
from nccldoctor.cluster.isolate.scheduler import Round, next_step
from nccldoctor.cluster.isolate.storeio import read_message, wait_for, wait_message
from nccldoctor.facts.isolation import GroupTest, Isolation
from nccldoctor.forensics.stacks import readable

MARGIN_S = 5.0  # a round's results reach the master this long after the group's deadline
READ_POLL_S = 0.25  # how often the master looks at a round's members: when each was ready
# A node's TCP rate to the master this far below the others' median: a port negotiated down
# (1 Gbit/s among 25), a rate limit left behind. The probe is short and shares the CPU with the
# check: on a loaded machine a healthy node's turn came out at a fifteenth of the median.
SLOW_LINK_SHARE = 1 / 25


class IsoKeys:
    """The isolation keys of one run, under the run's prefix."""

    def __init__(self, prefix: str) -> None:
        self.base = f"{prefix}/isolate"
        self.plan = f"{self.base}/plan"

    def state(self, rank: int) -> str:
        return f"{self.base}/state/{rank}"

    def round(self, number: int) -> str:
        return f"{self.base}/round/{number}"

    def took(self, number: int, rank: int) -> str:
        return f"{self.base}/took/{number}/{rank}"

    def result(self, number: int, rank: int) -> str:
        return f"{self.base}/result/{number}/{rank}"

    def ready(self, number: int, rank: int) -> str:
        """Set by a member once its group's first op is done: its group is past connecting."""
        return f"{self.base}/ready/{number}/{rank}"

    def group(self, number: int, index: int) -> str:
        return f"{self.base}/pg/{number}/{index}/"


@dataclass(frozen=True)
class Member:
    """This node in the rounds."""

    name: str
    rank: int  # node rank
    master: str
    port: int
    backend: str
    interface: str | None
    deadline_s: float  # one group's test


# -- the decision -------------------------------------------------------------------------------
def should_isolate(
    mode: str,
    states: Mapping[str, RunState | None],
    tcp_gbps: Mapping[str, float],
    below_links: str = "",
    refused: Mapping[str, str] | None = None,
) -> Plan:
    """Whether the rounds run: ``always``, never with ``never``; with ``auto`` when a node's part
    of the all-node run failed or hung, a node never said how it went, a node's TCP rate to the
    master is far below the others' (what its link carries is not what theirs do), or
    ``below_links`` says the all-node busbw is far below what the links carry. ``refused``: why
    a node's state was no state (it counts as never said)."""
    if mode == "never":
        return Plan(False, "--isolate never")
    refused = refused or {}
    failed = [n for n, s in states.items() if s is not None and not s.ok]
    silent = [n for n, s in states.items() if s is None and n not in refused]
    why = []
    if failed:
        why.append(f"the all-node run failed on {', '.join(failed)}")
    if silent:
        why.append(f"{', '.join(silent)} never said how the all-node run went")
    why += [f"{n}'s state was refused: {refused[n]}" for n, s in states.items()
            if s is None and n in refused]  # fmt: skip
    slow = slow_links(tcp_gbps)
    if slow:
        why.append(slow)
    if below_links:
        why.append(below_links)
    if why:
        return Plan(True, "; ".join(why))
    if mode == "always":
        return Plan(True, "--isolate always")
    return Plan(False, "the all-node run passed on every node")


def slow_links(tcp_gbps: Mapping[str, float]) -> str:
    """ "node3's TCP rate to the master 0.10 Gbit/s, the others' median 9.8" or ""."""
    rates = {n: r for n, r in tcp_gbps.items() if isinstance(r, (int, float)) and r > 0}
    if len(rates) < 3:
        return ""
    median = statistics.median(rates.values())
    slow = sorted(n for n, r in rates.items() if r < SLOW_LINK_SHARE * median)
    if not slow:
        return ""
    shown = ", ".join(f"{n} {rates[n]:.2f} Gbit/s" for n in slow)
    return f"TCP to the master: {shown}, the others' median {median:.2f} Gbit/s"


# -- every node -----------------------------------------------------------------------------------
def publish_state(
    store: Any, keys: IsoKeys, rank: int, ok: bool, why: str, interface: str | None = None
) -> None:
    """How this node's part of the all-node run went, and the interface its groups will use."""
    store.set(keys.state(rank), RunState.of(ok, why, interface).to_json())


def close_plan(store: Any, keys: IsoKeys, why: str) -> None:
    """The master, on its way out: a plan of no rounds where it never wrote one (it stopped
    before its isolate phase), so that no node waits for a plan that will not come."""
    try:
        if not store.check([keys.plan]):
            store.set(keys.plan, Plan(False, why).to_json())
    except Exception:  # the store went with it: the nodes' wait has its deadline
        pass


def wait_plan(store: Any, keys: IsoKeys, timeout_s: float) -> Plan | None:
    """The master's plan, or None when none that reads came in time."""
    return wait_message(store, keys.plan, Plan, time.monotonic() + timeout_s, {})


def take_part(
    store: Any,
    keys: IsoKeys,
    me: Member,
    round_wait_s: float,
    stop: threading.Event | None = None,
) -> list[str]:
    """Take this node's place in each round until the master says done; what went wrong on
    the way (a round that never came), as sentences."""
    notes: list[str] = []
    number = 1
    while stop is None or not stop.is_set():
        refused: dict[str, str] = {}
        deadline = time.monotonic() + round_wait_s
        call = wait_message(store, keys.round(number), RoundCall, deadline, refused)
        if call is None:
            came = f"was refused: {refused['master']}" if refused else "never came from the master"
            notes.append(f"round {number} {came} within {round_wait_s:.0f} s")
            return notes
        if call.done:
            return notes
        mine = _my_group(call.groups, me.name)
        if mine is not None:
            index, members = mine
            store.set(keys.took(number, me.rank), "1")
            spec = grouptest.GroupSpec(
                me.master, me.port, keys.group(number, index), members.index(me.name),
                len(members), me.backend, me.interface, me.deadline_s,
                keys.ready(number, me.rank),
            )  # fmt: skip
            # the master calls the next round once it is done with this one: one that ended this
            # group's test as stalled reads no more of it
            result = grouptest.run_member(spec, partial(_posted, store, keys.round(number + 1)))
            result.error = readable(result.error).strip().splitlines()[0] if result.error else ""
            store.set(keys.result(number, me.rank), result.to_json())
        number += 1
    return notes


def _posted(store: Any, key: str) -> bool:
    try:
        return bool(store.check([key]))
    except Exception:  # the store is gone: the group's own deadline ends the wait
        return False


def _my_group(groups: Sequence[tuple[str, ...]], name: str) -> tuple[int, tuple[str, ...]] | None:
    return next(((i, g) for i, g in enumerate(groups) if name in g), None)


# -- the master -----------------------------------------------------------------------------------
def coordinate(
    store: Any,
    keys: IsoKeys,
    me: Member,
    nodes: Mapping[int, str],
    mode: str,
    tcp_gbps: Mapping[str, float],
    states_wait_s: float,
    progress: Callable[[str], None] = lambda line: None,
    budget_GBps: Mapping[str, float] | None = None,
    gone: Callable[[int], bool] = lambda rank: False,
    below_links: str = "",
) -> Isolation | Plan:
    """The master's side: the states, the plan, then the rounds (taking its own place in a
    thread). The answer, or the plan when the rounds did not run. ``gone(rank)``: the node is
    past its isolate phase without a state (it stopped and handed its report over): not waited
    for."""
    names = {rank: name for rank, name in nodes.items()}
    refused: dict[str, str] = {}
    states = _read_states(store, keys, names, time.monotonic() + states_wait_s, gone, refused)
    plan = should_isolate(
        mode, {names[r]: s for r, s in states.items()}, tcp_gbps, below_links, refused
    )
    store.set(keys.plan, plan.to_json())
    if not plan.run:
        return plan
    progress(f"isolate: {plan.why}; testing the nodes in pairs")
    round_wait = me.deadline_s + 2 * MARGIN_S
    own = threading.Thread(
        target=take_part, args=(own_client(me, round_wait), keys, me, round_wait),
        name="nccldoctor-isolate-own", daemon=True,
    )  # fmt: skip
    own.start()
    tests = list(_all_node_run(names, states))
    pace = Pace()
    try:
        while True:
            step = next_step(list(names.values()), tests, budget_GBps)
            if not isinstance(step, Round):
                break
            progress(f"isolate: round {step.number}, {len(step.groups)} group(s)")
            store.set(keys.round(step.number), RoundCall(tuple(step.groups)).to_json())
            tests += _read_round(store, keys, step, names, me.deadline_s, pace)
    finally:
        store.set(keys.round(_next_round(tests)), RoundCall(done=True).to_json())
    own.join(MARGIN_S)
    interfaces = {names[r]: s.interface for r, s in states.items() if s and s.interface}
    return dataclasses.replace(step, why_run=plan.why, interfaces=interfaces)


def _next_round(tests: Sequence[GroupTest]) -> int:
    return max((t.round for t in tests), default=0) + 1


def _all_node_run(
    names: Mapping[int, str], states: Mapping[int, RunState | None]
) -> list[GroupTest]:
    """Round 0, the all-node run, when it failed: the scheduler bisects it if no node explains
    it. A run that passed is left out, so that every node is still tested in pairs."""
    members = tuple(sorted(names.values()))
    absent = tuple(sorted(names[r] for r, s in states.items() if s is None))
    failed = [names[r] for r, s in states.items() if s is not None and not s.ok]
    if absent:
        return [GroupTest(0, members, "absent", absent=absent)]
    if failed:
        why = "; ".join(f"{names[r]}: {s.why}" for r, s in states.items() if s and not s.ok)
        return [GroupTest(0, members, "error", detail=why[:500])]
    return []


def _read_states(
    store: Any,
    keys: IsoKeys,
    names: Mapping[int, str],
    deadline: float,
    gone: Callable[[int], bool] = lambda rank: False,
    refused: dict[str, str] | None = None,
) -> dict[int, RunState | None]:
    """Each node's state, None for one that wrote none in time or none that reads (``refused``
    gets why, by name). A refused value is read again until the deadline: the node's own
    state may still be written over a stranger's."""
    refused = {} if refused is None else refused
    states: dict[int, RunState | None] = {r: None for r in names}
    given_up: set[int] = set()
    while True:
        for rank in [r for r, s in states.items() if s is None and r not in given_up]:
            states[rank] = read_message(store, keys.state(rank), RunState, names[rank], refused)
        given_up |= {r for r, s in states.items() if s is None and r not in given_up and gone(r)}
        missing = [r for r, s in states.items() if s is None and r not in given_up]
        if not missing or time.monotonic() >= deadline:
            return states
        unset = [keys.state(r) for r in missing if names[r] not in refused]
        wait_for(store, unset[:1], min(1.0, max(0.0, deadline - time.monotonic())))


def _read_round(
    store: Any,
    keys: IsoKeys,
    step: Round,
    names: Mapping[int, str],
    deadline_s: float,
    pace: Pace,
) -> list[GroupTest]:
    """Each group's test of round ``step``, once every member wrote its result, its group
    stalled (results.Pace: the groups that passed in this run set the pace) or the round's
    deadline passed."""
    ranks = {name: rank for rank, name in names.items()}
    members = [m for g in step.groups for m in g]
    posted = time.monotonic()
    deadline = posted + deadline_s + MARGIN_S
    # by then every member that took its place has answered, and its partners stopped waiting
    # for one that did not: the margin is for results on their way, not for places never taken
    answered_by = posted + deadline_s + grouptest.GRACE_S
    results: dict[str, MemberResult] = {}
    refused: dict[str, str] = {}
    took: set[str] = set()
    ready: dict[str, float] = {}  # seconds from the call to a member's first op, as seen here
    paced: set[int] = set()
    stalled: dict[int, str] = {}  # group index -> why its test ended early
    while True:
        for name in members:
            if name not in took and store.check([keys.took(step.number, ranks[name])]):
                took.add(name)
            if name not in ready and store.check([keys.ready(step.number, ranks[name])]):
                ready[name] = time.monotonic() - posted
            if name not in results:
                result = read_message(store, keys.result(step.number, ranks[name]), MemberResult,
                                      name, refused)  # fmt: skip
                if result is not None:
                    results[name] = result
                if result is not None or name in refused:
                    took.add(name)
        now = time.monotonic()
        for i, group in enumerate(step.groups):
            if i not in paced and all(m in ready and m in results and results[m].status == "ok"
                                      for m in group):  # fmt: skip
                paced.add(i)
                pace.firsts.append(max(ready[m] for m in group))
        limit = pace.stall_s(deadline_s)
        for i, group in enumerate(step.groups):
            waiting = [m for m in group if m in took and m not in ready and m not in results]
            if (
                limit
                and i not in stalled
                and waiting
                and set(group) <= took
                and now - posted > limit
            ):
                stalled[i] = pace.stalled(waiting, now - posted)
        ended = {m for i in stalled for m in step.groups[i]}
        left = [n for n in members if n not in results and n not in ended]
        if not left or now >= deadline or (now >= answered_by and not took & set(left)):
            break
        unset = [keys.result(step.number, ranks[n]) for n in left if n not in refused]
        wait_for(store, unset[:1], READ_POLL_S)
    tests = [group_test(step.number, g, results, took, refused) for g in step.groups]
    return [dataclasses.replace(t, detail=stalled[i]) if i in stalled and t.status == "timeout"
            else t for i, t in enumerate(tests)]  # fmt: skip


def own_client(me: Member, timeout_s: float) -> Any:
    """A store client of the master's own for its member thread: one client is not shared
    between threads."""
    from torch.distributed import TCPStore

    return TCPStore(me.master, me.port, is_master=False, timeout=timedelta(seconds=timeout_s))
