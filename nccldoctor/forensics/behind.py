"""Which rank is behind: the order of causes among ranks that stopped, for check and watch alike.

The rank that stopped first is the cause; the others stopped because of it. Evidence decides in
this order: a rank on a node that a cause seen before the workers puts at fault (``check``: its
ephemeral ports dropped), a rank the agent's watchdog had to stop, the earliest phase reached,
the fewest collectives issued (Flight Recorder, only when every rank's count is known), a main
thread outside torch.distributed before one waiting inside a collective (that one waits for a
peer), then the earliest end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TypeVar

from nccldoctor.facts.ranks import OutcomeState, RankOutcome
from nccldoctor.forensics.stacks import Frame, in_collective, main_thread_frames, user_frame

T = TypeVar("T")


@dataclass(frozen=True)
class Position:
    """How far one rank got, as its evidence shows."""

    at_fault: bool = False  # on a node a cause seen before the workers names
    stuck: bool = False  # the agent's watchdog had to stop it
    phase: int = 0  # the index of the phase it reached (-1: it never started one)
    last_seq: int | None = None  # its last collective's sequence number (Flight Recorder)
    in_collective: bool = False  # its main thread waits inside torch.distributed
    ended_at: float = math.inf
    rank: int = 0


def cause_order(items: Sequence[T], position: Callable[[T], Position]) -> list[T]:
    """``items`` ordered cause first (see the module's docstring)."""
    return sorted(items, key=_keys(items, position))


def behind(items: Sequence[T], position: Callable[[T], Position]) -> list[T]:
    """The items at the least progress, or ``[]`` when every item got equally far."""
    progress = _keys(items, position, with_end=False)
    ordered = cause_order(items, position)
    if not ordered or all(progress(i) == progress(ordered[0]) for i in ordered):
        return []
    return [i for i in ordered if progress(i) == progress(ordered[0])]


def _keys(
    items: Sequence[T], position: Callable[[T], Position], with_end: bool = True
) -> Callable[[T], tuple]:
    counted = all(position(i).last_seq is not None for i in items)

    def key(item: T) -> tuple:
        p = position(item)
        progress = (not p.at_fault, not p.stuck, p.phase, p.last_seq if counted else 0,
                    p.in_collective)  # fmt: skip
        return (*progress, p.ended_at, p.rank) if with_end else progress

    return key


def stopped_at(stacks: str | None) -> Frame | None:
    """Where the main thread stopped in the user's code: its innermost frame outside libraries,
    with the loop variables (step, epoch) when py-spy read its locals."""
    return user_frame(main_thread_frames(stacks or ""))


def _inside_collective(stacks: str | None) -> bool:
    """The rank's main thread stopped inside torch.distributed: it waits for a peer, so among
    ranks stuck in one phase it is not the one the others wait for."""
    return in_collective(main_thread_frames(stacks or ""))


def culprits(
    ranks: Sequence[RankOutcome], phases: Sequence[str], at_fault: Collection[str] = ()
) -> list[RankOutcome]:
    """The ranks of a `check` run that did not end well, cause first; ``phases``: the worker
    phases in order; ``at_fault``: the nodes a cause seen before the workers names."""

    def position(r: RankOutcome) -> Position:
        return Position(
            at_fault=r.node in at_fault,
            stuck=r.state is OutcomeState.STUCK,
            phase=phases.index(r.phase_reached) if r.phase_reached in phases else -1,
            in_collective=_inside_collective(r.stacks),
            ended_at=r.ended_at or math.inf,
            rank=r.rank,
        )

    return cause_order([r for r in ranks if not r.ok], position)
