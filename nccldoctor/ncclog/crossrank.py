"""Findings that need more than one rank's log: who never finished init, who stopped early,
who disagrees with the others, and at which collective the ranks went separate ways."""

from __future__ import annotations

from collections import Counter, defaultdict

from nccldoctor.debugenv import NCCL_DEBUG_SUBSYS
from nccldoctor.model import Finding, Severity
from nccldoctor.ncclog.parser import LogSet
from nccldoctor.ncclog.records import ProcessLog
from nccldoctor.ncclog.summary import CommGroup, Member, group_comms

# init.cc ncclGetErrorString
RESULTS = {
    1: ("ncclUnhandledCudaError", "cuda_error"),
    2: ("ncclSystemError", "other"),
    3: ("ncclInternalError", "other"),
    4: ("ncclInvalidArgument", "env_config"),
    5: ("ncclInvalidUsage", "env_config"),
    6: ("ncclRemoteError", "remote_peer_closed"),
    7: ("ncclInProgress", "other"),
    8: ("ncclTimeout", "collective_timeout_hang"),
}
P2P_FUNCS = {"Send", "Recv", "SendRecv"}
_HANG_FIX = (
    "The stuck ranks' last lines say where they stopped. Check that every node reaches every\n"
    "other node's bootstrap and NET interfaces (same NCCL_SOCKET_IFNAME everywhere, no firewall on\n"
    "ephemeral TCP ports, no Docker bridge/NAT: use --network host), then rerun with\n"
    f"NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS={NCCL_DEBUG_SUBSYS}"
)


def _who(member: Member) -> str:
    proc, comm = member
    return f"rank {comm.rank if comm.rank is not None else '?'} ({proc.key})"


def _finding(
    fid: str,
    category: str,
    severity: Severity,
    title: str,
    evidence: list[str],
    fix: str,
    member: Member | None = None,
) -> Finding:
    node = member[0].host if member else None
    rank = member[1].rank if member else None
    return Finding(
        fid, category, severity, title, evidence[:12], fix, area="logs", node=node, rank=rank
    )


def _ranks(members: list[Member]) -> str:
    ranks = sorted(c.rank for _, c in members if c.rank is not None)
    return ", ".join(map(str, ranks)) or "?"


def init_findings(group: CommGroup) -> list[Finding]:
    started = [m for m in group.members if m[1].init_start or m[1].init_complete]
    stuck = [m for m in started if not m[1].init_complete]
    if not stuck:
        return []
    evidence = [f"{_who(m)} last line: {m[0].last_line}" for m in stuck]
    if len(stuck) == len(started):
        title = f"NCCL init never completed on any of the {len(started)} ranks in these logs"
    else:
        title = f"{len(stuck)} of {len(started)} ranks never reached Init COMPLETE (ranks {_ranks(stuck)})"
    return [
        _finding(
            "logs.init-incomplete",
            "collective_timeout_hang",
            Severity.FAIL,
            title,
            evidence,
            _HANG_FIX,
            stuck[0],
        )
    ]


def missing_ranks(group: CommGroup, hanging: bool) -> list[Finding]:
    nranks = group.nranks
    present = {c.rank for _, c in group.members}
    if not nranks or None in present or len(present) >= nranks:
        return []  # (logs without init lines do not say which rank a process is)
    missing = [r for r in range(nranks) if r not in present]
    shown = ", ".join(map(str, missing[:16])) + (" …" if len(missing) > 16 else "")
    return [
        _finding(
            "logs.ranks-missing",
            "collective_timeout_hang",
            Severity.WARN if hanging else Severity.INFO,
            f"{len(missing)} of {nranks} ranks printed nothing in these logs (ranks {shown})",
            [f"communicator {group.key}: logs of {len(present)} ranks given"],
            "Pass the logs of every rank (NCCL_DEBUG_FILE=/path/nccl.%h.%p.log on every node). A rank\n"
            "that never started, or died before NCCL printed anything, also looks like this.",
        )
    ]


def disagreement(
    group: CommGroup, what: str, get, fid: str, category: str, severity: Severity, fix: str
) -> list[Finding]:
    values = [(m, v) for m in group.members if (v := get(m)) is not None]
    distinct = {v for _, v in values}
    if len(distinct) < 2:
        return []
    common = Counter(v for _, v in values).most_common(1)[0][0]
    odd = [(m, v) for m, v in values if v != common]
    evidence = [f"{_who(m)}: {what} {v}" for m, v in odd] + [
        f"{len(values) - len(odd)} other ranks: {what} {common}"
    ]
    return [
        _finding(
            fid,
            category,
            severity,
            f"ranks disagree on {what}: {', '.join(sorted(str(v) for v in distinct))}",
            evidence,
            fix,
            odd[0][0],
        )
    ]


