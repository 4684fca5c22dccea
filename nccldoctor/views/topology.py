"""NCCL's communicators as the HTML page shows them: the headline line, who talks to whom over
what (the rank-by-rank transport matrix, or per rank its transports), the rings and the trees.
Like ``sections.py``, it arranges the document and tolerates sections missing or misshapen.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from nccldoctor.report.shape import items, section, values

MATRIX_MAX_RANKS = 128  # beyond this a rank-by-rank matrix is unreadable; the lists remain
TRANSPORT_CLASSES = {"NET/IB": "ib", "NET/Socket": "socket", "P2P": "p2p", "SHM": "shm"}


def nccl_headline(summary: dict[str, Any]) -> str:
    """ "NCCL 2.26.2 (CUDA 12.4) · network Socket via eth0 · transports NET/Socket, P2P"."""
    text = f"NCCL {summary.get('nccl_version') or '?'}"
    if summary.get("cuda_version"):
        text += f" (CUDA {summary['cuda_version']})"
    text += f" · network {summary.get('network') or '?'}"
    interfaces = [str(i) for i in values(summary.get("interfaces"))]
    if interfaces:
        text += f" via {', '.join(interfaces)}"
    transports = [str(t) for t in values(summary.get("transports"))]
    return text + f" · transports {', '.join(transports) or '?'}"


def short_transport(label: str) -> str:
    """The matrix cell text of a transport label: IB, Sock, P2P, SHM."""
    return {"NET/IB": "IB", "NET/Socket": "Sock"}.get(label, label)


def transport_label(transport: str) -> str:
    """ "NET/IB/0/GDRDMA" → "NET/IB", "P2P/CUMEM/read" → "P2P", "SHM/direct/direct" → "SHM"."""
    parts = transport.split("/")
    return "/".join(parts[:2]) if parts[0] == "NET" and len(parts) > 1 else parts[0]


@dataclass
class TransportMatrix:
    ranks: list[int]
    cells: dict[tuple[int, int], list[str]]  # (rank, peer) -> transport labels
    gdr: set[tuple[int, int]]  # pairs whose NET connection uses GPUDirect RDMA

    def css(self, labels: list[str]) -> str:
        return " ".join(sorted({TRANSPORT_CLASSES.get(label, "other") for label in labels}))


def transport_matrix(summary: dict[str, Any]) -> TransportMatrix | None:
    """Who talks to whom over what, from the per-peer connection lines (send side or receive)."""
    cells: dict[tuple[int, int], set[str]] = defaultdict(set)
    gdr = set()
    for conn in items(summary.get("connections")):
        rank, peer, transport = conn.get("rank"), conn.get("peer"), conn.get("transport")
        if not (isinstance(rank, int) and isinstance(peer, int) and isinstance(transport, str)):
            continue
        pair = (rank, peer) if conn.get("direction") != "receive" else (peer, rank)
        cells[pair].add(transport_label(transport))
        if "GDRDMA" in transport:
            gdr.add(pair)
    ranks = sorted({r for pair in cells for r in pair})
    if not ranks or len(ranks) > MATRIX_MAX_RANKS:
        return None
    return TransportMatrix(ranks, {k: sorted(v) for k, v in cells.items()}, gdr)


def communicator(document: dict[str, Any]) -> dict[str, Any]:
    """The largest communicator of the log parser's full summary (``nccl.communicators[0]``,
    or one level down when a report nests explain's section under ``nccl``)."""
    nccl = section(document, "nccl")
    for candidate in (nccl, section(nccl, "nccl")):
        communicators = items(candidate.get("communicators"))
        if communicators:
            return communicators[0]
    return {}


def ring_lines(summary: dict[str, Any], comm: dict[str, Any]) -> list[str]:
    """ "Channel 0: 0 → 1 → 2 → 0" from ``rings`` as a list of {channel, ranks} or {channel: ranks}."""
    rings = summary.get("rings") or comm.get("rings")
    if isinstance(rings, dict):
        rings = [{"channel": channel, "ranks": ranks} for channel, ranks in rings.items()]
    lines = []
    for ring in items(rings):
        ranks = [str(r) for r in values(ring.get("ranks"))]
        if ranks:
            lines.append(f"Channel {ring.get('channel', '?')}: {' → '.join([*ranks, ranks[0]])}")
    return lines


def tree_lines(summary: dict[str, Any], comm: dict[str, Any]) -> list[str]:
    """One line per tree entry ({channel, rank, children, parent}), or per rank from the parser's
    per-rank ``trees`` ({channel: "c0/c1/c2->rank->parent"})."""
    lines = []
    for tree in items(summary.get("trees")):
        children = ", ".join(str(c) for c in values(tree.get("children"))) or "none"
        parent = tree.get("parent")
        lines.append(
            f"Channel {tree.get('channel', '?')}: [{children}] → {tree.get('rank')} → "
            f"{parent if parent is not None else 'root'}"
        )
    for rank in items(comm.get("ranks")):
        trees = rank.get("trees")
        if isinstance(trees, dict) and trees:
            shapes = " ".join(f"[{channel}] {shape}" for channel, shape in trees.items())
            lines.append(f"rank {rank.get('rank')}: {shapes}")
    return lines


def rank_transports(comm: dict[str, Any]) -> list[tuple[Any, str, list[tuple[str, int, str]]]]:
    """Per rank, the transports its connections use and how many: (rank, host, [(label, count,
    css class)]), when the summary has no per-peer list to draw the matrix from."""
    rows = []
    for rank in items(comm.get("ranks")):
        transports = rank.get("transports")
        if isinstance(transports, dict) and transports:
            cells = [
                (str(label), count, TRANSPORT_CLASSES.get(transport_label(str(label)), "other"))
                for label, count in transports.items()
            ]
            rows.append((rank.get("rank"), str(rank.get("host") or ""), cells))
    return rows
