"""``nccldoctor explain`` as a library: parse the logs, answer the question, list the findings.

:func:`explain` returns the report's ``extra`` section (the issue-3 keys at top level plus the
full ``nccl`` summary) and the findings. :func:`answer` turns that section into the one-line
answer the terminal prints first; the HTML view calls it on ``report.extra`` as well.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from nccldoctor.model import Finding, Severity
from nccldoctor.ncclog.crossrank import cross_rank_findings
from nccldoctor.ncclog.inputs import Source
from nccldoctor.ncclog.parser import LogSet, parse_sources
from nccldoctor.ncclog.signals import findings_from_hits, match
from nccldoctor.ncclog.summary import CommGroup, group_comms, summarize


def _network(logs: LogSet, transports: list[str]) -> str | None:
    """``IB`` or ``Socket`` (a plugin's own name when neither, e.g. ``AWS Libfabric``)."""
    names = Counter(n for p in logs.processes.values() for n in p.networks)
    if names:
        name = names.most_common(1)[0][0]
        return "IB" if name.startswith("IB") else name
    for label in transports:
        if label.startswith("NET/"):
            return label.split("/")[1]
    return None


def _interfaces(logs: LogSet, network: str | None) -> list[str]:
    out: list[str] = []
    for p in logs.processes.values():
        if network == "IB":
            names = [f"{d['hca']}:{d['port']}" for d in p.ib_devices]
        elif network == "Socket":
            names = [s["ifname"] for s in p.socket_ifs]
        else:
            names = []
        out.extend(n for n in names if n not in out)
    if not out:  # no data-plane list printed: the bootstrap interface is all we know
        for p in logs.processes.values():
            if p.bootstrap and p.bootstrap["ifname"] not in out:
                out.append(p.bootstrap["ifname"])
    return out


def _gdrdma(group: CommGroup | None, logs: LogSet) -> bool | None:
    if group is not None:
        net = [t for t in group.transports if t.startswith(("NET/", "COLLNET/"))]
        if net:
            return any(t.endswith("/GDRDMA") for t in net)
        gdr = {c.ring_gdr for _, c in group.members if c.ring_gdr is not None}
        if gdr:
            return 1 in gdr
    hca = {v for p in logs.processes.values() for v in p.gdr_hca.values()}
    return False if hca == {False} else None


def _most_common(values: Iterable[Any]) -> Any:
    counted = Counter(v for v in values if v is not None)
    return counted.most_common(1)[0][0] if counted else None


def unmatched_warnings(logs: LogSet) -> list[Finding]:
    """WARN lines no signature explains, as one finding per process (so none is dropped)."""
    findings = []
    for p in logs.processes.values():
        plain = [w for w in p.warns if not match(w.msg)]
        if not plain:
            continue
        evidence = []
        for w in plain[:6]:
            where = f"{w.file}:{w.line}" + (f" ({w.func})" if w.func else "") if w.file else ""
            evidence.append(f"{where} {w.msg}".strip())
            evidence.extend(f"  {h}" for h in w.hints[:2])
        findings.append(
            Finding(
                "logs.nccl-warning",
                "other",
                Severity.WARN,
                f"NCCL printed {len(plain)} warning(s) in {p.key}",
                evidence,
                "Read the warnings (and the HINT lines under them); rerun with NCCL_DEBUG=INFO for context.",
                area="logs",
                node=p.host,
                rank=p.rank,
            )
        )
    return findings


def explain_logs(logs: LogSet) -> tuple[dict[str, Any], list[Finding]]:
    """The report's extra section and findings for parsed ``logs``."""
    groups = group_comms(logs)
    main = groups[0] if groups else None
    procs = list(logs.processes.values())
    transports = main.transports if main else []
    network = _network(logs, transports)
    extra: dict[str, Any] = {
        "nccl_version": _most_common(p.nccl_version for p in procs)
        or _most_common(v.split()[2].split("+")[0] for v in logs.bare_versions),
        "cuda_version": _most_common(p.cuda_version for p in procs),
        "nranks": main.nranks if main else None,
        "nodes": main.nodes if main else (len({p.host for p in procs}) or None),
        "network": network,
        "interfaces": _interfaces(logs, network),
        "gdrdma": _gdrdma(main, logs),
        "transports": transports,
        "channels": main.channels if main else None,
        "algorithms": main.algorithms() if main else [],
        "init_complete": main.init_complete if main else None,
        "bootstrap": _most_common(
            f"{p.bootstrap['ifname']}:{p.bootstrap['address']}" for p in procs if p.bootstrap
        ),
    }
    extra["answer"] = answer(extra)
    extra["nccl"] = summarize(logs)

    def where(key: str | None) -> tuple[str | None, int | None]:
        proc = logs.processes.get(key or "")
        return (proc.host, proc.rank) if proc else (None, None)

    findings = findings_from_hits(logs.signatures, where)
    findings += unmatched_warnings(logs)
    findings += cross_rank_findings(logs)
    return extra, findings


def explain(
    sources: list[Source], jobs: int | None = None, progress: Callable[[str], None] | None = None
) -> tuple[dict[str, Any], list[Finding]]:
    return explain_logs(parse_sources(sources, jobs=jobs, progress=progress))


def human_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    if n >= 1024:
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if n >= size:
                return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _algo_phrase(rows: list[dict[str, Any]], func: str) -> str:
    mine = [r for r in rows if r["collective"] == func]
    if not mine:
        return ""
    mine.sort(key=lambda r: -r["min_bytes"])
    parts = []
    for i, r in enumerate(mine):
        pick = f"{r['algorithm']}/{r['protocol']}"
        if r["source"] == "log":
            lo, hi = human_bytes(r["min_bytes"]), human_bytes(r["max_bytes"])
            parts.append(f"{pick} for {lo}" + ("" if lo == hi else f"–{hi}"))
        elif i == len(mine) - 1 and len(mine) > 1:
            parts.append(f"{pick} below")
        elif r["min_bytes"] == 0:
            parts.append(f"{pick} at every size")
        else:
            parts.append(f"{pick} for ≥ {human_bytes(r['min_bytes'])}")
    shown = parts[:3] + (["…"] if len(parts) > 3 else [])
    how = "as logged" if mine[0]["source"] == "log" else "by NCCL's tuning model"
    return ", ".join(shown) + f" ({how})"


def answer(extra: dict[str, Any]) -> str:
    """One sentence: which collective, how many ranks and nodes, which path, which algorithm."""
    rows = extra.get("algorithms") or []
    funcs = Counter()
    for r in rows:
        funcs[r["collective"]] += r.get("calls", 0) + (r["collective"] == "AllReduce")
    func = funcs.most_common(1)[0][0] if funcs else "NCCL"
    nranks, nodes = extra.get("nranks"), extra.get("nodes")
    if nranks is None:
        version = extra.get("nccl_version")
        boot = extra.get("bootstrap")
        text = f"NCCL {version}" if version else "NCCL"
        text += f": bootstrap on {boot}" if boot else ""
        return text + "; no communicator was initialised in these logs"
    node_text = f"{nodes} node{'s' if nodes != 1 else ''}" if nodes else "? nodes"
    ranks = f"{nranks} rank{'s' if nranks != 1 else ''} on {node_text}"
    if func in ("NCCL", "?"):
        head = f"{'Collectives' if func == '?' else 'Communicator'} of {ranks}"
    else:
        head = f"{func} over {ranks}"
    parts = []
    network, transports = extra.get("network"), extra.get("transports") or []
    if any(t.startswith("NET/") for t in transports) or (network and (nodes or 1) > 1):
        via = ", ".join(extra.get("interfaces") or [])
        gdr = {True: " with GPUDirect RDMA", False: " without GPUDirect RDMA"}.get(
            extra.get("gdrdma"), ""
        )
        parts.append(f"NET/{network or '?'}" + (f" via {via}" if via else "") + gdr)
    local = sorted({t for t in transports if not t.startswith(("NET/", "COLLNET/"))})
    if local:
        parts.append(("intra-node " if parts else "") + " + ".join(local))
    if extra.get("channels"):
        parts.append(f"{extra['channels']} channels")
    phrase = _algo_phrase(rows, func)
    if phrase:
        parts.append(phrase)
    text = head + (": " + ", ".join(parts) if parts else "")
    if extra.get("init_complete") is False:
        text += "; NCCL init did NOT complete on every rank"
    return text
