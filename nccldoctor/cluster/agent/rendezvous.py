"""Rendezvous on a torch TCPStore hosted by the master agent: who came, and who is who.

Keys live under ``nccldoctor/<run_id>/`` with one writer each (STYLE rule 10): every node takes a
slot with ``add(count)`` and writes ``node/<slot>`` (its name, addresses, process count and
Facts); the master alone writes ``world`` (node ranks, global rank offsets, who is missing);
each node writes its own ``phase/<node_rank>``, and its report as a new version of its result,
``result/<node_rank>/<n>`` with ``n`` from ``add(results/<node_rank>)``. Readers wait with a
deadline. torch is imported only here and only when a store is made.

The store answers anyone who reaches its port and knows the run id (which the gate gives only
to holders of the token), so the master reads what nodes wrote as a stranger's input
(docs/design.md#gate): every entry and result is checked (cluster/diagnosis/peer.py) and one
that is not what a node writes is left out and recorded as :class:`Rejected`; a result is
versioned so that a bad one written in a node's name cannot hide the node's own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

# the store helpers live where watch meets too; the agent reaches them through this module
from nccldoctor.cluster.diagnosis import peer
from nccldoctor.cluster.records import NodeEntry, World, WorldNode
from nccldoctor.facts.world import Rejected
from nccldoctor.meet import RendezvousError, connect_store, host_store  # noqa: F401
from nccldoctor.report import Report

REJECTED_KEPT = 16  # rejections kept one by one; past them a writer only costs the reading
# The newest slots and result versions looked at: a counter pushed far ahead by a stranger
# costs a bounded scan, and the nodes that took numbers after it are still read.
SCAN = 64
WRITE_GRACE_S = 2.0  # between a node's add(count) and its set(node/<slot>): milliseconds


@dataclass(frozen=True)
class Joined:
    """A progress event of the master's join window: ``nodes`` have taken a slot, the master
    counted, of ``expected`` (None: the window closes at a quiet moment)."""

    nodes: int
    expected: int | None

    def __str__(self) -> str:
        return f"nodes {self.nodes}{'' if self.expected is None else f'/{self.expected}'} joined"


class Keys:
    """The store keys of one run."""

    def __init__(self, run_id: str) -> None:
        self.prefix = f"nccldoctor/{run_id}"
        self.count = f"{self.prefix}/count"
        self.world = f"{self.prefix}/world"

    def node(self, slot: int) -> str:
        return f"{self.prefix}/node/{slot}"

    def phase(self, node_rank: int) -> str:
        return f"{self.prefix}/phase/{node_rank}"

    def results(self, node_rank: int) -> str:
        """The count of the versions of ``node_rank``'s result (its node takes the next)."""
        return f"{self.prefix}/results/{node_rank}"

    def result(self, node_rank: int, version: int) -> str:
        return f"{self.prefix}/result/{node_rank}/{version}"

    def short(self, key: str) -> str:
        """``key`` without the run's prefix, as findings quote it."""
        return key.removeprefix(self.prefix + "/")

    @property
    def verdict(self) -> str:
        """The cluster report's exit code, set by the master once that report is written."""
        return f"{self.prefix}/verdict"

    @property
    def handed(self) -> str:
        """How many nodes handed their report over (and so will read the verdict)."""
        return f"{self.prefix}/handed"

    @property
    def verdict_read(self) -> str:
        """How many nodes read the verdict: the master keeps its store up until all did."""
        return f"{self.prefix}/verdict-read"


def publish_entry(store: Any, keys: Keys, entry: NodeEntry) -> int:
    """Take a slot (the master's is 0) and write this node's entry; the slot."""
    if entry.slot != 0:
        entry.slot = int(store.add(keys.count, 1))
    store.set(keys.node(entry.slot), entry.to_json())
    return entry.slot


