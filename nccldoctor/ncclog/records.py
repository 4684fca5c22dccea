"""What the parser remembers per process and per communicator: bounded, so memory stays flat.

One ``ProcessLog`` per ``host:pid``; inside it one ``CommRank`` per communicator the process
belongs to (keyed by the ``comm %p`` pointer). Lines that name no communicator (transports,
trees, the tuning table...) belong to the communicator whose ``Init START`` came last in that
process, as NCCL prints them during that init (docs/nccl-log-formats.md#parser-checklist).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from nccldoctor.ncclog.joins import (
    ALGOS,
    COUNT,
    COUNTED_BY_RECORD,
    COUNTS,
    EACH,
    FIRST,
    FIRST_KEYED,
    FLAG,
    IB_PORTS,
    KEYED,
    LATEST,
    MOST,
    NEWEST_OP,
    OWN,
    SUMS,
    VALUE,
    Join,
    appended,
    join,
    joined,
    kept,
    ops,
    union,
)
from nccldoctor.ncclog.signals import SignatureHit, merge_hits

MAX_WARNS = 64
MAX_CONNECTIONS = 4096
MAX_RING_CHANNELS = 64
MAX_OPS = 64  # the last collectives kept per rank and communicator, for divergence
MAX_SAMPLES = 8
MAX_BACKTRACE = 32
MAX_DIAGNOSTICS = MAX_SAMPLES * 8
MAX_LISTED = 64  # interface lines, GPU/HCA pairs, networks, sources: kept per process
UNKNOWN_COMM = "?"


def _twins(mine: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """Records by key (processes, communicators) of a second source, joined to the first's."""
    for key, record in other.items():
        found = mine.get(key)
        if found is None:
            mine[key] = record
        else:
            join(found, record, "twin")
    return mine


def _continued(mine: dict[str, Any], later: dict[str, Any]) -> dict[str, Any]:
    """Records by key of the next stretch, each continuing its own from the stretch before."""
    for key, record in later.items():
        found = mine.get(key)
        if found is None:
            mine[key] = record
        else:
            found.continue_with(record)
    return mine


@dataclass
class Op:
    """One collective call as NCCL's COLL line prints it (``%s: opCount %lx … comm %p``)."""

    op_count: int
    func: str
    count: int
    datatype: int
    redop: int
    root: int

    def signature(self) -> tuple[str, int, int, int]:
        return (self.func, self.count, self.datatype, self.redop)


