"""What NCCL RAS output says, as records: the job and its communicators, each error or warning
RAS printed with the ranks and processes it names, and NCCL 2.31+'s diagnostics reports with the
inventory they state per communicator. The readers fill them (``status.py``: ``ncclras``'s own
output, ``diag.py``: ``NCCL DIAG`` lines); the ``ras`` rules (``checks/ras/``) judge them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from nccldoctor.limits import MAX_RAS_RANKS

# 2.32's result lines that do not start "<check>: ": an Xid or SXid event (diagnostics_xid.cc)
# and a NIC's line "Net device NAME:PORT: …" (diagnostics_net.cc)
XID_EVENT = re.compile(r"S?Xid \d")
NET_DEVICE = "Net device "
NIC = re.compile(r"\S+:\d+: ")  # "mlx5_0:1: " after "Net device "


@dataclass
class Peer:
    """A rank or process RAS names: what it printed of it."""

    rank: int | None = None
    pid: int | None = None
    node: str | None = None
    gpu: str | None = None


@dataclass
class Entry:
    """One entry of the Errors or Warnings section: ``DEAD``, ``#0-0 (hash) INCOMPLETE`` ..."""

    section: str  # errors | warnings
    kinds: list[str]  # DEAD, INCOMPLETE, MISMATCH, TIMEOUT, ERROR ...
    comm: str | None = None  # "#0-0" for a communicator's entry
    comm_hash: str | None = None
    lines: list[str] = field(default_factory=list)
    peers: list[Peer] = field(default_factory=list)
    missing_ranks: list[int] = field(default_factory=list)
    operations: list[tuple[int, int]] = field(default_factory=list)  # (ranks, up to operation)
    left_out: int = 0  # ranks and processes named past MAX_RAS_RANKS: counted, not kept

    def keep(self, peers: list[Peer], ranks: Sequence[int] = ()) -> None:
        """Take ``peers`` and missing ``ranks`` up to MAX_RAS_RANKS of each; count the rest."""
        room = max(0, MAX_RAS_RANKS - len(self.peers))
        self.peers += peers[:room]
        self.left_out += max(0, len(peers) - room)
        room = max(0, MAX_RAS_RANKS - len(self.missing_ranks))
        self.missing_ranks += list(ranks[:room])
        self.left_out += max(0, len(ranks) - room)


@dataclass
class CommGroup:
    """A row of the communicators table: ``count`` communicators alike."""

    group: int
    count: int
    nodes: int
    ranks_per_node: str  # "8" or a range "7-8"
    ranks: int
    status: str
    errors: list[str]


@dataclass
class DiagResult:
    """One ``[OK]`` or ``[INFO]`` line of a diagnostics report."""

    tag: str  # OK | INFO
    check: str  # "GPU inventory", "CUDA driver version", "ECC", "NVLink", "p2p", "Xid/SXid" ...
    message: str  # the text after "<check>: "
    kind: str | None = None  # which message of _DIAG_LINES it is; None: one this table lacks
    comm_hash: str | None = None  # hex, without 0x
    ranks: list[int] = field(default_factory=list)  # the rank set it names ({0,1,...} (N=12))
    ranks_total: int | None = None  # the set's size when NCCL cut the list
    values: dict[str, str] = field(default_factory=dict)  # model, gpus, version, links, worst ...
    groups: list[tuple[str, list[int]]] = field(default_factory=list)  # env: value -> its ranks

    def text(self) -> str:
        """The result as NCCL printed it after the tag (``_check_message`` undone)."""
        if self.check == "Xid/SXid" and XID_EVENT.match(self.message):
            return self.message
        if self.check == NET_DEVICE.rstrip() and NIC.match(self.message):
            return f"{self.check} {self.message}"
        return f"{self.check}: {self.message}" if self.check else self.message


@dataclass
class Inventory:
    """What one communicator's diagnostics stated when its ranks agreed."""

    comm_hash: str
    ranks: int | None = None
    gpus_per_node: int | None = None
    gpu_model: str | None = None
    cuda_driver: int | None = None  # the CUDA version the driver supports, 13000 = 13.0
    nvidia_driver: str | None = None  # NVML's driver version, "580.65.06" (2.32+)
    nvlinks_per_device: int | None = None  # None: no line (PCIe-only systems print none)
    ecc: str | None = None  # clean | errors | unavailable