def gather_entries(
    store: Any,
    keys: Keys,
    expected: int | None,
    deadline: float,
    settle_s: float,
    on_join: Callable[[int], None] = lambda nodes: None,
    rejected: list[Rejected] | None = None,
    own: NodeEntry | None = None,
) -> list[NodeEntry]:
    """The master's join window: until ``expected`` nodes, the deadline, or a quiet ``settle_s``;
    ``on_join`` hears how many nodes are in (the master counted) each time that changes. Only
    entries that are node entries count (peer.node_entry); the others go to ``rejected``.
    ``own``: the master's entry (slot 0), taken as it is rather than read back."""
    found: dict[int, NodeEntry] = {0: own} if own else {}
    seen: set[int] = {0} if own else set()  # slots whose entry was read
    joined, changed, late = -1, time.monotonic(), None
    while True:
        taken = int(store.add(keys.count, 0))
        _read_entries(store, keys, taken, seen, found, rejected)
        unwritten = [slot for slot in _window(taken) if slot not in seen]
        if len(found) != joined:
            joined, changed = len(found), time.monotonic()
            on_join(max(1, joined))
        if expected is not None and joined >= expected:
            break
        if expected is not None and joined + len(unwritten) >= expected:
            # every node took its slot: one grace for all writes still under way, not one each
            late = late or time.monotonic() + WRITE_GRACE_S
            if time.monotonic() >= late:
                break
        if expected is None and joined >= 2 and time.monotonic() - changed >= settle_s:
            break
        if time.monotonic() >= deadline:
            break
        wait_a_little(store, [keys.node(unwritten[0] if unwritten else taken + 1)])  # it wakes us
    late = late or time.monotonic() + WRITE_GRACE_S
    for slot in _window(taken):
        if slot not in seen:
            try:
                store.wait([keys.node(slot)], timedelta(seconds=max(0.01, late - time.monotonic())))
            except Exception:
                continue  # took a slot but never wrote it: it is missing, named by count
            _read_entries(store, keys, taken, seen, found, rejected)
    return [found[slot] for slot in sorted(found)]


def _window(last: int) -> list[int]:
    """The slots (or versions) of 0..``last`` looked at: 0 (the master's slot) and the newest
    SCAN."""
    return [0, *range(max(1, last - SCAN + 1), last + 1)]


def _read_entries(
    store: Any,
    keys: Keys,
    taken: int,
    seen: set[int],
    found: dict[int, NodeEntry],
    rejected: list[Rejected] | None,
) -> None:
    """Reads the entries written since the last look; a bad one is rejected, once."""
    for slot in _window(taken):
        if slot in seen or not store.check([keys.node(slot)]):
            continue
        seen.add(slot)
        raw = store.get(keys.node(slot))
        entry, why = peer.node_entry(raw, slot)
        if entry is not None:
            found[slot] = entry
        else:
            name = peer.claimed_name(raw) or f"slot {slot}"
            _reject(rejected, Rejected("entry", name, keys.short(keys.node(slot)), why))


def _reject(rejected: list[Rejected] | None, rejection: Rejected) -> None:
    if rejected is not None and len(rejected) < REJECTED_KEPT:
        rejected.append(rejection)


def plan_world(run_id: str, backend: str, entries: list[NodeEntry], expected: int | None) -> World:
    """Node ranks (requested ones kept, the rest in join order), rank offsets, who is missing."""
    entries = sorted(entries, key=lambda e: e.slot)
    extra = entries[expected:] if expected is not None else []
    entries = entries[:expected] if expected is not None else entries
    taken: dict[int, NodeEntry] = {}
    clashes = []
    for entry in entries:
        want = entry.requested_rank
        if want is None:
            continue
        if want in taken or (expected is not None and want >= expected):
            clashes.append(f"{entry.name} asked for node rank {want}")
        else:
            taken[want] = entry
    free = (r for r in range(len(entries) + len(clashes) + 1) if r not in taken)
    for entry in entries:
        if entry.requested_rank is None or taken.get(entry.requested_rank) is not entry:
            taken[next(free)] = entry
    nodes, offset = [], 0
    names = unique_names({rank: e.name for rank, e in taken.items()})
    for rank in sorted(taken):
        e = taken[rank]
        nodes.append(WorldNode(rank, e.slot, names[rank], e.advertised, e.seen, e.procs, offset))
        offset += e.procs
    if backend == "auto":
        backend = "nccl" if entries and all(e.cuda for e in entries) else "gloo"
    world = World(run_id, backend, nodes, expected)
    if expected is not None and len(entries) < expected:
        present = {n.node_rank for n in nodes}
        world.missing = [f"node rank {r}" for r in range(expected) if r not in present]
        world.abort = f"only {len(entries)} of {expected} nodes joined before the deadline"
    if clashes:
        world.abort = "node ranks clash: " + "; ".join(clashes)
    world.missing += [f"{e.name} (late: the world was full)" for e in extra]
    return world


