"""Test-only fault hooks for the worker: ``NCCLDOCTOR_FAULT``, inert unless set.

``NCCLDOCTOR_FAULT="<kind>:<phase>:rank=<r>[,<kind>:<phase>:rank=<r>]"`` makes rank ``r`` misbehave
inside ``phase`` the way real jobs do: ``hang`` sleeps forever before the collective (a rank that
never arrives), ``crash`` raises RuntimeError, ``exit`` ends the process with status 7 (a rank
killed without a word), ``wrong`` corrupts this rank's contribution so the exact check fails.
The value is parsed strictly: a malformed one raises ``FaultSpecError`` and the worker reports
it in result.json instead of running a test the user did not ask for.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

from nccldoctor.cluster.records import WORKER_PHASES

ENV_VAR = "NCCLDOCTOR_FAULT"
KINDS = ("hang", "crash", "exit", "wrong")
# "wrong" needs an exact check to defeat: only these phases have one.
WRONG_PHASES = ("allreduce_correctness", "bandwidth", "checksum")
# The correctness phase is also spelled "allreduce" (NCCLDOCTOR_FAULT=hang:allreduce:rank=1).
PHASE_ALIASES = {"allreduce": "allreduce_correctness"}
EXIT_STATUS = 7


class FaultSpecError(ValueError):
    """NCCLDOCTOR_FAULT is set but not of the documented form."""


@dataclass(frozen=True)
class Fault:
    kind: str
    phase: str
    rank: int


def parse_faults(text: str) -> list[Fault]:
    """Parse the whole NCCLDOCTOR_FAULT value; any malformed item raises FaultSpecError."""
    faults = []
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) != 3 or not parts[2].startswith("rank="):
            raise FaultSpecError(f"{ENV_VAR} item {item!r} is not <kind>:<phase>:rank=<r>")
        kind, phase, rank_text = parts[0], PHASE_ALIASES.get(parts[1], parts[1]), parts[2][5:]
        if kind not in KINDS:
            raise FaultSpecError(f"{ENV_VAR} kind {kind!r} unknown; kinds: {', '.join(KINDS)}")
        if phase not in WORKER_PHASES:
            raise FaultSpecError(
                f"{ENV_VAR} phase {parts[1]!r} unknown; phases: {', '.join(WORKER_PHASES)}"
            )
        if kind == "wrong" and phase not in WRONG_PHASES:
            raise FaultSpecError(
                f"{ENV_VAR} 'wrong' needs a checked phase ({', '.join(WRONG_PHASES)}), got {phase!r}"
            )
        if not rank_text.isdigit():
            raise FaultSpecError(f"{ENV_VAR} rank {rank_text!r} is not a non-negative integer")
        faults.append(Fault(kind, phase, int(rank_text)))
    return faults


class FaultPlan:
    """The faults that apply to one rank; every method is a no-op when there are none."""

    def __init__(self, faults: list[Fault], rank: int) -> None:
        self.faults = [f for f in faults if f.rank == rank]

    @classmethod
    def from_env(cls, env: Mapping[str, str], rank: int) -> FaultPlan:
        text = env.get(ENV_VAR, "")
        return cls(parse_faults(text) if text.strip() else [], rank)

    def enter_phase(self, phase: str) -> None:
        """Called at the start of each phase, before its collective."""
        for fault in self.faults:
            if fault.phase != phase:
                continue
            if fault.kind == "hang":
                hang_forever()
            if fault.kind == "crash":
                raise RuntimeError(f"{ENV_VAR}: injected crash in phase {phase}")
            if fault.kind == "exit":
                os._exit(EXIT_STATUS)

    def corrupts(self, phase: str) -> bool:
        return any(f.kind == "wrong" and f.phase == phase for f in self.faults)


def hang_forever() -> None:
    """Sleep until killed: what a rank stuck before a collective looks like (named in stacks)."""
    while True:
        time.sleep(3600)
