"""Rendezvous on a torch TCPStore hosted by the master agent: who came, and who is who.

Keys live under ``nccldoctor/<run_id>/`` with one writer each (STYLE rule 10): every node takes a
slot with ``add(count)`` and writes ``node/<slot>`` (its name, addresses, process count and
Facts); the master alone writes ``world`` (node ranks, global rank offsets, who is missing);
each node writes its own ``phase/<node_rank>`` and ``result/<node_rank>``. Readers wait with a
deadline. torch is imported only here and only when a store is made.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

# the store helpers live where watch meets too; the agent reaches them through this module
from nccldoctor.meet import RendezvousError, connect_store, host_store  # noqa: F401


@dataclass
class NodeEntry:
    """One node as it joined; ``facts`` is the serialised NodeFacts."""

    slot: int
    name: str
    advertised: str = ""
    seen: str = ""
    procs: int = 1
    cuda: bool = False
    requested_rank: int | None = None
    skew_s: float = 0.0
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass
class WorldNode:
    node_rank: int
    slot: int
    name: str
    address: str
    seen: str
    procs: int
    rank_offset: int  # global rank of this node's local rank 0


@dataclass
class World:
    run_id: str
    backend: str
    nodes: list[WorldNode]
    expected: int | None
    missing: list[str] = field(default_factory=list)
    abort: str | None = None  # why the run stops after rendezvous (missing nodes, clashes)

    @property
    def world_size(self) -> int:
        return sum(n.procs for n in self.nodes)

    def node(self, slot: int) -> WorldNode | None:
        return next((n for n in self.nodes if n.slot == slot), None)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> World:
        data = json.loads(text)
        data["nodes"] = [WorldNode(**n) for n in data["nodes"]]
        return cls(**data)


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

    def result(self, node_rank: int) -> str:
        return f"{self.prefix}/result/{node_rank}"

    @property
    def verdict(self) -> str:
        """The cluster report's exit code, set by the master once that report is written."""
        return f"{self.prefix}/verdict"


def publish_entry(store: Any, keys: Keys, entry: NodeEntry) -> int:
    """Take a slot (the master's is 0) and write this node's entry; the slot."""
    if entry.slot != 0:
        entry.slot = int(store.add(keys.count, 1))
    store.set(keys.node(entry.slot), json.dumps(asdict(entry)))
    return entry.slot


def gather_entries(
    store: Any,
    keys: Keys,
    expected: int | None,
    deadline: float,
    settle_s: float,
    on_join: Callable[[int], None] = lambda nodes: None,
) -> list[NodeEntry]:
    """The master's join window: until ``expected`` nodes, the deadline, or a quiet ``settle_s``;
    ``on_join`` hears how many nodes are in (the master counted) each time that changes."""
    joined, changed = 0, time.monotonic()
    on_join(1)
    while True:
        now = int(store.add(keys.count, 0))
        if now != joined:
            joined, changed = now, time.monotonic()
            on_join(joined + 1)
        if expected is not None and joined + 1 >= expected:
            break
        if expected is None and joined >= 1 and time.monotonic() - changed >= settle_s:
            break
        if time.monotonic() >= deadline:
            break
        wait_a_little(store, [keys.node(joined + 1)])  # the next node's entry wakes us
    entries = []
    late = time.monotonic() + 2  # one grace for every slot taken but not yet written, not one each
    for slot in range(0, joined + 1):
        try:
            store.wait([keys.node(slot)], timedelta(seconds=max(0.01, late - time.monotonic())))
            entries.append(NodeEntry(**json.loads(store.get(keys.node(slot)))))
        except Exception:
            continue  # took a slot but never wrote it: it is missing, named by count below
    return entries


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


def given_name(world_name: str) -> str:
    """The name a node joined under (a hostname never holds "#")."""
    base, mark, rank = world_name.rpartition("#")
    return base if mark and rank.isdigit() else world_name


def wait_world(store: Any, keys: Keys, timeout_s: float) -> World:
    try:
        store.wait([keys.world], timedelta(seconds=max(0.1, timeout_s)))
        return World.from_json(store.get(keys.world))
    except Exception as exc:
        raise RendezvousError(f"the master never published the world: {exc}") from exc


def set_phase(store: Any, keys: Keys, node_rank: int, phase: str) -> None:
    """Best effort: the master names the last phase of a node that vanished."""
    try:
        store.set(keys.phase(node_rank), phase)
    except Exception:
        return


def gather_results(
    store: Any, keys: Keys, node_ranks: list[int], deadline: float
) -> tuple[dict[int, dict], dict[int, str]]:
    """The exit barrier: each node's report, waiting until ``deadline``; (results, last phases
    of the nodes that never reported)."""
    results: dict[int, dict] = {}
    pending = set(node_ranks)
    while pending:
        for rank in sorted(pending):
            if store.check([keys.result(rank)]):
                results[rank] = json.loads(store.get(keys.result(rank)))
                pending.discard(rank)
        if not pending or time.monotonic() >= deadline:
            break
        wait_a_little(store, [keys.result(rank) for rank in pending])
    last_phase = {}
    for rank in pending:
        last_phase[rank] = (
            store.get(keys.phase(rank)).decode() if store.check([keys.phase(rank)]) else "unknown"
        )
    return results, last_phase


def wait_a_little(store: Any, keys: list[str], seconds: float = 0.2) -> None:
    """Until every key in ``keys`` is set, or ``seconds``: a loop around this wakes the moment the
    keys come, and still gets back to Python (a Ctrl-C, its deadline) every ``seconds``."""
    end = time.monotonic() + seconds
    try:
        store.wait(keys, timedelta(seconds=seconds))
    except Exception:  # timed out (DistStoreError); a store that fails at once must not spin
        time.sleep(max(0.0, end - time.monotonic()))
