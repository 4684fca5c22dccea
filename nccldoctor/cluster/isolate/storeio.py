"""The master's store as the isolation rounds read it: a message of messages.py at a key, None
while there is none or while what is there is refused (with why), and waits that end at their
deadline whatever the store does."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any, TypeVar

from nccldoctor.cluster.isolate.messages import MemberResult, Plan, RoundCall, RunState

MAX_VALUE_BYTES = 64 << 10  # a member's result is a few hundred bytes
POLL_S = 0.2  # how often a refused value is read again: a node's own may replace it
T = TypeVar("T", RunState, Plan, RoundCall, MemberResult)


def read_message(
    store: Any, key: str, kind: type[T], name: str, refused: dict[str, str]
) -> T | None:
    """The message of ``kind`` at ``key``, None when there is none yet or it is refused (then
    ``refused[name]`` says why, until a later read is not)."""
    value = value_at(store, key)
    if value is None:
        return None
    try:
        if len(value) > MAX_VALUE_BYTES:
            raise ValueError(f"{len(value)} bytes, more than the {MAX_VALUE_BYTES} a node writes")
        message = kind.from_json(value)
    except ValueError as exc:
        refused[name] = str(exc)[:200]
        return None
    refused.pop(name, None)
    return message


def value_at(store: Any, key: str) -> bytes | None:
    """The value at ``key``, None when unset."""
    try:
        if not store.check([key]):
            return None
        raw = store.get(key)
    except Exception:  # the store went away: as good as unset, the deadline decides
        return None
    return raw


def wait_message(
    store: Any, key: str, kind: type[T], deadline: float, refused: dict[str, str]
) -> T | None:
    """The master's message of ``kind`` at ``key`` once it is one, or None at the deadline
    (``refused["master"]``: why what was there was not)."""
    while True:
        message = read_message(store, key, kind, "master", refused)
        if message is not None or time.monotonic() >= deadline:
            return message
        left = min(1.0, max(0.05, deadline - time.monotonic()))
        wait_for(store, [] if refused else [key], left)


def wait_for(store: Any, keys: list[str], seconds: float) -> None:
    """Until the keys are set or ``seconds`` (no keys: ``seconds``); a store that fails at once
    must not spin."""
    end = time.monotonic() + seconds
    if not keys:
        time.sleep(max(0.0, min(seconds, POLL_S)))
        return
    try:
        store.wait(keys, timedelta(seconds=seconds))
    except Exception:  # timed out (DistStoreError), or the store is gone
        time.sleep(max(0.0, end - time.monotonic()))
