"""A node's report as the merge reads it: each section the merge judges by, read once into
records, in the one place a node's report enters the merge.

The report came from another process (over the master's store, checked by ``peer.py``, or from
a file for ``nccldoctor report merge``), so each section is read with its types checked; a
section that does not read is that node's section missing, with why (:class:`SectionUnread`,
which the ``world`` rule ``report.section-unread`` turns into a finding), never an exception.
The rows the document keeps as the nodes wrote them (``ranks``, ``hang``'s stuck ranks) travel
beside what was read of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nccldoctor.cluster.records import PhaseRow
from nccldoctor.facts.ranks import RankOutcome
from nccldoctor.facts.run import PortProbe
from nccldoctor.facts.serde import from_dict, read_fields
from nccldoctor.facts.world import SectionUnread
from nccldoctor.report import Report


@dataclass(frozen=True)
class ListedNode:
    """A node of a report's ``cluster`` section (docs/report.md#cluster)."""

    name: str
    node_rank: int | None = None
    address: str | None = None
    advertised_address: str | None = None
    seen_address: str | None = None
    ranks: list[int] = field(default_factory=list)
    report_path: str | None = None


@dataclass(frozen=True)
class Listed:
    """A report's ``cluster`` section: the world its run listed (every node's repeats it)."""

    master: str | None = None
    world_size: int | None = None
    backend: str | None = None
    nodes: list[ListedNode] = field(default_factory=list)
    missing_nodes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RankRow:
    """A row of ``ranks`` as its node wrote it (the document keeps it so), and its reading."""

    rank: int | None
    row: Mapping[str, Any]
    outcome: RankOutcome | None  # None: not a rank outcome (``watch`` writes other rows)


@dataclass(frozen=True)
class StuckRow:
    """A rank of a node's own ``hang`` section that its watchdog had to stop."""

    node: str | None
    rank: int | None
    row: Mapping[str, Any]


@dataclass(frozen=True)
class NodeSections:
    """One node's report, what the merge judges by read into records."""

    source: str | None  # the report's file (a node's report names its own)
    report: Report
    name: str  # the node the report speaks for, as a finding names it
    run_node: str | None = None  # ``run.node``
    phases: list[PhaseRow] = field(default_factory=list)
    ranks: list[RankRow] = field(default_factory=list)
    port_probe: PortProbe | None = None
    wire: dict[str, float | None] = field(default_factory=dict)  # TCP to the master, by node
    network: str | None = None  # the transport NCCL said it used (``nccl.network``)
    hang: dict[str, Any] | None = None  # its own hang section, less the stuck ranks
    stuck: list[StuckRow] = field(default_factory=list)
    listed: Listed | None = None
    unread: list[SectionUnread] = field(default_factory=list)


def read_sections(
    source: str | None, report: Report, worlds: dict[tuple, Listed | str] | None = None
) -> NodeSections:
    """``report``'s sections as records; each that does not read is left out, with why.
    ``worlds``: the ``cluster`` sections read so far (every node's report repeats the world:
    read once, a merge stays linear in nodes), what each read to or why it did not."""
    worlds = {} if worlds is None else worlds
    extra = report.extra
    path = extra.get("report_path")
    source = source or (path if isinstance(path, str) else None)
    run = _section(extra, "run")
    run_node = run.get("node") if isinstance(run.get("node"), str) else None
    name = report.nodes[0].node if report.nodes else (run_node or source or "a node")
    unread: list[SectionUnread] = []

    def read(section: str, reader: Any, value: Any, empty: Any) -> Any:
        if value is None:
            return empty
        try:
            return reader(value)
        except (TypeError, ValueError) as exc:
            unread.append(SectionUnread(name, source, section, str(exc)[:200]))
            return empty

    hang = extra.get("hang") if isinstance(extra.get("hang"), dict) else None
    wire = _section(extra, "bandwidth").get("tcp_wire_Gbitps")
    network = _section(extra, "nccl").get("network")
    return NodeSections(
        source=source,
        report=report,
        name=name,
        run_node=run_node,
        phases=read("phases", _rows(PhaseRow.from_dict), extra.get("phases"), []),
        ranks=read("ranks", _rows(_rank_row), extra.get("ranks"), []),
        port_probe=read("run.port_probe", _port_probe, run.get("port_probe"), None),
        wire=read("bandwidth.tcp_wire_Gbitps", _wire, wire, {}),
        network=network if isinstance(network, str) else None,
        hang={k: v for k, v in hang.items() if k != "stuck"} if hang is not None else None,
        stuck=read("hang.stuck", _rows(_stuck_row), (hang or {}).get("stuck"), []),
        listed=read("cluster", lambda value: _listed(value, worlds), extra.get("cluster"), None),
        unread=unread,
    )


def _rows(reader: Any) -> Any:
    """A reader of a list section whose every row ``reader`` reads."""

    def read(value: Any) -> list[Any]:
        if not isinstance(value, list):
            raise ValueError(f"not a list but {type(value).__name__}")
        rows = []
        for index, row in enumerate(value):
            try:
                rows.append(reader(row))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"row {index}: {exc}") from None
        return rows

    return read


def _rank_row(row: Any) -> RankRow:
    if not isinstance(row, dict):
        raise ValueError(f"not an object but {type(row).__name__}")
    try:
        outcome: RankOutcome | None = RankOutcome.from_dict(row)
    except ValueError:
        outcome = None
    rank = outcome.rank if outcome else _integer(row.get("rank"))
    return RankRow(rank, row, outcome)


def _stuck_row(row: Any) -> StuckRow:
    if not isinstance(row, dict):
        raise ValueError(f"not an object but {type(row).__name__}")
    node = row.get("node")
    return StuckRow(node if isinstance(node, str) else None, _integer(row.get("rank")), row)


def _port_probe(value: Any) -> PortProbe:
    return read_fields(PortProbe, value)


def _wire(value: Any) -> dict[str, float | None]:
    return from_dict(dict[str, float | None], _object(value), strict=True)


def _listed(value: Any, worlds: dict[tuple, Listed | str]) -> Listed:
    section = _object(value)
    nodes = section.get("nodes")
    nodes = nodes if isinstance(nodes, list) else [nodes]
    key = (*(repr(section.get(k)) for k in ("master", "world_size", "backend", "missing_nodes")),
           len(nodes), repr(nodes[:1]), repr(nodes[-1:]))  # fmt: skip
    if key not in worlds:
        try:
            worlds[key] = read_fields(Listed, section)
        except (TypeError, ValueError) as exc:
            worlds[key] = str(exc)
    listed = worlds[key]
    if isinstance(listed, str):
        raise ValueError(listed)
    return listed


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"not an object but {type(value).__name__}")
    return value


def _section(extra: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = extra.get(key)
    return value if isinstance(value, dict) else {}


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
