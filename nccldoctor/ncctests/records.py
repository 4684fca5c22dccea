"""The records the nccl-tests readers fill (a run: its header, table, footer and failure lines)
and the subject the ``nccl_tests`` rules read (the runs, and what else the ticket says of the
network they ran on)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Half:
    """One side (out-of-place or in-place) of a table row."""

    time_us: float | None = None
    algbw_GBps: float | None = None
    busbw_GBps: float | None = None
    wrong: float | None = None  # None: validation off ("N/A"); old eras print a max delta


@dataclass
class Row:
    size: int
    count: int | None
    type: str | None
    redop: str | None
    root: str | None
    out_of_place: Half | None
    in_place: Half | None


@dataclass
class Device:
    rank: int
    host: str
    device: int
    pid: int | None
    name: str


@dataclass
class PerfRun:
    """One ``*_perf`` run: its header, table, footer and failure lines."""

    source: str
    test: str | None = None  # all_reduce_perf ... (2.14+ print it; otherwise the file name)
    version: str | None = None  # nccl-tests' own version (2.17+)
    nccl_version: str | None = None
    settings: dict[str, str] = field(default_factory=dict)  # the "# nThread ..." line
    devices: list[Device] = field(default_factory=list)
    wrong_column: str | None = None  # "#wrong" counts elements; "error"/"res" is a max delta
    rows: list[Row] = field(default_factory=list)
    cut_rows: int = 0  # lines under the header that were not a whole row
    out_of_bounds: int | None = None
    avg_busbw_GBps: float | None = None
    failures: list[str] = field(default_factory=list)  # Test NCCL/CUDA failure, Test timeout
    network: str | None = None  # "Socket", "IB": NCCL INFO lines inside the output say it
    concluded: bool = False  # the footer was reached
    error: str | None = None  # why the file could not be read (JSON only)

    @property
    def peak_busbw_GBps(self) -> float | None:
        values = [
            h.busbw_GBps
            for r in self.rows
            for h in (r.out_of_place, r.in_place)
            if h is not None and h.busbw_GBps is not None
        ]
        return max(values) if values else None

    @property
    def hosts(self) -> list[str]:
        return sorted({d.host for d in self.devices})

    def wrong_rows(self) -> list[tuple[Row, str, float]]:
        """Rows whose ``#wrong`` count is not zero (the old max-delta column is no count)."""
        if self.wrong_column not in ("#wrong", None):
            return []
        found = []
        for row in self.rows:
            for side, half in (("out-of-place", row.out_of_place), ("in-place", row.in_place)):
                if half is not None and half.wrong:
                    found.append((row, side, half.wrong))
        return found

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["peak_busbw_GBps"] = self.peak_busbw_GBps
        data["hosts"] = self.hosts
        return data


@dataclass
class PerfReading:
    """The subject of the ``nccl_tests`` rules: the runs, and what else the ticket says of the
    network they ran on."""

    runs: list[PerfRun]
    log_network: str | None = None  # "Socket", "IB" ...: NCCL's log lines in the same ticket
    link_GBps: dict[str, float] = field(default_factory=dict)  # host -> its NICs, GB/s


def link_GBps(ib_rates: Iterable[str], nic_mbps: Iterable[int]) -> float | None:
    """What a node's NICs carry together, in GB/s (nccl-tests' unit): its active InfiniBand/RoCE
    ports (``rate`` "200 Gb/sec (4X HDR)") when it has any, NCCL uses them all; otherwise its
    Ethernet links (``speed`` in Mb/s)."""
    ib = [float(m[1]) for r in ib_rates if (m := re.match(r"\s*([\d.]+)\s*Gb/sec", r))]
    if ib:
        return sum(ib) / 8
    eth = [s for s in nic_mbps if s and s > 0]
    return sum(eth) / 8000 if eth else None
