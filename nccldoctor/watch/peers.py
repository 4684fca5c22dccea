"""Watchers on several nodes meet through a TCPStore on ``--master``, as `check`'s agents do.

The watcher on the node that owns the master address hosts the store; the others connect. Each
watcher takes a slot. When any watcher sees its part of the job stop moving it sets ``hang``;
every watcher that sees the key collects its own ranks' evidence and publishes it under
``evidence/<slot>``, so each report holds every node's ranks and the rank behind can be named
across nodes. A lost store never stops the local watch.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from typing import Any

from nccldoctor.facts import from_dict
from nccldoctor.meet import RendezvousError, connect_store, host_store, is_local
from nccldoctor.watch.evidence import RankEvidence

PREFIX = "nccldoctor/watch"
HANG_KEY = f"{PREFIX}/hang"
SLOTS_KEY = f"{PREFIX}/slots"


class WatchPeers:
    def __init__(self, store: Any, node: str) -> None:
        self.store, self.node = store, node
        self.slot = int(store.add(SLOTS_KEY, 1))

    @classmethod
    def join(cls, master: str, port: int, node: str, timeout_s: float) -> WatchPeers:
        """Host the store when this node owns ``master``, else connect until the deadline."""
        if is_local(master):
            try:
                return cls(host_store(port, timeout_s), node)
            except Exception:  # another watcher on this host already hosts it: join that one
                pass
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return cls(connect_store(master, port, 2.0), node)
            except RendezvousError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)

    def hang_announced(self) -> bool:
        try:
            return bool(self.store.check([HANG_KEY]))
        except Exception:
            return False

    def announce_hang(self) -> None:
        try:
            self.store.set(HANG_KEY, json.dumps({"node": self.node, "t": time.time()}))
        except Exception:
            return

    def publish(self, evidence: list[RankEvidence]) -> None:
        try:
            self.store.set(
                f"{PREFIX}/evidence/{self.slot}", json.dumps([asdict(e) for e in evidence])
            )
        except Exception:
            return

    def gather(self, deadline: float) -> list[RankEvidence]:
        """The other nodes' evidence: waits for every slot taken, or until ``deadline``."""
        found: dict[int, list[RankEvidence]] = {}
        while True:
            try:
                slots = int(self.store.add(SLOTS_KEY, 0))
                for slot in range(1, slots + 1):
                    key = f"{PREFIX}/evidence/{slot}"
                    if slot != self.slot and slot not in found and self.store.check([key]):
                        data = json.loads(self.store.get(key))
                        found[slot] = [from_dict(RankEvidence, item) for item in data]
            except Exception:
                break
            if len(found) >= slots - 1 or time.monotonic() >= deadline:
                break
            time.sleep(0.25)
        return [item for items in found.values() for item in items]