def unique_names(names: dict[int, str]) -> dict[int, str]:
    """node rank -> a name no other node has: containers started with one --hostname (or
    hosts cloned from one image) share their name, so a shared name gets ``#<node rank>``."""
    counts: dict[str, int] = {}
    for name in names.values():
        counts[name] = counts.get(name, 0) + 1
    return {r: f"{n}#{r}" if counts[n] > 1 else n for r, n in names.items()}


def wait_world(store: Any, keys: Keys, timeout_s: float) -> World:
    try:
        store.wait([keys.world], timedelta(seconds=max(0.1, timeout_s)))
        raw = store.get(keys.world)
    except Exception as exc:
        raise RendezvousError(f"the master never published the world: {exc}") from exc
    try:
        return World.from_json(raw)
    except ValueError as exc:  # written in the master's place: nothing to run in
        raise RendezvousError(f"the world in the master's store is none: {exc}") from None


def set_phase(store: Any, keys: Keys, node_rank: int, phase: str) -> None:
    """Best effort: the master names the last phase of a node that vanished."""
    try:
        store.set(keys.phase(node_rank), phase)
    except Exception:
        return


def gather_results(
    store: Any,
    keys: Keys,
    node_ranks: dict[int, str],
    deadline: float,
    rejected: list[Rejected] | None = None,
) -> tuple[dict[int, Report], dict[int, str]]:
    """The exit barrier: each node's report (``node_ranks``: node rank -> name), the first
    version of its result that is a report, waiting until ``deadline``; (results, last phases of
    the nodes that never reported one). The other versions written by the end, bad ones and a
    second report in the same node's name alike, go to ``rejected``: a node writes one."""
    results: dict[int, Report] = {}
    merged: dict[int, str] = {}  # node rank -> the key of the version taken
    read: dict[int, set[int]] = {rank: set() for rank in node_ranks}
    pending = set(node_ranks)

    def look(rank: int) -> None:
        for version, raw in _unread(store, keys, rank, read[rank]):
            key = keys.short(keys.result(rank, version))
            report, why = peer.node_result(raw)
            if report is not None and rank in pending:
                results[rank], merged[rank] = report, key
                pending.discard(rank)
                continue
            if report is not None:
                why = f"a second report in its name ({merged[rank]} was merged)"
            _reject(rejected, Rejected("result", node_ranks[rank], key, why))

    while True:
        for rank in sorted(pending):
            look(rank)
        if not pending or time.monotonic() >= deadline:
            break
        nexts = [keys.result(r, int(store.add(keys.results(r), 0)) + 1) for r in pending]
        wait_a_little(store, nexts)  # the next version of any: a node's own is one
    for rank in sorted(results):  # what was written in their names since
        look(rank)
    last_phase = {}
    for rank in pending:
        phase = store.get(keys.phase(rank)) if store.check([keys.phase(rank)]) else b"unknown"
        last_phase[rank] = _phase_name(phase)
    return results, last_phase


def _unread(store: Any, keys: Keys, rank: int, read: set[int]) -> list[tuple[int, bytes]]:
    """The versions of ``rank``'s result written since the last look (the newest SCAN), each
    once; a number taken but not yet written is looked at again next time."""
    found = []
    for version in _window(int(store.add(keys.results(rank), 0))):
        key = keys.result(rank, version)
        if version == 0 or version in read or not store.check([key]):
            continue
        read.add(version)
        found.append((version, store.get(key)))
    return found


def _phase_name(raw: bytes) -> str:
    """A phase name as a node announced it: short printable text (anyone may write the key)."""
    text = raw[:64].decode(errors="replace")
    return "".join(ch for ch in text if ch.isprintable()) or "unknown"


def wait_a_little(store: Any, keys: list[str], seconds: float = 0.2) -> None:
    """Until every key in ``keys`` is set, or ``seconds``: a loop around this wakes the moment the
    keys come, and still gets back to Python (a Ctrl-C, its deadline) every ``seconds``."""
    end = time.monotonic() + seconds
    try:
        store.wait(keys, timedelta(seconds=seconds))
    except Exception:  # timed out (DistStoreError); a store that fails at once must not spin
        time.sleep(max(0.0, end - time.monotonic()))
