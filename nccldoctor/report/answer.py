"""The verdict and the one-paragraph answer of a report document, shared by every view.

"AllReduce over 4 ranks on 2 nodes used NET/Socket via eth0, GPUDirect RDMA off, 2 channels,
Ring with Simple for ≥ 64 KiB, Tree with LL below. No problems found." The NCCL part is the
ncclog summary's own sentence (``nccl.answer``) when the document has one; otherwise it is built
here from the summary's fields. Everything comes from the document, nothing is measured.
"""

from __future__ import annotations

from typing import Any

from nccldoctor.report.units import format_bytes, format_gbps

# banner key -> heading; the key is also the CSS class of the HTML banner.
BANNERS = {
    "healthy": "Healthy",
    "warnings": "Healthy, with warnings",
    "problems": "Problems found",
    "hang": "Hang",
    "incomplete": "Could not run",
}
# The keys `explain` puts at top level (issue 3); a check report has them under `nccl`.
NCCL_SUMMARY_KEYS = (
    "nccl_version",
    "cuda_version",
    "nranks",
    "nodes",
    "network",
    "interfaces",
    "gdrdma",
    "transports",
    "channels",
    "algorithms",
    "init_complete",
)
_TITLES_NAMED = 3


def banner(document: dict[str, Any]) -> str:
    """healthy | warnings | problems | hang | incomplete: a hang outranks the rest."""
    if document.get("hang"):
        return "hang"
    if not document.get("completed", True):
        return "incomplete"
    verdict = document.get("verdict", "healthy")
    return verdict if verdict in BANNERS else "problems"


def nccl_summary(document: dict[str, Any]) -> dict[str, Any]:
    """The NCCL log summary: the `nccl` section, else explain's top-level keys, else {}."""
    section = document.get("nccl")
    if isinstance(section, dict):
        return section
    if document.get("kind") == "explain":
        return {k: document[k] for k in NCCL_SUMMARY_KEYS if k in document}
    return {}


def answer(document: dict[str, Any]) -> str:
    """The paragraph under the banner: what NCCL chose, then what went wrong (or that nothing did)."""
    summary = nccl_summary(document)
    sentences = [summary["answer"]] if _text(summary.get("answer")) else [nccl_sentence(summary)]
    if not summary:
        sentences.append(_subject_sentence(document))
    sentences += [
        _hang_sentence(document),
        _findings_sentence(document),
        _bandwidth_sentence(document),
    ]
    return " ".join(s for s in sentences if s)


def nccl_sentence(summary: dict[str, Any]) -> str:
    """ "AllReduce over 4 ranks on 2 nodes used NET/Socket via eth0, ..." ("" without a summary)."""
    if not summary:
        return ""
    algorithms = [a for a in summary.get("algorithms") or [] if isinstance(a, dict)]
    collective = _text(algorithms[0].get("collective")) if algorithms else ""
    subject = " ".join(
        part
        for part in (
            collective or "NCCL",
            _count(summary.get("nranks"), "rank", "over"),
            _count(_node_count(summary.get("nodes")), "node", "on"),
        )
        if part
    )
    used = [_network(summary)]
    gdr = summary.get("gdrdma")
    if isinstance(gdr, bool):
        used.append(f"GPUDirect RDMA {'on' if gdr else 'off'}")
    if isinstance(summary.get("channels"), int):
        used.append(_count(summary["channels"], "channel"))
    used.append(_algorithms(algorithms))
    sentence = f"{subject} used {', '.join(u for u in used if u)}."
    if summary.get("init_complete") is False:
        sentence += " NCCL init did not complete on every rank."
    return sentence


def _network(summary: dict[str, Any]) -> str:
    network = _text(summary.get("network"))
    name = f"NET/{network}" if network in ("IB", "Socket") else network or "an unknown network"
    interfaces = [i for i in summary.get("interfaces") or [] if isinstance(i, str)]
    return f"{name} via {', '.join(interfaces)}" if interfaces else name


def _algorithms(algorithms: list[dict[str, Any]]) -> str:
    """ "Ring with Simple for ≥ 64 KiB, Tree with LL below" (largest sizes first)."""
    ordered = sorted(algorithms, key=lambda a: -(a.get("min_bytes") or 0))
    parts = []
    for previous, algo in zip([None, *ordered], ordered, strict=False):
        choice = f"{algo.get('algorithm', '?')} with {algo.get('protocol', '?')}"
        low = algo.get("min_bytes") or 0
        if low:
            choice += f" for ≥ {format_bytes(low)}"
        elif previous is not None:
            choice += " below"
        if algo.get("source") == "tuning-model":
            choice += " (predicted by NCCL's tuning model)"
        parts.append(choice)
    return ", ".join(parts)


def _subject_sentence(document: dict[str, Any]) -> str:
    """ "Preflight of gpu-box-7." for a document without an NCCL summary."""
    nodes = document.get("nodes")
    names = (
        [n.get("node", "") for n in nodes if isinstance(n, dict)] if isinstance(nodes, list) else []
    )
    kind = _text(document.get("kind")).capitalize() or "Report"
    return f"{kind} of {', '.join(n for n in names if n)}." if any(names) else ""


def _hang_sentence(document: dict[str, Any]) -> str:
    hang = document.get("hang")
    if not isinstance(hang, dict):
        return ""
    stuck = [s for s in hang.get("stuck") or [] if isinstance(s, dict)]
    phase = hang.get("phase") or "an unknown phase"
    where = "; ".join(
        f"rank {s.get('rank')} on {s.get('node')}"
        + (f" in {s['phase']}" if s.get("phase") not in (None, phase) else "")
        for s in stuck[:_TITLES_NAMED]
    )
    sentence = f"The run hung in {phase}" + (f" ({where})." if where else ".")
    verdict = _text(hang.get("verdict")).rstrip(".")
    return f"{sentence} {verdict[:1].upper()}{verdict[1:]}." if verdict else sentence


def _findings_sentence(document: dict[str, Any]) -> str:
    findings = [f for f in document.get("findings") or [] if isinstance(f, dict)]
    for severity, noun in (("fail", "problem"), ("warn", "warning")):
        titles = [f.get("title", "") for f in findings if f.get("severity") == severity]
        if titles:
            named = "; ".join(titles[:_TITLES_NAMED])
            more = len(titles) - _TITLES_NAMED
            tail = f"; and {more} more" if more > 0 else ""
            return f"{_count(len(titles), noun).capitalize()}: {named}{tail}."
    if not document.get("completed", True):
        return "The run could not complete."
    return "No problems found."


def _bandwidth_sentence(document: dict[str, Any]) -> str:
    section = document.get("bandwidth")
    rows = [r for r in (section or {}).get("rows") or [] if isinstance(r, dict)]
    rows = [r for r in rows if isinstance(r.get("busbw_gbps"), (int, float))]
    if not rows:
        return ""
    best = max(rows, key=lambda r: r["busbw_gbps"])
    return (
        f"Peak bus bandwidth {format_gbps(best['busbw_gbps'])} GB/s "
        f"at {format_bytes(best['size_bytes'])}."
    )


def _node_count(nodes: Any) -> int | None:
    if isinstance(nodes, int):
        return nodes
    return len(nodes) if isinstance(nodes, list) else None


def _count(n: Any, noun: str, preposition: str = "") -> str:
    if not isinstance(n, int) or isinstance(n, bool):
        return ""
    words = f"{n} {noun}{'s' if n != 1 else ''}"
    return f"{preposition} {words}".strip()


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
