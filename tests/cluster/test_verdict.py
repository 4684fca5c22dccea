"""The master's verdict through its store: every node exits with the cluster's exit code."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from torch.distributed import TCPStore

from nccldoctor.cluster.agent import gather, rendezvous


def stores():
    master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                      timeout=timedelta(seconds=5))  # fmt: skip
    node = TCPStore("127.0.0.1", master.port, is_master=False, timeout=timedelta(seconds=5))
    return master, node


def test_a_node_gets_the_verdict_the_master_announces_later():
    master, node = stores()
    keys = rendezvous.Keys("run1")
    later = threading.Timer(0.5, gather.announce_verdict, (master, keys, 1))
    later.start()
    started = time.monotonic()
    assert gather.await_verdict(node, keys, 10) == 1
    assert 0.4 < time.monotonic() - started < 5  # woke when it came, not at the deadline


def test_no_verdict_by_the_deadline_is_none():
    _master, node = stores()
    started = time.monotonic()
    assert gather.await_verdict(node, rendezvous.Keys("run2"), 0.6) is None
    assert time.monotonic() - started < 3


def test_a_master_gone_or_a_junk_verdict_is_none():
    master, node = stores()
    keys = rendezvous.Keys("run3")
    master.set(keys.verdict, "not a number")
    assert gather.await_verdict(node, keys, 1) is None
    del master  # the store's server goes with it
    assert gather.await_verdict(node, rendezvous.Keys("run4"), 5) is None
