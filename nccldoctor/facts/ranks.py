"""How the ranks of a `check` run ended: the subject of the ``ranks`` rules.

A rank's outcome crosses two process boundaries (docs/design.md#records): the node agent reads
it out of the worker's folder, and every node hands it to the master inside its report, where a
merge of node report files judges it exactly as the master did. In code it is a
:class:`RankOutcome`; in the document it is the ``ranks`` entry (docs/report.md#ranks), written
by :meth:`RankOutcome.to_dict` and read back by :meth:`RankOutcome.from_dict`.

What the agent reads the outcome from is the worker's own word, its ``result.json``
(:class:`RankResult`): how far the rank got and how it ended, what its collectives checked and
measured, and the DDP step. The ``ranks`` rules judge its checks (wrong sums, replicas that
differ); the node report's ``bandwidth`` and ``mnist`` sections are rank 0's. The file is another
process's output, read after that process ended in whatever way it did:
:meth:`RankResult.from_json` reads it within the JSON readers' bounds and checks every field's
type, and says why when it is no result rather than raising anything else.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from nccldoctor.facts.serde import from_dict, to_dict
from nccldoctor.jsondoc import parse


class OutcomeState(StrEnum):
    """How a rank ended, as torch.distributed.elastic's ``WorkerState`` names a worker's."""

    OK = "ok"  # exit 0 and its result.json says so
    FAILED = "failed"  # it ended with an error or a wrong result of its own
    CRASHED = "crashed"  # it died without a word: a signal, os._exit, the OOM killer
    STUCK = "stuck"  # it never finished a phase: a watchdog or its own deadline stopped it
    UNKNOWN = "unknown"  # a state this version does not know (a newer node's report)

    @classmethod
    def parse(cls, value: Any) -> OutcomeState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True)
class MessageSizes:
    """How far the collectives' message sizes got (bytes, nccl-tests' size): a rank stopped
    inside a collective names the size in flight beside the largest every rank got through."""

    phase: str | None = None
    largest_passed_bytes: int | None = None
    last_passed_bytes: int | None = None
    in_flight_bytes: int | None = None

    @classmethod
    def from_dict(cls, data: Any) -> MessageSizes | None:
        if not isinstance(data, Mapping):
            return None
        return cls(
            _text(data.get("phase")),
            _count(data.get("largest_passed_bytes")),
            _count(data.get("last_passed_bytes")),
            _count(data.get("in_flight_bytes")),
        )


@dataclass(frozen=True, kw_only=True)
class RankOutcome:
    """One rank's end: where it got to, its state, its error and the evidence of a stop. The
    fields are in the order of the document's keys."""

    rank: int
    node: str
    local_rank: int | None = None
    phase_reached: str = "startup"  # the last phase it started ("startup": none)
    state: OutcomeState
    exit_code: int | None = None
    error: str | None = None
    ended_at: float | None = None  # epoch seconds of its failing (else last) event
    stuck: str | None = None  # why it was stopped: the agent's watchdog or its own deadline
    last_nccl_lines: tuple[str, ...] = ()
    message_sizes: MessageSizes | None = None
    stacks: str | None = None  # its Python stacks, when it did not end well
    flight_recorder: str | None = None  # the path of its Flight Recorder dump
    log_path: str = ""  # its worker log; the NCCL debug files lie beside it

    @property
    def ok(self) -> bool:
        return self.state is OutcomeState.OK

    @property
    def last_nccl_line(self) -> str | None:
        return self.last_nccl_lines[-1] if self.last_nccl_lines else None

    @property
    def in_flight_bytes(self) -> int:
        """The message size it stopped with in flight (0: none known)."""
        return (self.message_sizes.in_flight_bytes if self.message_sizes else None) or 0

    def to_dict(self) -> dict[str, Any]:
        """The document's ``ranks`` entry, keys in the order the report has always had."""
        return {**to_dict(self), "state": self.state.value}  # the plain string, not the enum

    @classmethod
    def from_dict(cls, data: Any) -> RankOutcome:
        """An entry of a report's ``ranks``, read leniently: a field of the wrong type is
        unknown, a state this version does not know is ``UNKNOWN``.

        Raises:
            ValueError: the entry is no rank outcome (not an object, no integer rank, no state:
                ``watch`` and older producers write other rows).
        """
        if not isinstance(data, Mapping) or "state" not in data:
            raise ValueError("not a rank outcome: no state")
        rank = data.get("rank")
        if isinstance(rank, bool) or not isinstance(rank, int):
            raise ValueError(f"not a rank outcome: rank {rank!r}")
        lines = data.get("last_nccl_lines")
        return cls(
            rank=rank,
            node=str(data.get("node") or ""),
            state=OutcomeState.parse(data.get("state")),
            phase_reached=_text(data.get("phase_reached")) or "startup",
            local_rank=_integer(data.get("local_rank")),
            exit_code=_integer(data.get("exit_code")),
            error=_text(data.get("error")),
            ended_at=_seconds(data.get("ended_at")),
            stuck=_text(data.get("stuck")),
            last_nccl_lines=tuple(str(line) for line in lines) if isinstance(lines, list) else (),
            message_sizes=MessageSizes.from_dict(data.get("message_sizes")),
            stacks=_text(data.get("stacks")),
            flight_recorder=_text(data.get("flight_recorder")),
            log_path=_text(data.get("log_path")) or "",
        )


