"""What the isolation rounds write to the master's store and read back (docs/design.md#isolation,
docs/design.md#records): a node's state after the all-node run (:class:`RunState`), the master's
plan (:class:`Plan`) and each round's call (:class:`RoundCall`), a member's result of its group's
test (:class:`MemberResult`).

Whoever reaches the store may write a key: ``from_json`` checks every field's type and bound and
raises ValueError saying why the text is no such message, never anything else; the reader counts
that as no answer from that node.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from nccldoctor.jsondoc import parse

WHY_CHARS = 500
ERROR_CHARS = 300
NAME_CHARS = 255  # a node's name is a host name's length
INTERFACE_NAME = re.compile(r"[\w.:@-]{1,15}")  # what a node says it binds to, as Linux names it
STATUSES = ("ok", "error", "timeout")
MAX_SIZES = 8  # a member times three sizes (grouptest.SIZES)
MAX_BYTES = 1 << 40


@dataclass(frozen=True)
class RunState:
    """How a node's part of the all-node run went, and the interface its groups will use ("":
    the backend's own choice)."""

    ok: bool
    why: str = ""
    interface: str = ""

    @classmethod
    def of(cls, ok: bool, why: str, interface: str | None) -> RunState:
        """The state as a node writes it: its why cut to the bound, an interface that is no
        Linux name left to the backend."""
        name = interface if interface and INTERFACE_NAME.fullmatch(interface) else ""
        return cls(bool(ok), why[:WHY_CHARS], name)

    def to_json(self) -> str:
        return _dumps(ok=self.ok, why=self.why, interface=self.interface)

    @classmethod
    def from_json(cls, text: str | bytes) -> RunState:
        """Raises:
        ValueError: not JSON within the readers' bounds, or not a node's state."""
        data = _object(text, "a node's state")
        interface = _text(data, "interface", WHY_CHARS, default="")
        if interface and not INTERFACE_NAME.fullmatch(interface):
            raise ValueError(f"not a node's state: interface {_shown(interface)} is no Linux name")
        return cls(_flag(data, "ok"), _text(data, "why", WHY_CHARS, default=""), interface)


@dataclass(frozen=True)
class Plan:
    """The master's word on whether the rounds run, and why."""

    run: bool
    why: str

    def to_json(self) -> str:
        return _dumps(run=self.run, why=self.why[:WHY_CHARS])

    @classmethod
    def from_json(cls, text: str | bytes) -> Plan:
        """Raises:
        ValueError: not JSON within the readers' bounds, or not the master's plan."""
        data = _object(text, "a plan")
        return cls(_flag(data, "run"), _text(data, "why", WHY_CHARS, default=""))


@dataclass(frozen=True)
class RoundCall:
    """One round as the master calls it: its groups of node names, or ``done``."""

    groups: tuple[tuple[str, ...], ...] = ()
    done: bool = False

    def to_json(self) -> str:
        return _dumps(groups=[list(g) for g in self.groups], done=self.done)

    @classmethod
    def from_json(cls, text: str | bytes) -> RoundCall:
        """Raises:
        ValueError: not JSON within the readers' bounds, or not a round (a group that is no
            list of names, a node in two groups, groups in a round that says done)."""
        data = _object(text, "a round")
        done = _flag(data, "done", default=False)
        groups = data.get("groups", [])
        if not isinstance(groups, list):
            raise ValueError(f"not a round: groups is {type(groups).__name__}, not a list")
        seen: set[str] = set()
        for group in groups:
            if not isinstance(group, list) or not group:
                raise ValueError("not a round: a group is no list of node names")
            for name in group:
                if not isinstance(name, str) or not 0 < len(name) <= NAME_CHARS:
                    raise ValueError(f"not a round: {_shown(name)} is no node's name")
                if name in seen:
                    raise ValueError(f"not a round: {_shown(name)} is in two groups")
                seen.add(name)
        if done and groups:
            raise ValueError("not a round: done, with groups")
        return cls(tuple(tuple(g) for g in groups), done)


@dataclass
class MemberResult:
    """What one member measured in its group's test; filled in as it measures."""

    status: str = "timeout"  # ok | error | timeout
    init_s: float | None = None
    seconds: list[tuple[int, float]] = field(default_factory=list)  # (bytes, s per iteration)
    error: str = ""

    def to_json(self) -> str:
        return _dumps(
            status=self.status,
            init_s=self.init_s,
            seconds=[list(row) for row in self.seconds],
            error=self.error[:ERROR_CHARS],
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> MemberResult:
        """Raises:
        ValueError: not JSON within the readers' bounds, or not a member's result (a status
            it does not write, a time that is no finite number of seconds, a size out of
            bounds, more sizes than it times)."""
        data = _object(text, "a member's result")
        status = data.get("status")
        if status not in STATUSES:
            raise ValueError(f"not a member's result: status {_shown(status)}")
        init = data.get("init_s")
        if init is not None and not _seconds(init):
            raise ValueError(f"not a member's result: init_s {_shown(init)}")
        rows = data.get("seconds", [])
        if not isinstance(rows, list) or len(rows) > MAX_SIZES:
            raise ValueError(f"not a member's result: seconds is no list of {MAX_SIZES} or fewer")
        for row in rows:
            if not (isinstance(row, list) and len(row) == 2 and _size(row[0]) and _seconds(row[1])):
                raise ValueError(f"not a member's result: {_shown(row)} is no (bytes, seconds)")
        return cls(
            status,
            None if init is None else float(init),
            [(size, float(s)) for size, s in rows],
            _text(data, "error", ERROR_CHARS, default=""),
        )


def _dumps(**fields: Any) -> str:
    return json.dumps(fields)


def _object(text: str | bytes, what: str) -> dict[str, Any]:
    data = parse(text.decode(errors="replace") if isinstance(text, bytes) else text)
    if not isinstance(data, dict):
        raise ValueError(f"not {what}: a JSON {type(data).__name__}, not an object")
    return data


def _flag(data: dict[str, Any], key: str, default: bool | None = None) -> bool:
    if key not in data and default is None:
        raise ValueError(f"no {key}")
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise ValueError(f"{key} is {_shown(value)}, not true or false")
    return value


def _text(data: dict[str, Any], key: str, limit: int, default: str) -> str:
    value = data.get(key, default)
    if not isinstance(value, str):
        raise ValueError(f"{key} is {type(value).__name__}, not text")
    if len(value) > limit:
        raise ValueError(f"{key} is {len(value)} characters, more than the {limit} written")
    return value


def _shown(value: Any) -> str:
    """A value as the JSON it came in, cut for a sentence."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _seconds(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def _size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_BYTES
