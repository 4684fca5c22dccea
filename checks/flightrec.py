"""Checks over PyTorch Flight Recorder dumps matched across ranks (``scope="flightrec"``).

The subject is a :class:`~nccldoctor.forensics.flightrec.FlightRecorderReading`: each process
group's first divergence (a rank that never issued a collective, or ranks that issued it with a
different op, sizes, dtypes or state), its members without a dump, and each file's reading.
How the dumps are matched: docs/flight-recorder.md.
"""

from __future__ import annotations

from collections.abc import Iterator

from checks import Problem, check
from nccldoctor.forensics.frreading import (
    Divergence,
    FlightRecorderReading,
    GroupReading,
    RankTail,
    Side,
    ranges,
)
from nccldoctor.model import Severity

_KIND_WORDS = {
    "op": "a different collective",
    "size": "different sizes",
    "dtype": "different dtypes",
    "state": "different states",
}


def _divergences(reading: FlightRecorderReading, kinds: set[str]) -> Iterator[tuple]:
    for group in reading.groups:
        for d in group.divergences:
            if d.kind in kinds:
                yield group, d


def _what(d: Divergence) -> str:
    return f"{'p2p op' if d.p2p else 'collective'} #{d.seq} ({d.op})"


def _side_line(s: Side) -> str:
    return (
        f"{ranges(s.ranks)}: {s.op} input {s.input_sizes} output {s.output_sizes} "
        f"dtypes {s.dtypes} state {s.state}"
    )


def _tail_lines(t: RankTail) -> list[str]:
    if t.last_seq is None:
        return [f"rank {t.rank}: no entry of this process group in its dump"]
    done = f"; last completed #{t.completed_seq} {t.completed_op}" if t.completed_seq else ""
    lines = [f"rank {t.rank}: last op #{t.last_seq} {t.last_op} ({t.last_state}){done}"]
    return lines + [f"  {frame}" for frame in t.stack]


def _tail_phrase(t: RankTail) -> str:
    if t.last_seq is None:
        return f"rank {t.rank} has no entry of it"
    at = f" at {t.where}" if t.where else ""
    return f"rank {t.rank}'s last was #{t.last_seq} {t.last_op}{at}"


@check("flightrec.ranks-missing", area="logs", category="collective_timeout_hang",
       scope="flightrec")  # fmt: skip
def ranks_missing(reading: FlightRecorderReading) -> Iterator[Problem]:
    """Ranks of a process group never issued a collective the others issued: the hang's culprit."""
    for group, d in _divergences(reading, {"missing"}):
        joined = sorted(r for s in d.sides for r in s.ranks)
        culprit = d.culprits[0] if d.culprits else None
        last = f"; {_tail_phrase(culprit)}" if culprit else ""
        yield Problem(
            Severity.FAIL,
            f"Flight Recorder: {ranges(d.missing)} never joined {_what(d)} of {group.label} "
            f"that {ranges(joined)} issued{last}.",
            [f"{group.label}: {group.matched} collectives matched before #{d.seq}"]
            + [_side_line(s) for s in d.sides]
            + [line for t in d.culprits for line in _tail_lines(t)]
            + [
                f"rank {r}'s NCCL log stops at: {reading.log_stops[r]}"
                for r in d.missing
                if r in reading.log_stops
            ],
            fix=(
                "Look at the code of the missing rank at the stack above: a rank that skips or "
                "reorders a collective (a data-dependent branch, an uneven last batch without "
                "DistributedSampler(drop_last=True), an early exit) leaves the others waiting "
                "in it. torchfrtrace shows the same: python -m "
                "torch.distributed.flight_recorder.fr_trace DUMP_DIR"
            ),
            rank=culprit.rank if culprit else None,
        )


@check("flightrec.collective-mismatch", area="logs", category="collective_timeout_hang",
       scope="flightrec")  # fmt: skip
def collective_mismatch(reading: FlightRecorderReading) -> Iterator[Problem]:
    """Ranks issued the same collective with a different op, sizes, dtypes or state."""
    for group, d in _divergences(reading, {"op", "size", "dtype", "state"}):
        odd = sorted(r for s in d.sides[1:] for r in s.ranks)
        # a state differs legitimately while the last collective is still in flight
        severity = Severity.WARN if d.kind == "state" else Severity.FAIL
        yield Problem(
            severity,
            f"Flight Recorder: {_what(d)} of {group.label} was issued with "
            f"{_KIND_WORDS[d.kind]}: {ranges(odd)} against {ranges(d.sides[0].ranks)}.",
            [_side_line(s) for s in d.sides]
            + [line for t in d.culprits for line in _tail_lines(t)]
            + ([f"{group.more} more divergences in this group"] if group.more else []),
            fix=(
                "Every rank must call the same collectives in the same order with the same "
                "shapes and dtypes: look at the code at the stack above on the odd ranks "
                "(a shape that depends on local data, a dtype cast on one rank only)."
                if d.kind != "state"
                else "The collective had finished on some ranks only; if the job hung, the "
                "ranks still in it wait for a peer: see the other Flight Recorder findings."
            ),
            rank=odd[0] if odd else None,
        )


@check("flightrec.dump-missing", area="logs", category="collective_timeout_hang",
       scope="flightrec")  # fmt: skip
def dump_missing(reading: FlightRecorderReading) -> Iterator[Problem]:
    """Members of a process group left no Flight Recorder dump: their side is unknown."""
    groups: list[GroupReading] = [g for g in reading.groups if g.no_dump and g.dumped]
    for group in groups:
        yield Problem(
            Severity.WARN,
            f"Flight Recorder: {ranges(group.no_dump)} of {group.label} left no dump; "
            "what they issued is unknown.",
            [f"dumps read from {ranges(group.dumped)}"],
            fix=(
                "Collect every rank's dump (TORCH_FR_DUMP_TEMP_FILE=/shared/fr_trace_rank_ "
                "TORCH_FR_BUFFER_SIZE=2000 and TORCH_NCCL_DUMP_ON_TIMEOUT=1 on every node): a "
                "rank that died or was killed first writes none, which makes it the suspect."
            ),
            rank=group.no_dump[0],
        )


@check("flightrec.dump-refused", area="logs", category="other", scope="flightrec")
def dump_refused(reading: FlightRecorderReading) -> Iterator[Problem]:
    """A file that looks like a Flight Recorder dump would run code when unpickled: refused."""
    for d in reading.dumps:
        if d.refused:
            yield Problem(
                Severity.FAIL,
                f"{d.source} is not a plain Flight Recorder dump and was not loaded: {d.error}.",
                [f"{d.source}: {d.error}"],
                fix=(
                    "A genuine dump holds only lists, dicts, strings and numbers. Do not open "
                    "this file with pickle.load (nor torchfrtrace): it was built to run code. "
                    "Ask for the dumps again, written by torch itself."
                ),
                rank=d.rank,
            )


@check("flightrec.dump-unreadable", area="logs", category="other", scope="flightrec")
def dump_unreadable(reading: FlightRecorderReading) -> Iterator[Problem]:
    """A Flight Recorder dump was truncated, corrupt, or read only in part."""
    for d in reading.dumps:
        if d.error and not d.refused and not d.error.startswith("ignored"):
            yield Problem(
                Severity.WARN,
                f"Flight Recorder dump {d.source}: {d.error}.",
                [f"{d.source}: version {d.version}, {d.entries} entries, {d.skipped} skipped"],
                fix=(
                    "A dump cut short was usually copied while being written or from a full "
                    "disk: copy it again from the node (TORCH_FR_DUMP_TEMP_FILE's folder)."
                ),
                rank=d.rank,
            )
