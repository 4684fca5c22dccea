"""The end of the all-node run, told through the master's store: the first node whose rank ended
before the run's last phase (an error, a crash, its watchdog stopping it) writes which rank and
where; every node's watchdog reads it and stops its ranks still waiting for that one, rather than
letting them wait out their own deadlines (docs/design.md#isolation): a collective with a member
gone never completes.

The key holds one :class:`WorkersEnded`; whoever reaches the store may write it, so it is read
back with every field checked, and one that is not is no end.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from nccldoctor.cluster.records import WORKER_PHASES
from nccldoctor.jsondoc import as_int, json_object
from nccldoctor.meet import RendezvousError, connect_store

WHY_CHARS = 300
NAME_CHARS = 255
MAX_VALUE_BYTES = 4096
STARTUP = "startup"  # a rank that ended before its first phase
STORE_S = 2.0  # one call to the store: what a master gone silent costs the watchdog, once


@dataclass(frozen=True)
class WorkersEnded:
    """A rank that ended before the run's last phase: where, and how."""

    node: str
    rank: int
    phase: str  # a worker phase, or STARTUP
    why: str

    def to_json(self) -> str:
        return json.dumps({"node": self.node[:NAME_CHARS], "rank": self.rank,
                           "phase": self.phase, "why": self.why[:WHY_CHARS]})  # fmt: skip

    @classmethod
    def from_json(cls, text: str | bytes) -> WorkersEnded | None:
        """The record, or None when ``text`` is none (wrong JSON, a field's type or bound)."""
        if len(text) > MAX_VALUE_BYTES:
            return None
        data = json_object(text)
        if data is None:
            return None
        node, rank, phase, why = (data.get(k) for k in ("node", "rank", "phase", "why"))
        if not (isinstance(node, str) and 0 < len(node) <= NAME_CHARS):
            return None
        if as_int(rank) is None or rank < 0 or phase not in (STARTUP, *WORKER_PHASES):
            return None
        if not (isinstance(why, str) and len(why) <= WHY_CHARS):
            return None
        return cls(node, rank, phase, why)

    def behind(self, phase: str | None) -> bool:
        """Whether a rank still in ``phase`` had not reached the phase this rank ended in."""
        order = (STARTUP, *WORKER_PHASES)
        return order.index(phase or STARTUP) < order.index(self.phase)

    def sentence(self) -> str:
        return f"rank {self.rank} on node {self.node} ended in {self.phase} ({self.why})"


class WorldEnd:
    """The all-node run's end in the master's store, under the run's ``prefix``; best effort:
    a store that failed once is no end from then on, and every rank keeps its own deadline."""

    def __init__(self, store: Any, prefix: str) -> None:
        self._store = store
        self.key = f"{prefix}/workers-ended"
        self._failed = False

    @classmethod
    def connect(cls, master: str, port: int, prefix: str) -> WorldEnd | None:
        """Through a store client of its own, whose every call ends within ``STORE_S``: the
        watchdog looks twice a second and must not wait out the node's longer store timeout
        for a master gone silent. None when the store cannot be reached now."""
        try:
            return cls(connect_store(master, port, STORE_S), prefix)
        except RendezvousError:
            return None

    def end(self, ended: WorkersEnded) -> None:
        """Tell the other nodes, unless a rank ended first (its end stays the one told)."""
        if self._failed:
            return
        try:
            self._store.compare_set(self.key, "", ended.to_json())
        except Exception:  # the store is gone: the others keep their deadlines
            self._failed = True

    def ended(self) -> WorkersEnded | None:
        if self._failed:
            return None
        try:
            if not self._store.check([self.key]):
                return None
            return WorkersEnded.from_json(self._store.get(self.key))
        except Exception:  # the store is gone: no end heard
            self._failed = True
            return None
