"""The consistency table: one row per node, the versions that must agree across nodes side by side.

Built into the document once (``consistency``), from the node facts, the run's ``cluster``
section and the findings. It judges nothing itself: a cell is flagged only where a finding
already judged it (a cross-node rule for a column, a Docker-network finding for a node's
address), and the flag is that finding's title.
"""

from __future__ import annotations

from typing import Any

from nccldoctor.report.shape import items, section, values

# (key, heading) of the per-node version columns, in the table's order.
COLUMNS = (
    ("gpus", "GPUs"),
    ("driver", "driver"),
    ("cuda", "CUDA"),
    ("torch", "torch"),
    ("nccl", "NCCL"),
)
# The registered cross-node rule (checks/cluster.py) that judges each column.
COLUMN_RULES = {
    "gpus": "cluster.gpu-model-differs",
    "driver": "cluster.driver-differs",
    "cuda": "cluster.cuda-version-differs",
    "torch": "cluster.torch-version-differs",
    "nccl": "cluster.nccl-version-differs",
}
# Findings of this category say that a node's address is hidden behind Docker's networking.
ADDRESS_CATEGORY = "docker_network"
_JUDGED = ("fail", "warn")


def consistency_table(document: dict[str, Any]) -> dict[str, Any]:
    """``{"columns": [[key, heading]...], "rows": [...]}``: the run's nodes first, then nodes known
    only from facts; each row has ``node``, ``node_rank``, ``address``, ``ranks``, ``missing``,
    ``cells`` (column → text) and ``flags`` (column or "address" → the judging finding's title)."""
    facts = {str(n.get("node", "")): n for n in items(document.get("nodes"))}
    cluster = section(document, "cluster")
    findings = [f for f in items(document.get("findings")) if f.get("severity") in _JUDGED]
    rows: dict[str, dict[str, Any]] = {}
    for entry in items(cluster.get("nodes")):
        name = str(entry.get("name", ""))
        rows[name] = _row(name, entry.get("node_rank"), _address(entry), _ranks(entry))
    for name in facts:
        rows.setdefault(name, _row(name))
    for name in values(cluster.get("missing_nodes")):
        rows.setdefault(str(name), _row(str(name)))["missing"] = True
    judged = {
        column: str(finding.get("title", ""))
        for finding in findings
        for column, rule in COLUMN_RULES.items()
        if finding.get("id") == rule
    }
    for row in rows.values():
        row["cells"] = _node_cells(facts.get(row["node"], {}))
        row["flags"] = {c: title for c, title in judged.items() if row["cells"].get(c)}
        hidden = [
            str(f.get("title", ""))
            for f in findings
            if f.get("category") == ADDRESS_CATEGORY and f.get("node") == row["node"]
        ]
        if hidden:
            row["flags"]["address"] = "; ".join(hidden)
    return {"columns": [list(column) for column in COLUMNS], "rows": list(rows.values())}


def _row(name: str, node_rank: Any = None, address: str = "", ranks: str = "") -> dict[str, Any]:
    return {
        "node": name,
        "node_rank": node_rank if isinstance(node_rank, int) else None,
        "address": address,
        "ranks": ranks,
        "missing": False,
    }


def _address(entry: dict[str, Any]) -> str:
    """The node's address; both addresses when the master saw it from another one."""
    advertised, seen = entry.get("advertised_address"), entry.get("seen_address")
    if advertised and seen and advertised != seen:
        return f"{advertised} (seen as {seen})"
    return str(entry.get("address") or "")


def _ranks(entry: dict[str, Any]) -> str:
    return ", ".join(str(r) for r in values(entry.get("ranks")))


def _node_cells(facts: dict[str, Any]) -> dict[str, str]:
    gpu, software = section(facts, "gpu"), section(facts, "software")
    devices = items(gpu.get("devices"))
    names = sorted({str(d.get("name", "")) for d in devices if d.get("name")})
    libraries = [lib.get("version") for lib in items(software.get("nccl_libraries"))]
    return {
        "gpus": f"{len(devices)} × {', '.join(names)}" if names else ("0" if gpu else ""),
        "driver": str(gpu.get("driver_version") or ""),
        "cuda": str(software.get("cuda_runtime") or software.get("torch_cuda") or ""),
        "torch": str(software.get("torch_version") or ""),
        "nccl": str(software.get("torch_nccl") or next((v for v in libraries if v), "")),
    }
