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

MAX_WARNS = 64
MAX_CONNECTIONS = 4096
MAX_RING_CHANNELS = 64
MAX_OPS = 64  # the last collectives kept per rank and communicator, for divergence
MAX_SAMPLES = 8
MAX_BACKTRACE = 32
UNKNOWN_COMM = "?"


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
    """One rank of one communicator, as seen from its own process."""

    comm: str
    comm_id: str | None = None
    api: str | None = None
    rank: int | None = None
    nranks: int | None = None
    cuda_dev: int | None = None
    nvml_dev: int | None = None
    bus_id: str | None = None
    init_start: bool = False
    init_complete: bool = False
    ended: str | None = None  # Destroy | Abort | Finalize | Revoke
    nnodes: int | None = None
    local_ranks: int | None = None
    channels: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    transports: dict[str, int] = field(default_factory=dict)  # label -> connections
    connections: dict[tuple, str] = field(default_factory=dict)  # -> its transport label
    connections_dropped: int = 0
    rings: dict[int, list[int]] = field(default_factory=dict)
    ring_neighbours: dict[int, tuple[int, int]] = field(default_factory=dict)
    trees: dict[int, str] = field(default_factory=dict)
    connected_rings: bool = False
    ring_pxn: int | None = None
    ring_gdr: int | None = None
    connected_trees: bool = False
    nvls: bool = False
    tuning: TuningTable = field(default_factory=TuningTable)
    algo_log: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)
    tuned: dict[str, int] = field(default_factory=dict)  # "Ring/Simple" -> calls (2.32, no size)
    ops: OrderedDict[int, Op] = field(default_factory=OrderedDict)
    last_op: Op | None = None

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
    """Everything one process (``host:pid``) printed."""

    key: str
    host: str
    pid: int
    sources: list[str] = field(default_factory=list)
    nccl_version: str | None = None
    cuda_version: str | None = None  # the toolkit NCCL was built with (+cudaX.Y)
    driver_version: int | None = None
    git_version: str | None = None
    bootstrap: dict[str, str] | None = None
    networks: list[str] = field(default_factory=list)
    plugins: dict[str, str] = field(default_factory=dict)
    ib_devices: list[dict[str, Any]] = field(default_factory=list)
    ib_relaxed_ordering: bool = False
    ib_oob: str | None = None
    ib_no_device: bool = False
    socket_ifs: list[dict[str, str]] = field(default_factory=list)
    # 2.2–2.3 print each interface ncclFindInterfaces keeps ("NET : Using interface"), then
    # who asked: the list so far, in NCCL's order (folds.found_interface)
    found_ifs: list[dict[str, str]] = field(default_factory=list)
    connect_errors: dict[str, str] = field(default_factory=dict)  # target ("?": unnamed) -> error
    failed_nets: list[str] = field(default_factory=list)  # the transports failing lines are of
    # a network plugin's own devices ("NET/OFI Selected Provider is efa (found 4 nics)")
    plugin_devices: dict[str, Any] = field(default_factory=dict)
    quotes: dict[str, str] = field(default_factory=dict)  # a network fact -> the line it is from
    gdr_hca: dict[str, bool] = field(default_factory=dict)
    gdr_pairs: list[dict[str, Any]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    comms: dict[str, CommRank] = field(default_factory=dict)
    current: str | None = None
    warns: list[Warn] = field(default_factory=list)
    warn_count: int = 0
    backtrace: list[str] = field(default_factory=list)
    error_code: int | None = None
    connect_retries: dict[str, int] = field(default_factory=dict)
    diagnostics: list[str] = field(default_factory=list)  # 2.31+ "NCCL DIAG" report lines
    last_line: str | None = None
    lines: int = 0

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