def divergence(group: CommGroup) -> list[Finding]:
    """Ranks that called different collectives at one opCount, or stopped before the others."""
    traced = [m for m in group.members if m[1].last_op is not None]
    if len(traced) < 2:
        return []
    by_op: dict[int, dict[tuple, list[Member]]] = defaultdict(lambda: defaultdict(list))
    for m in traced:
        for op in m[1].ops.values():
            if op.func not in P2P_FUNCS:
                by_op[op.op_count][op.signature()].append(m)
    for op_count in sorted(by_op):
        calls = by_op[op_count]
        if len(calls) > 1:
            evidence = [
                f"{_ranks(ms)}: {func} count {count} datatype {dt} op {redop}"
                for (func, count, dt, redop), ms in calls.items()
            ]
            odd = min(calls.values(), key=len)
            return [
                _finding(
                    "logs.collective-mismatch",
                    "collective_timeout_hang",
                    Severity.FAIL,
                    f"ranks called different collectives at opCount {op_count:#x}",
                    evidence,
                    "Every rank must issue the same collectives in the same order with the same sizes.\n"
                    "Look for rank-dependent code paths (if rank == 0: ...), uneven data per rank, or\n"
                    "different NCCL_ALGO/NCCL_PROTO between ranks.",
                    odd[0],
                )
            ]
    newest = max(m[1].last_op.op_count for m in traced)  # type: ignore[union-attr]
    behind = [m for m in traced if m[1].last_op.op_count < newest]  # type: ignore[union-attr]
    if not behind:
        return []
    ahead = next(m for m in traced if m[1].last_op.op_count == newest)  # type: ignore[union-attr]
    evidence = []
    for m in behind:
        last = m[1].last_op
        want = ahead[1].ops.get(last.op_count + 1)  # type: ignore[union-attr]
        missed = f"; it never issued opCount {last.op_count + 1:#x}" + (  # type: ignore[union-attr]
            f" ({want.func} count {want.count})" if want else ""
        )
        evidence.append(f"{_who(m)} stopped at opCount {last.op_count:#x} ({last.func}){missed}")  # type: ignore[union-attr]
        evidence.append(f"  its last line: {m[0].last_line}")
    title = (
        f"ranks diverged: {len(behind)} of {len(traced)} ranks stopped before opCount "
        f"{newest:#x} that the others reached"
    )
    return [
        _finding(
            "logs.collective-divergence",
            "collective_timeout_hang",
            Severity.FAIL,
            title,
            evidence,
            "The ranks that stopped early either hang inside the previous collective or never called\n"
            "the next one (a rank-dependent code path, an exception, a data loader that ran dry).\n"
            "Get their Python stacks (py-spy dump --pid PID) and PyTorch's Flight Recorder\n"
            "(TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1).",
            behind[0],
        )
    ]


def teardown(group: CommGroup) -> list[Finding]:
    """Aborted communicators, and ranks whose log stops while the others reached teardown."""
    findings = []
    aborted = [m for m in group.members if m[1].ended == "Abort"]
    if aborted:
        findings.append(
            _finding(
                "logs.comm-aborted",
                "collective_timeout_hang",
                Severity.WARN,
                f"the communicator was aborted on {len(aborted)} rank(s) (ranks {_ranks(aborted)})",
                [f"{_who(m)} last line: {m[0].last_line}" for m in aborted],
                "An abort follows an error or a timeout (PyTorch's watchdog aborts the communicator):\n"
                "the first failure on any rank, earlier in the logs, is the cause.",
                aborted[0],
            )
        )
    ended = [m for m in group.members if m[1].ended]
    running = [m for m in group.members if not m[1].ended and (m[1].init_complete or m[1].last_op)]
    if ended and running:
        findings.append(
            _finding(
                "logs.rank-stopped-early",
                "collective_timeout_hang",
                Severity.WARN,
                f"{len(running)} of {len(group.members)} ranks never tore the communicator down "
                f"while the others did (ranks {_ranks(running)})",
                [f"{_who(m)} last line: {m[0].last_line}" for m in running],
                "Those ranks were killed, crashed or hung before destroying the communicator: look at\n"
                "their last lines, their exit status and the launcher's output.",
                running[0],
            )
        )
    return findings


