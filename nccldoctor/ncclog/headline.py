"""The headline facts of parsed logs: which NCCL, network, interfaces, GPUDirect RDMA, the answer.

:func:`explain_logs` returns the report's ``extra`` section (the headline keys at top level plus
the full ``nccl`` summary). :func:`answer` turns those keys into the one-line answer the terminal
prints first; it is kept as ``nccl.answer``, which the other views show. Judging the logs is the
rules' work (``checks/logs.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from nccldoctor.ncclog.records import LogSet
from nccldoctor.ncclog.summary import CommGroup, group_comms, summarize
from nccldoctor.units import format_bytes

Fact = tuple[Any, str | None]  # a headline value and the evidence it came from


def _all_transports(logs: LogSet) -> list[str]:
    return sorted(
        {t for p in logs.processes.values() for c in p.comms.values() for t in c.transports}
    )


def _net_name(name: str) -> str:
    """NCCL's network name as the headline says it: the IB plugins (``IBext``, ``IBext_v8``) and
    the internal IB are all InfiniBand verbs, ``IB``."""
    return "IB" if name.startswith("IB") else name


def _network(logs: LogSet, transports: list[str]) -> Fact:
    """``IB`` or ``Socket`` (a plugin's own name when neither, e.g. ``AWS Libfabric``), from the
    best line that survived (docs/nccl-log-formats.md#network)."""
    names = Counter(n for p in logs.processes.values() for n in p.networks)
    if names:
        return _net_name(names.most_common(1)[0][0]), "Using network"
    for label in transports + _all_transports(logs):
        parts = label.split("/")
        if parts[0] == "NET" and len(parts) > 2:  # "NET/Sock": a line cut mid-way
            return _net_name(parts[1]), "channel lines"
    procs = logs.processes.values()
    failed = Counter(n for p in procs for n in p.failed_nets)
    if failed:  # a failing line of a transport: that transport carried the job
        return failed.most_common(1)[0][0], "failing lines"
    plugins = Counter(p.plugin_devices["name"] for p in procs if p.plugin_devices)
    if plugins:  # an external plugin that found its devices is taken before IB and Socket
        return plugins.most_common(1)[0][0], "plugin devices"
    if any(p.ib_devices for p in procs):  # IB is tried first: Socket only runs when it fails
        return "IB", "NET/IB : Using"
    if any(p.socket_ifs for p in procs):
        return "Socket", "NET/Socket : Using"
    return None, None


def _interfaces(logs: LogSet, network: str | None, transports: list[str]) -> Fact:
    """The data-plane devices: the HCAs connections use (``NET/IB/<index>``), else all listed."""
    used = {t.split("/")[2] for t in transports or _all_transports(logs) if t.startswith("NET/IB/")}
    listed = {str(d["index"]) for p in logs.processes.values() for d in p.ib_devices}
    if not used & listed:
        used = set()  # a merged virtual NIC (index past the list, 2.19+ "Made vNic"): all of them
    out: list[str] = []
    for p in logs.processes.values():
        if network == "IB":
            names = [
                f"{d['hca']}:{d['port']}"
                for d in p.ib_devices
                if not used or str(d["index"]) in used
            ]
        elif network == "Socket":
            names = [s["ifname"] for s in p.socket_ifs]
        else:
            names = []
        out.extend(n for n in names if n not in out)
    if out:
        return out, "NET/IB : Using" if network == "IB" else "NET/Socket : Using"
    for p in logs.processes.values():  # no data-plane list printed: the bootstrap one is all
        if p.bootstrap and p.bootstrap["ifname"] not in out:
            out.append(p.bootstrap["ifname"])
    return out, "Bootstrap : Using" if out else None


def _gdrdma(group: CommGroup | None, logs: LogSet) -> Fact:
    """Whether network transfers go GPU<->NIC directly (docs/nccl-log-formats.md#gpudirect-rdma):
    the /GDRDMA suffix of network channels decides in every version; without channel lines,
    ``Connected all rings … GDR n`` (2.24+), then the per-HCA and per-GPU GPU Direct RDMA lines."""
    net = [t for t in (group.transports if group else []) if t.startswith(("NET/", "COLLNET/"))]
    net = net or [t for t in _all_transports(logs) if t.startswith(("NET/", "COLLNET/"))]
    if net:
        return any(t.endswith("/GDRDMA") for t in net), "channel lines"
    members = group.members if group else []
    gdr = {c.ring_gdr for _, c in members if c.ring_gdr is not None and group.nodes > 1}
    if gdr:
        return 1 in gdr, "Connected all rings"
    procs = logs.processes.values()
    hca = {v for p in procs for v in p.gdr_hca.values()}
    pairs = {g["enabled"] for p in procs for g in p.gdr_pairs}
    if True in hca or True in pairs:
        return True, "GPU Direct RDMA Enabled"
    if hca or pairs:
        return False, "GPU Direct RDMA Disabled"
    return None, None


def _nranks(group: CommGroup | None, logs: LogSet) -> Fact:
    """The job's size: NCCL's own count, else the ranks channel and ring lines name, else what
    PyTorch or the launcher said."""
    if group is not None and group.nranks:
        return group.nranks, "Init / nRanks / [nranks=N]"
    seen = [
        r
        for p in logs.processes.values()
        for c in p.comms.values()
        for key in c.connections
        for r in key[2:4]
        if r >= 0
    ]
    rings = [
        len(ring)
        for p in logs.processes.values()
        for c in p.comms.values()
        for ring in c.rings.values()
    ]
    if seen or rings:
        return max(max(seen, default=-1) + 1, max(rings, default=0)), "channel lines"
    if logs.world_sizes:
        return max(logs.world_sizes.items(), key=lambda kv: kv[1])[0], "world size"
    return None, None


def _init_complete(group: CommGroup | None, logs: LogSet) -> Fact:
    """True when Init COMPLETE was seen (on every rank that started); False when init visibly
    began and never completed; None when nothing of init is in the logs."""
    done = group.init_complete if group else None
    if done is not None:
        return done, "Init START / COMPLETE"
    if any(c.init_complete for p in logs.processes.values() for c in p.comms.values()):
        return True, "Init COMPLETE"
    if logs.processes or logs.bare_versions:
        return False, "NCCL setup lines without Init COMPLETE"
    if logs.init_failures:
        return False, "failure inside init"
    return None, None


def _gdrdma_reason(gdrdma: bool | None, logs: LogSet) -> str | None:
    """Why GPUDirect RDMA is on or off, from the lines that decide it (docs/nccl-log-formats.md#gpudirect-rdma)."""
    if gdrdma is None:
        return None
    if gdrdma:
        return "network connections are marked /GDRDMA: the NIC reads and writes GPU memory"
    procs = list(logs.processes.values())
    off = sorted({hca for p in procs for hca, on in p.gdr_hca.items() if not on})
    if off:
        return (
            f"NCCL reports GPU Direct RDMA Disabled for HCA {', '.join(off)}: the NIC cannot "
            "reach GPU memory (nvidia-peermem not loaded, or no DMA-BUF support)"
        )
    far = next((g for p in procs for g in p.gdr_pairs if not g["enabled"]), None)
    if far is not None:
        return (
            f"GPU {far['gpu']} and HCA {far['hca']} are too far apart (path distance "
            f"{far['distance']} > {far['limit']}, NCCL_NET_GDR_LEVEL): data is staged in host memory"
        )
    if any(p.networks and p.networks[0] == "Socket" for p in procs):
        return "the network is Socket (TCP): data goes through host memory"
    return "no network connection is marked /GDRDMA: data is staged in host memory"


def _most_common(values: Iterable[Any]) -> Any:
    counted = Counter(v for v in values if v is not None)
    return counted.most_common(1)[0][0] if counted else None


def explain_logs(logs: LogSet) -> dict[str, Any]:
    """The report's extra section for parsed ``logs``.

    ``extra["nccl"]`` is the whole summary: the headline keys, ``bootstrap``, ``answer`` and the
    per-communicator and per-process detail; the headline keys are also copied to the top level.
    """
    groups = group_comms(logs)
    main = groups[0] if groups else None
    procs = list(logs.processes.values())
    transports = main.transports if main else []
    network, network_from = _network(logs, transports)
    interfaces, interfaces_from = _interfaces(logs, network, transports)
    gdrdma, gdrdma_from = _gdrdma(main, logs)
    nranks, nranks_from = _nranks(main, logs)
    init_complete, init_from = _init_complete(main, logs)
    keys: dict[str, Any] = {
        "nccl_version": _most_common(p.nccl_version for p in procs)
        or _most_common(
            v[v.find("NCCL version ") :].split()[2].split("+")[0] for v in logs.bare_versions
        ),
        "cuda_version": _most_common(p.cuda_version for p in procs),
        "nranks": nranks,
        "nodes": main.nodes if main else (len({p.host for p in procs}) or None),
        "network": network,
        "interfaces": interfaces,
        "gdrdma": gdrdma,
        "transports": transports,
        "channels": main.channels if main else None,
        "algorithms": main.algorithms() if main else [],
        "init_complete": init_complete,
    }
    fact_sources = {
        "network": network_from,
        "interfaces": interfaces_from,
        "gdrdma": gdrdma_from,
        "nranks": nranks_from,
        "init_complete": init_from,
    }
    bootstrap = _most_common(
        f"{p.bootstrap['ifname']}:{p.bootstrap['address']}" for p in procs if p.bootstrap
    )
    nccl = {
        **keys,
        "bootstrap": bootstrap,
        "gdrdma_reason": _gdrdma_reason(keys["gdrdma"], logs),
        "fact_sources": fact_sources,  # which kind of line each headline fact was read from
    }
    nccl["answer"] = answer(nccl)
    nccl.update(summarize(logs))
    return {**keys, "nccl": nccl}


def _algo_phrase(rows: list[dict[str, Any]], func: str) -> str:
    mine = [r for r in rows if (r["collective"] or "?") == func]
    if not mine:
        return ""
    mine.sort(key=lambda r: -r["min_bytes"])
    parts = []
    for r in mine:
        pick = f"{r['algorithm']}/{r['protocol']}"
        if r["source"] == "log":
            lo, hi = format_bytes(r["min_bytes"]), format_bytes(r["max_bytes"])
            parts.append(f"{pick} for {lo}" + ("" if lo == hi else f"–{hi}"))
        elif r["min_bytes"] == 0:
            parts.append(f"{pick} below" if len(mine) > 1 else f"{pick} at every size")
        elif r["max_bytes"] is None:
            parts.append(f"{pick} for ≥ {format_bytes(r['min_bytes'])}")
        else:
            lo, hi = format_bytes(r["min_bytes"]), format_bytes(r["max_bytes"] + 1)
            parts.append(f"{pick} for {lo}–{hi}")
    shown = parts[:3] + (["…"] if len(parts) > 3 else [])
    how = "as logged" if mine[0]["source"] == "log" else "by NCCL's tuning model"
    return ", ".join(shown) + f" ({how})"


def answer(extra: dict[str, Any]) -> str:
    """One sentence: which collective, how many ranks and nodes, which path, which algorithm."""
    rows = extra.get("algorithms") or []
    funcs = Counter()
    for r in rows:
        funcs[r["collective"] or "?"] += r.get("calls", 0) + (r["collective"] == "AllReduce")
    func = funcs.most_common(1)[0][0] if funcs else "NCCL"
    nranks, nodes = extra.get("nranks"), extra.get("nodes")
    if nranks is None:
        version = extra.get("nccl_version")
        boot = extra.get("bootstrap")
        if not version and not boot:  # not an NCCL log (a gloo job's, an application's)
            return "No NCCL output in these logs"
        text = f"NCCL {version}" if version else "NCCL"
        text += f" bootstrap on {boot}" if boot else ""
        return text + ", but no communicator was initialised in these logs"
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