@dataclass
class DiagReport:
    """One diagnostics report: ``=== RAS Diagnostics ===`` (passive, over RAS) or
    ``=== NCCL Diagnostics ===`` (active, at communicator init), its results, its end."""

    kind: str  # ras | active
    host: str | None = None  # the process that printed it (DIAG_PRINT's "%s:%d" prefix)
    pid: int | None = None
    results: list[DiagResult] = field(default_factory=list)
    completed_ms: float | None = None  # None: the report's last line never came
    completed_across: int | None = None
    across: str | None = None  # "ranks" (one communicator's) or "RAS peers" (the job's processes)
    busy: bool = False  # "BUSY: diagnostics already in progress": nothing ran

    def inventory(self) -> list[Inventory]:
        """Per communicator, what its ranks agree on (GPUs per node, model, driver, NVLinks)."""
        found: dict[str, Inventory] = {}
        for r in self.results:
            if r.comm_hash is not None and r.kind is not None:
                inv = found.setdefault(r.comm_hash, Inventory(r.comm_hash))
                inv.ranks = number(r.values.get("n")) or inv.ranks
                _state(inv, r)
        stated = ("gpus_per_node", "gpu_model", "cuda_driver", "nvidia_driver",
                  "nvlinks_per_device", "ecc")  # fmt: skip
        return [i for i in found.values() if any(getattr(i, k) is not None for k in stated)]


@dataclass
class RasReport:
    source: str
    nccl_version: str | None = None
    nodes: int | None = None
    processes: int | None = None
    gpus: int | None = None
    groups: list[CommGroup] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    diagnostics: list[DiagReport] = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for diag, report in zip(data["diagnostics"], self.diagnostics, strict=True):
            diag["inventory"] = [asdict(i) for i in report.inventory()]
        return data


@dataclass
class RasReading:
    """The subject of the ``ras`` rules: the outputs, and where each rank's NCCL log in the same
    ticket stops and on which host it ran, by communicator hash and rank (RAS and its
    diagnostics print a communicator's ``commHash``, which is the ``commId 0x…`` of NCCL's
    ``Init COMPLETE`` line: all are ``comm->commHash``)."""

    reports: list[RasReport]
    log_last_lines: dict[tuple[int, int], str] = field(default_factory=dict)
    log_hosts: dict[tuple[int, int], str] = field(default_factory=dict)

    def last_line(self, comm_hash: str | None, rank: int | None) -> str | None:
        return _by_rank(self.log_last_lines, comm_hash, rank)

    def host(self, comm_hash: str | None, rank: int | None) -> str | None:
        return _by_rank(self.log_hosts, comm_hash, rank)


def _by_rank(
    table: dict[tuple[int, int], str], comm_hash: str | None, rank: int | None
) -> str | None:
    if comm_hash is None or rank is None:
        return None
    try:
        return table.get((int(comm_hash, 16), rank))
    except ValueError:
        return None


def number(value: str | None) -> int | None:
    """A value a diagnostics line captured as digits, as an int (None: none or not digits)."""
    return int(value) if value and value.isdigit() else None


def _state(inv: Inventory, r: DiagResult) -> None:
    """What a line states of its communicator's inventory when its ranks agree (or that ECC
    errors were found); mismatch lines state nothing common."""
    v = r.values
    match (r.check, r.kind):
        case ("GPU inventory", "consistent"):
            inv.gpus_per_node, inv.gpu_model = int(v["gpus"]), v["model"]
        case ("GPU inventory", "count-only"):
            inv.gpus_per_node = int(v["gpus"])
        case ("GPU inventory", "model-only"):
            inv.gpu_model = v["model"]
        case ("CUDA driver version", "consistent"):
            inv.cuda_driver = int(v["version"])
        case ("NVIDIA graphics driver version", "consistent"):
            inv.nvidia_driver = v["version"]
        case ("NVLink", "consistent"):
            inv.nvlinks_per_device = int(v["links"])
        case ("ECC", "clean" | "clean-partial"):
            inv.ecc = inv.ecc or "clean"
        case ("ECC", "uncorrected" | "corrected"):
            inv.ecc = "errors"
        case ("ECC", "unavailable"):
            inv.ecc = "unavailable"