def process_findings(procs: list[ProcessLog], rank_of, explained: set[str]) -> list[Finding]:
    findings = []
    versions = {p.key: p.nccl_version for p in procs if p.nccl_version}
    if len(set(versions.values())) > 1:
        evidence = [f"{key}: NCCL {v}" for key, v in sorted(versions.items())]
        findings.append(
            Finding(
                "logs.version-mismatch",
                "version_mismatch",
                Severity.FAIL,
                f"processes run different NCCL versions: {', '.join(sorted(set(versions.values())))}",
                evidence,
                "Use one NCCL everywhere: the same container image or the same torch wheel on\n"
                "every node (PyTorch wheels bundle their own libnccl).",
                area="logs",
            )
        )
    env_values: dict[str, dict[str, str]] = defaultdict(dict)
    for p in procs:
        for name, value in p.env.items():
            env_values[name][p.key] = value
    differing = {
        n: v for n, v in env_values.items() if len(set(v.values())) > 1 or len(v) < len(procs)
    }
    if differing and len(procs) > 1:
        evidence = [
            f"{n}: "
            + ", ".join(f"{k}={v}" for k, v in sorted(vals.items())[:6])
            + ("" if len(vals) == len(procs) else f" (unset on {len(procs) - len(vals)} processes)")
            for n, vals in sorted(differing.items())
        ]
        findings.append(
            Finding(
                "logs.env-differs",
                "env_config",
                Severity.WARN,
                f"NCCL_* settings differ between processes: {', '.join(sorted(differing))}",
                evidence,
                "Set NCCL_* variables identically on every node (different NCCL_ALGO/PROTO/IB_* values\n"
                "make ranks choose differently and hang). Check ~/.nccl.conf and /etc/nccl.conf too.",
                area="logs",
            )
        )
    for p in procs:
        if p.error_code:
            name, category = RESULTS.get(p.error_code, (f"error {p.error_code}", "other"))
            evidence = [w.text.strip() for w in p.warns[-3:]] + p.backtrace[-4:]
            findings.append(
                Finding(
                    "logs.nccl-error",
                    category,
                    # when a known signature names the cause, the call path is detail
                    Severity.INFO if p.key in explained else Severity.FAIL,
                    f"NCCL returned {name} ({p.error_code}) in {p.key}",
                    evidence,
                    "The WARN lines before the error chain name the cause; the '-> N' lines are the\n"
                    "call path (read bottom-up).",
                    area="logs",
                    node=p.host,
                    rank=rank_of(p),
                )
            )
        retries = sum(p.connect_retries.values())
        if retries:
            peers = ", ".join(f"{k} ({n}×)" for k, n in sorted(p.connect_retries.items())[:5])
            findings.append(
                Finding(
                    "logs.connect-retries",
                    "connect_refused_or_timeout",
                    Severity.WARN,
                    f"{p.key} retried connections {retries} times",
                    [f"peers: {peers}", f"last line: {p.last_line}"],
                    "The peer was not listening yet or could not be reached: check that it started, that\n"
                    "its address is routable from here and that no firewall drops the port.",
                    area="logs",
                    node=p.host,
                    rank=rank_of(p),
                )
            )
    return findings


def cross_rank_findings(logs: LogSet, explained: set[str] | None = None) -> list[Finding]:
    """Every finding that compares ranks or processes; ``explained``: processes (``host:pid``)
    whose WARNs a known signature matched."""
    findings: list[Finding] = []
    for group in group_comms(logs):
        init = init_findings(group)
        findings += init
        findings += missing_ranks(group, hanging=bool(init))
        findings += disagreement(
            group,
            "nranks",
            lambda m: m[1].nranks,
            "logs.nranks-mismatch",
            "env_config",
            Severity.FAIL,
            "Every rank of a communicator must be started with the same world size\n"
            "(WORLD_SIZE / --nnodes × --nproc-per-node); a stale unique id from another job does this too.",
        )
        findings += disagreement(
            group,
            "channel count",
            lambda m: m[1].channels.get("coll"),
            "logs.channels-mismatch",
            "env_config",
            Severity.WARN,
            "Ranks see different topologies or NCCL_* settings\n"
            "(NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS, NCCL_ALGO). Make nodes and env identical.",
        )
        findings += divergence(group)
        findings += teardown(group)
    procs = list(logs.processes.values())
    findings += process_findings(procs, lambda p: p.rank, explained or set())
    seen: set[tuple] = set()
    unique = []
    for f in findings:  # one communicator's problem repeats in its sub-communicators
        key = (f.id, f.title)
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique
