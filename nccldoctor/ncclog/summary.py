"""The parse result as data: communicators across ranks, processes, and the ``nccl`` section.

A communicator is one ``commId`` (NCCL's hash of the unique id, the same on every rank). Logs
with only collective lines carry no commId; their communicators are grouped by size instead.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from nccldoctor.ncclog.hostfacts import address_facts
from nccldoctor.ncclog.records import UNKNOWN_COMM, CommRank, LogSet, ProcessLog
from nccldoctor.ncclog.tuning import algorithms

Member = tuple[ProcessLog, CommRank]


@dataclass
class CommGroup:
    key: str
    members: list[Member] = field(default_factory=list)

    @property
    def nranks(self) -> int | None:
        return max((c.nranks for _, c in self.members if c.nranks), default=None)

    @property
    def hosts(self) -> list[str]:
        return sorted({p.host for p, _ in self.members})

    @property
    def nodes(self) -> int:
        logged = max((c.nnodes for _, c in self.members if c.nnodes), default=0)
        return logged or len(self.hosts)

    def most_common(self, get: Any) -> Any:
        values = [v for _, c in self.members if (v := get(c)) is not None]
        return Counter(values).most_common(1)[0][0] if values else None

    @property
    def channels(self) -> int | None:
        logged = self.most_common(lambda c: c.channels.get("coll"))
        if logged is not None:
            return logged
        rings = max((len(c.rings) for _, c in self.members), default=0)
        return rings or None

    @property
    def transports(self) -> list[str]:
        return sorted({t for _, c in self.members for t in c.transports})

    @property
    def init_complete(self) -> bool | None:
        started = [c for _, c in self.members if c.init_start or c.init_complete]
        if not started:
            return None
        return all(c.init_complete for c in started)  # absent ranks: see logs.ranks-missing

    def topology(self) -> dict[str, int]:
        return {"nranks": self.nranks or 1, "nnodes": self.nodes, "channels": self.channels or 1}

    def tuning_source(self) -> CommRank | None:
        """The rank that printed the tuning table or per-call choices (rank 0, normally)."""
        ranked = sorted(self.members, key=lambda m: (m[1].rank is None, m[1].rank or 0))
        for _, c in ranked:
            if c.algo_log or c.tuning.rows:
                return c
        return None

    def algorithms(self) -> list[dict[str, Any]]:
        source = self.tuning_source()
        return algorithms(source, self.topology()) if source else []

    def rank_rows(self) -> list[dict[str, Any]]:
        rows = [_rank_row(p, c) for p, c in self.members]
        return sorted(rows, key=lambda r: (r["rank"] is None, r["rank"] or 0, r["process"]))


def group_comms(logs: LogSet) -> list[CommGroup]:
    """Communicators across processes, largest first."""
    groups: dict[str, CommGroup] = {}
    for proc in logs.processes.values():
        for comm in proc.comms.values():
            if (
                comm.comm == UNKNOWN_COMM
                and not comm.last_op
                and not comm.tuning.rows
                and not comm.nranks
            ):
                continue
            key = comm.comm_id or f"nranks={comm.nranks or '?'}"
            groups.setdefault(key, CommGroup(key)).members.append((proc, comm))
    return sorted(groups.values(), key=lambda g: (-(g.nranks or 0), -len(g.members), g.key))


def _rank_row(proc: ProcessLog, c: CommRank) -> dict[str, Any]:
    op = c.last_op
    return {
        "rank": c.rank,
        "process": proc.key,
        "host": proc.host,
        "pid": proc.pid,
        "comm": c.comm,
        "cuda_dev": c.cuda_dev,
        "nvml_dev": c.nvml_dev,
        "bus_id": c.bus_id,
        "api": c.api,
        "init_start": c.init_start,
        "init_complete": c.init_complete,
        "ended": c.ended,
        "channels": c.channels or None,
        "local_ranks": c.local_ranks,
        "init_seconds": c.timings.get("total"),
        "timings": c.timings or None,
        "transports": dict(sorted(c.transports.items())),
        "connections": len(c.connections) + c.connections_dropped,
        "trees": {str(k): v for k, v in sorted(c.trees.items())} or None,
        "ring_pxn": c.ring_pxn,
        "ring_gdr": c.ring_gdr,
        "connected_rings": c.connected_rings,
        "tuned_calls": c.tuned or None,
        "last_op": None
        if op is None
        else {"op_count": op.op_count, "func": op.func, "count": op.count, "datatype": op.datatype},
        "last_line": proc.last_line,
    }


def _group_dict(group: CommGroup) -> dict[str, Any]:
    source = group.tuning_source()
    rings = next((c.rings for _, c in group.members if c.rings), {})
    return {
        "comm_id": group.key if group.key.startswith("0x") else None,
        "nranks": group.nranks,
        "ranks_seen": len(group.members),
        "nodes": group.nodes,
        "hosts": group.hosts,
        "channels": group.channels,
        "transports": group.transports,
        "init_complete": group.init_complete,
        "algorithms": group.algorithms(),
        "tuning_table": source.tuning.to_dict() if source and source.tuning.rows else None,
        "rings": {str(k): v for k, v in sorted(rings.items())} or None,
        "ranks": group.rank_rows(),
    }


def _process_dict(p: ProcessLog) -> dict[str, Any]:
    return {
        "process": p.key,
        "host": p.host,
        "pid": p.pid,
        "rank": p.rank,
        "sources": p.sources,
        "lines": p.lines or None,
        "nccl_version": p.nccl_version,
        "cuda_version": p.cuda_version,
        "cuda_driver": p.driver_version,
        "git_version": p.git_version,
        "bootstrap": p.bootstrap,
        "networks": p.networks,
        "plugins": p.plugins,
        "ib_devices": p.ib_devices,
        "ib_relaxed_ordering": p.ib_relaxed_ordering,
        "ib_oob": p.ib_oob,
        "ib_no_device": p.ib_no_device,
        "socket_interfaces": [{**i, **address_facts(i["address"])} for i in p.socket_ifs],
        "bootstrap_interface": {**p.bootstrap, **address_facts(p.bootstrap["address"])}
        if p.bootstrap
        else None,
        "failed_networks": p.failed_nets,
        "plugin_devices": p.plugin_devices,
        "connect_errors": p.connect_errors,
        "gdr_hca": p.gdr_hca,
        "gdr_pairs": p.gdr_pairs,
        "env": p.env,
        "warnings": [
            {"file": w.file, "line": w.line, "func": w.func, "message": w.msg, "hints": w.hints}
            for w in p.warns
        ],
        "warning_count": p.warn_count,
        "error_code": p.error_code,
        "backtrace": p.backtrace,
        "connect_retries": p.connect_retries,
        "last_line": p.last_line,
    }


def summarize(logs: LogSet) -> dict[str, Any]:
    """The ``nccl`` report section: everything the logs said, per communicator and process."""
    procs = sorted(logs.processes.values(), key=lambda p: (p.rank is None, p.rank or 0, p.key))
    return {
        "sources": logs.sources,
        "lines": {
            "total": logs.lines,
            "nccl": logs.nccl_lines,
            "collective_trace": logs.coll_lines,
            "other": logs.other_lines,
            "unknown": logs.unknown_lines,
            "garbled": logs.garbled_lines,
            "truncated": sum(logs.cut_lines.values()),
        },
        "left_out": logs.left_out,
        "unknown_samples": logs.unknown_samples,
        "read_errors": logs.read_errors,
        "bare_versions": logs.bare_versions,
        "communicators": [_group_dict(g) for g in group_comms(logs)],
        "processes": [_process_dict(p) for p in procs],
    }


@dataclass
class LogReading:
    """What the logs rules judge (``checks/logs.py``): the parsed logs and their
    communicators, grouped once."""

    logs: LogSet
    groups: list[CommGroup]


def read_logs(logs: LogSet) -> LogReading:
    return LogReading(logs, group_comms(logs))