@dataclass(frozen=True)
class CorrectnessRow:
    """One exact allreduce: ``count`` elements of ``dtype`` and how many came back wrong."""

    dtype: str
    count: int
    ok: bool
    wrong: int


@dataclass(frozen=True)
class Skipped:
    """A dtype the correctness phase left out, and why (its arithmetic, or the backend's words)."""

    dtype: str
    reason: str


@dataclass(frozen=True)
class BandwidthRow:
    """One size of the bandwidth sweep in nccl-tests' columns, its time the max over ranks."""

    size_bytes: int
    count: int
    dtype: str
    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    wrong: int
    iters: int
    time_combine: str = "max"


@dataclass(frozen=True)
class Checksum:
    """One rank's DDP parameters after the steps: their float64 sum and the sha256 of their
    bytes (replicas agree bit for bit)."""

    rank: int
    sum: float
    sha256: str


@dataclass(frozen=True)
class MnistResult:
    """The DDP step: the data it trained on and the loss before and after."""

    source: str  # "real" | "synthetic"
    path: str | None  # the images file read, when real
    reason: str | None  # why synthetic data was used, when it was
    samples: int
    steps: int
    loss_before: float
    loss_after: float
    param_checksum: Checksum  # this rank's own, before the ranks compare theirs


@dataclass(frozen=True)
class RankResult:
    """One rank's ``result.json``; the fields in the order of the file's keys."""

    rank: int
    node: str
    group_rank: int
    local_rank: int
    backend: str
    world_size: int
    pid: int
    ok: bool = False
    error: str | None = None
    exit_code: int | None = None
    phase_reached: str = "init"
    correctness: list[CorrectnessRow] = field(default_factory=list)
    correctness_skipped: list[Skipped] = field(default_factory=list)
    bandwidth: list[BandwidthRow] = field(default_factory=list)
    bandwidth_not_run: list[int] = field(default_factory=list)  # sizes the budget left out
    # How far the message sizes got: a rank stopped inside a collective names the size it
    # stalled at next to the largest one every rank got through (an MTU black hole).
    message_sizes: MessageSizes = field(default_factory=MessageSizes)
    mnist: MnistResult | None = None
    params_identical: bool | None = None
    checksums: list[Checksum] = field(default_factory=list)  # every rank's, by rank

    @classmethod
    def from_json(cls, text: str) -> RankResult:
        """The result ``text`` holds.

        Raises:
            ValueError: saying why it is none: not JSON within the readers' bounds, not an
                object, a field missing or of the wrong type.
        """
        data = parse(text)
        if not isinstance(data, dict):
            raise ValueError(f"not a JSON object but {type(data).__name__}")
        try:
            return from_dict(cls, data, strict=True)
        except TypeError as exc:
            raise ValueError(f"not a rank's result: {exc}") from None


def outcomes(rows: Sequence[Any]) -> list[RankOutcome] | None:
    """Every row as a rank outcome, or None when one is not (a report another producer wrote)."""
    try:
        return [RankOutcome.from_dict(row) for row in rows]
    except ValueError:
        return None


@dataclass(frozen=True)
class RanksSeen:
    # The ranks that did not end well, cause first (``forensics/behind.py`` orders them, once).
    stopped: Sequence[RankOutcome]
    results: Mapping[int, RankResult] = field(default_factory=dict)  # result.json by rank
    # Sentences naming nodes that stopped reporting; when they explain every rank's end, every
    # rank is a consequence.
    lost: Sequence[str] = ()
    # The nodes a cause seen before the workers puts at fault (their ephemeral ports dropped):
    # a rank there comes first, a rank stuck elsewhere waited on them.
    at_fault: Sequence[str] = ()


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _count(value: Any) -> int | None:
    number = _integer(value)
    return number if number is not None and number >= 0 else None


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None