@dataclass
class TuningTable:
    """NCCL's latency/bandwidth table (graph/tuning.cc), reassembled from its INFO rows."""

    algorithms: list[str] = field(default_factory=list)  # of the block being read
    protocols: list[str] = field(default_factory=list)
    # function -> {(algorithm, protocol): (latency_us, bandwidth_GBps)}
    rows: dict[str, dict[tuple[str, str], tuple[float, float]]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """A table without rows (its header alone, or nothing) says nothing."""
        return not self.rows

    def to_dict(self) -> dict[str, Any]:
        return {
            func: [
                {"algorithm": a, "protocol": p, "latency_us": lat, "bandwidth_gbps": bw}
                for (a, p), (lat, bw) in cells.items()
            ]
            for func, cells in self.rows.items()
        }


@dataclass
class CommRank:
    """One rank of one communicator, as seen from its own process. Each field says how two
    records of it join (:mod:`~nccldoctor.ncclog.joins`)."""

    comm: str = joined(FIRST)  # the lines a stretch could not place are in its "?" record
    comm_id: str | None = joined(VALUE, default=None)
    api: str | None = joined(VALUE, default=None)
    rank: int | None = joined(VALUE, default=None)
    nranks: int | None = joined(VALUE, default=None)
    cuda_dev: int | None = joined(VALUE, default=None)
    nvml_dev: int | None = joined(VALUE, default=None)
    bus_id: str | None = joined(VALUE, default=None)
    init_start: bool = joined(FLAG, default=False)
    init_complete: bool = joined(FLAG, default=False)
    ended: str | None = joined(VALUE, default=None)  # Destroy | Abort | Finalize | Revoke
    nnodes: int | None = joined(VALUE, default=None)
    local_ranks: int | None = joined(VALUE, default=None)
    channels: dict[str, int] = joined(KEYED, default_factory=dict)
    timings: dict[str, float] = joined(KEYED, default_factory=dict)
    # label -> connections, and each connection -> its label: a stretch's are added one by one
    # (``continue_with``), a connection seen in both stretches once
    transports: dict[str, int] = joined(COUNTED_BY_RECORD, default_factory=dict)
    connections: dict[tuple, str] = joined(COUNTED_BY_RECORD, default_factory=dict)
    connections_dropped: int = joined(COUNT, default=0)
    rings: dict[int, list[int]] = joined(KEYED, default_factory=dict)
    ring_neighbours: dict[int, tuple[int, int]] = joined(KEYED, default_factory=dict)
    trees: dict[int, str] = joined(KEYED, default_factory=dict)
    connected_rings: bool = joined(FLAG, default=False)
    ring_pxn: int | None = joined(VALUE, default=None)
    ring_gdr: int | None = joined(VALUE, default=None)
    connected_trees: bool = joined(FLAG, default=False)
    nvls: bool = joined(FLAG, default=False)
    tuning: TuningTable = joined(VALUE, default_factory=TuningTable)
    algo_log: dict[tuple[str, str, str], list[int]] = joined(ALGOS, default_factory=dict)
    # "Ring/Simple" -> calls (2.32, no size)
    tuned: dict[str, int] = joined(COUNTS, default_factory=dict)
    ops: OrderedDict[int, Op] = joined(ops(MAX_OPS), default_factory=OrderedDict)
    last_op: Op | None = joined(NEWEST_OP, default=None)

    def continue_with(self, later: CommRank) -> None:
        """Fold ``later``, this communicator in the next stretch of the file, into this one."""
        for key, label in later.connections.items():
            self.add_connection(key, label)
        join(self, later, "next")

    def add_connection(self, key: tuple, label: str) -> None:
        if key in self.connections:
            return
        if len(self.connections) >= MAX_CONNECTIONS:
            self.connections_dropped += 1
            return
        self.connections[key] = label
        self.transports[label] = self.transports.get(label, 0) + 1

    def add_op(self, op: Op) -> None:
        if self.last_op is None or op.op_count >= self.last_op.op_count:
            self.last_op = op
        self.ops[op.op_count] = op
        self.ops.move_to_end(op.op_count)
        while len(self.ops) > MAX_OPS:
            self.ops.popitem(last=False)

    def add_algo(self, func: str, algo: str, proto: str, nbytes: int, calls: int = 1) -> None:
        seen = self.algo_log.get((func, algo, proto))
        if seen is None:
            self.algo_log[(func, algo, proto)] = [nbytes, nbytes, calls]
        else:
            seen[0] = min(seen[0], nbytes)
            seen[1] = max(seen[1], nbytes)
            seen[2] += calls


@dataclass
class Warn:
    file: str | None
    line: int | None
    func: str | None
    msg: str
    text: str  # the whole line, for evidence
    hints: list[str] = field(default_factory=list)
    level: str = "WARN"  # or 2.32's ATTN, printed the same way


@dataclass
class ProcessLog:
    """Everything one process (``host:pid``) printed. Each field says how two records of it
    join (:mod:`~nccldoctor.ncclog.joins`)."""

    key: str = joined(VALUE)
    host: str = joined(VALUE)
    pid: int = joined(VALUE)
    sources: list[str] = joined(union(MAX_LISTED), default_factory=list)
    nccl_version: str | None = joined(VALUE, default=None)
    # the toolkit NCCL was built with (+cudaX.Y)
    cuda_version: str | None = joined(VALUE, default=None)
    driver_version: int | None = joined(VALUE, default=None)
    git_version: str | None = joined(VALUE, default=None)
    bootstrap: dict[str, str] | None = joined(VALUE, default=None)
    networks: list[str] = joined(union(MAX_LISTED), default_factory=list)
    plugins: dict[str, str] = joined(KEYED, default_factory=dict)
    ib_devices: list[dict[str, Any]] = joined(IB_PORTS, default_factory=list)
    ib_relaxed_ordering: bool = joined(FLAG, default=False)
    ib_oob: str | None = joined(VALUE, default=None)
    ib_no_device: bool = joined(FLAG, default=False)
    socket_ifs: list[dict[str, str]] = joined(VALUE, default_factory=list)
    # 2.2–2.3 print each interface ncclFindInterfaces keeps ("NET : Using interface"), then
    # who asked: the list so far, in NCCL's order (netfolds.found_interface), settled when
    # the whole file is read
    found_ifs: list[dict[str, str]] = joined(appended(MAX_LISTED), default_factory=list)
    # target ("?": unnamed) -> error
    connect_errors: dict[str, str] = joined(KEYED, default_factory=dict)
    # the transports failing lines are of
    failed_nets: list[str] = joined(union(MAX_LISTED), default_factory=list)
    # a network plugin's own devices ("NET/OFI Selected Provider is efa (found 4 nics)")
    plugin_devices: dict[str, Any] = joined(KEYED, default_factory=dict)
    # a network fact -> the first line it is from
    quotes: dict[str, str] = joined(FIRST_KEYED, default_factory=dict)
    gdr_hca: dict[str, bool] = joined(KEYED, default_factory=dict)
    gdr_pairs: list[dict[str, Any]] = joined(appended(MAX_LISTED), default_factory=list)
    env: dict[str, str] = joined(KEYED, default_factory=dict)
    # the next stretch's are folded by ``continue_with``
    comms: dict[str, CommRank] = joined(Join(_twins, OWN.next), default_factory=dict)
    current: str | None = joined(VALUE, default=None)
    warns: list[Warn] = joined(appended(MAX_WARNS), default_factory=list)
    warn_count: int = joined(COUNT, default=0)
    backtrace: list[str] = joined(appended(MAX_BACKTRACE), default_factory=list)
    error_code: int | None = joined(VALUE, default=None)
    connect_retries: dict[str, int] = joined(COUNTS, default_factory=dict)
    # 2.31+ "NCCL DIAG" report lines
    diagnostics: list[str] = joined(appended(MAX_DIAGNOSTICS), default_factory=list)
    last_line: str | None = joined(VALUE, default=None)
    lines: int = joined(COUNT, default=0)

    def comm(self, ptr: str | None = None) -> CommRank:
        """The communicator ``ptr``, or the one being initialised when the line names none."""
        key = ptr or self.current or UNKNOWN_COMM
        found = self.comms.get(key)
        if found is None:
            found = self.comms[key] = CommRank(comm=key)
        return found

    def adopt(self, ptr: str) -> None:
        """Name the communicator of the lines that named none ``ptr``: before 2.19 the first
        line that names it is its Init COMPLETE, printed after all the others."""
        unknown = self.comms.get(UNKNOWN_COMM)
        if unknown is not None and ptr not in self.comms:
            unknown.comm = ptr
            self.comms[ptr] = self.comms.pop(UNKNOWN_COMM)

    def add_warn(self, warn: Warn) -> None:
        self.warn_count += 1
        if len(self.warns) < MAX_WARNS:
            self.warns.append(warn)

    def claim_version(self, version: str, cuda: str | None) -> None:
        """≤2.21 rank 0 printf()s ``NCCL version …`` bare (init.cc): the process whose line
        came before owns it, unless it said its own."""
        if self.nccl_version is None:
            self.nccl_version, self.cuda_version = version, cuda or self.cuda_version

    def tuned_comm(self) -> CommRank:
        """The communicator a per-call tuning line is about. They come long after init, and only
        rank 0 of a communicator prints them (enqueue.cc): the one this process is rank 0 of,
        the largest if several; the one initialised last when the log does not say."""
        best = None
        for c in self.comms.values():  # once per call on rank 0: a loop, not a list and a max()
            if c.rank == 0 and (best is None or (c.nranks or 0) > (best.nranks or 0)):
                best = c
        return best if best is not None else self.comm()

    def continue_with(self, later: ProcessLog) -> None:
        """Fold ``later``, this process in the next stretch of the file, into this record: the
        lines that stretch could not place (it did not see their communicator's Init START) go
        where this one left off."""
        comms, later.comms = later.comms, {}
        unplaced = comms.pop(UNKNOWN_COMM, None)
        if self.current is None:  # ≤2.18 name a communicator first in its Init COMPLETE
            done = next(
                (p for p, c in comms.items() if c.init_complete and p not in self.comms), None
            )
            if done is not None:
                self.adopt(done)  # the lines of its init the stretch before read are its too
        join(self, later, "next")
        _continued(self.comms, comms)
        if unplaced is not None:
            # a call's tuning line belongs to the communicator this process is rank 0 of, any
            # other line that names none to the one being set up where the stretch before ended
            tuned = self.tuned_comm()
            tuned.algo_log = ALGOS.next(tuned.algo_log, unplaced.algo_log)
            tuned.tuned = COUNTS.next(tuned.tuned, unplaced.tuned)
            unplaced.algo_log, unplaced.tuned = {}, {}
            self.comm().continue_with(unplaced)

    @property
    def main_comm(self) -> CommRank | None:
        """The communicator that says most about this process: the largest, then the first."""
        known = [c for c in self.comms.values() if c.comm != UNKNOWN_COMM or c.last_op]
        if not known:
            return None
        return max(known, key=lambda c: (c.nranks or 0, c.init_start))

    @property
    def rank(self) -> int | None:
        main = self.main_comm
        return main.rank if main else None


def _hits(mine: dict[str, SignatureHit], other: dict[str, SignatureHit]) -> dict[str, SignatureHit]:
    merge_hits(mine, other)
    return mine


@dataclass
class LogSet:
    """What all inputs said: processes by ``host:pid`` plus line accounting. Each field says
    how the records of two sources, or of two stretches of one file, join."""

    processes: dict[str, ProcessLog] = joined(Join(_twins, _continued), default_factory=dict)
    sources: list[str] = joined(EACH, default_factory=list)
    lines: int = joined(COUNT, default=0)
    nccl_lines: int = joined(COUNT, default=0)
    coll_lines: int = joined(COUNT, default=0)
    call_lines: int = joined(COUNT, default=0)  # NCCL_DEBUG_SUBSYS=CALL trace, counted only
    # not NCCL debug output (the app, PyTorch, the launcher)
    other_lines: int = joined(COUNT, default=0)
    unknown_lines: int = joined(COUNT, default=0)  # NCCL lines of no known kind
    garbled_lines: int = joined(COUNT, default=0)  # say NCCL but have no parsable envelope
    # file -> lines over MAX_LINE, cut
    cut_lines: dict[str, int] = joined(SUMS, default_factory=dict)
    unknown_samples: list[str] = joined(kept(MAX_SAMPLES), default_factory=list)
    read_errors: list[str] = joined(union(None), default_factory=list)
    # "NCCL version …" without a prefix
    bare_versions: list[str] = joined(union(MAX_SAMPLES), default_factory=list)
    # PyTorch's world size -> lines
    world_sizes: dict[int, int] = joined(SUMS, default_factory=dict)
    # lines of PyTorch saying init_process_group/ncclCommInitRank failed
    init_failures: int = joined(COUNT, default=0)
    # (process group, rank) -> the last SeqNum it completed; the group None: not named
    completed_seq: dict[tuple[str | None, int], int] = joined(MOST, default_factory=dict)
    signatures: dict[str, SignatureHit] = joined(Join(_hits, _hits), default_factory=dict)
    # lines not read past a bound, by why
    left_out: dict[str, int] = joined(SUMS, default_factory=dict)
    last_key: str | None = joined(LATEST, default=None)  # the process of the last NCCL line
    # a bare "NCCL version" line before any process's line: (version, CUDA)
    unclaimed_version: tuple[str, str | None] | None = joined(OWN, default=None)

    def merge(self, other: LogSet) -> None:
        """Fold in the record of another source."""
        join(self, other, "twin")

    def continue_with(self, later: LogSet) -> None:
        """Fold in the record of the next stretch of the same file (``parse_stretch``)."""
        claim, last = later.unclaimed_version, self.last_key
        join(self, later, "next")
        if claim is not None and last is not None:  # its process is the stretch before's last
            self.processes[last].claim_version(*claim)
