"""Rules over NCCL/PyTorch logs (scope ``logs``): the inputs, every known signature of the
catalogue, WARNs no signature explains, and what needs more than one rank's log — who never
finished init, who stopped early, who disagrees with the others, where the ranks went separate
ways.

The subject is a :class:`~nccldoctor.ncclog.summary.LogReading`: the parser's records and their
communicators. Each catalogue entry (``signatures.toml``) is registered here as a rule of its
own id, so ``--list-checks``, the crash guard and the docs see it like any other rule.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from checks import Check, Problem, check, register
from checks.signatures import SIGNATURES, Signature, match_line
from nccldoctor.debugenv import NCCL_DEBUG_SUBSYS
from nccldoctor.model import Severity
from nccldoctor.ncclog.inputs import MAX_LINE
from nccldoctor.ncclog.summary import CommGroup, LogReading, Member

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
MAX_EVIDENCE = 12
_HANG_FIX = (
    "The stuck ranks' last lines say where they stopped. Check that every node reaches every\n"
    "other node's bootstrap and NET interfaces (same NCCL_SOCKET_IFNAME everywhere, no firewall on\n"
    "ephemeral TCP ports, no Docker bridge/NAT: use --network host), then rerun with\n"
    f"NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS={NCCL_DEBUG_SUBSYS}"
)


def _who(member: Member) -> str:
    proc, comm = member
    return f"rank {comm.rank if comm.rank is not None else '?'} ({proc.key})"


def _ranks(members: list[Member]) -> str:
    ranks = sorted(c.rank for _, c in members if c.rank is not None)
    return ", ".join(map(str, ranks)) or "?"


def _problem(
    severity: Severity, title: str, evidence: list[str], fix: str, member: Member | None = None
) -> Problem:
    return Problem(
        severity,
        title,
        evidence[:MAX_EVIDENCE],
        fix,
        node=member[0].host if member else None,
        rank=member[1].rank if member else None,
    )


def _per_group(judge: Callable[[CommGroup], Problem | None]) -> Callable[[LogReading], list]:
    """A rule judged per communicator, said once: a communicator's problem repeats in its
    sub-communicators with the same title."""

    def rule(reading: LogReading) -> list[Problem]:
        said: dict[str, Problem] = {}
        for group in reading.groups:
            problem = judge(group)
            if problem is not None:
                said.setdefault(problem.title, problem)
        return list(said.values())

    rule.__doc__ = judge.__doc__
    return rule


def _explained(reading: LogReading) -> set[str]:
    """Processes (``host:pid``) whose lines a known signature matched."""
    return {key for hit in reading.logs.signatures.values() for key in hit.keys}


# --- the inputs ----------------------------------------------------------------------------------


# A rank that stopped or diverged is why the others' watchdogs time out: their timeouts follow.
WATCHDOG_TIMEOUTS = ("torch.watchdog-timeout", "torch.watchdog-failure-seq", "torch.watchdog-stuck")


@check("logs.unreadable", area="logs", category="other", scope="logs")
def unreadable(reading: LogReading) -> Problem | None:
    """An input could not be read to the end."""
    errors = reading.logs.read_errors
    if not errors:
        return None
    return Problem(
        Severity.WARN,
        f"{len(errors)} input(s) could not be read to the end",
        errors[:8],
        "Check the files' permissions and that they are complete.",
    )


@check("logs.lines-cut", area="logs", category="other", scope="logs")
def lines_cut(reading: LogReading) -> Problem | None:
    """Lines longer than any NCCL line were cut: what they held past the cut was not read."""
    cut = reading.logs.cut_lines
    if not cut:
        return None
    return Problem(
        Severity.WARN,
        f"{sum(cut.values())} line(s) over {MAX_LINE // 1024} KiB cut in {len(cut)} input(s)",
        [f"{name}: {n} line(s) cut" for name, n in list(cut.items())[:8]],
        "No NCCL line is that long: a progress bar that redraws itself with a carriage return\n"
        "(tqdm writing to a file) or binary data. NCCL lines glued behind such a bar are lost\n"
        "at the cut; give the bar's redraws their own lines and explain the copy:\n"
        "tr '\\r' '\\n' < job.log > job.lines.log",
    )


@check("logs.truncated", area="logs", category="other", scope="logs")
def truncated(reading: LogReading) -> Problem | None:
    """Lines past one of the reader's bounds (nccldoctor/limits.py) were left out: a number
    Python will not read, more processes than any node runs."""
    left = reading.logs.left_out
    if not left:
        return None
    return Problem(
        Severity.WARN,
        f"{sum(left.values())} line(s) left out of the reading",
        [f"{n} {why}" for why, n in left.items()],
        "No NCCL line holds such a number, and no log that many processes: the file is\n"
        "damaged or not a log. Attach the ranks' own NCCL_DEBUG_FILE logs.",
    )


@check("logs.no-nccl-output", area="logs", category="env_config", scope="logs")
def no_nccl_output(reading: LogReading) -> Problem | None:
    """The inputs hold no NCCL debug output at all."""
    logs = reading.logs
    if logs.nccl_lines or logs.bare_versions:
        return None
    counted = [f"{logs.other_lines} other lines, {logs.garbled_lines} garbled"]
    gloo = sorted(sig for sig in logs.signatures if "gloo" in sig)
    if gloo:  # a gloo job: NCCL has nothing to log, and its advice would be wrong
        return Problem(
            Severity.INFO,
            f"no NCCL output in {logs.lines} lines: this job ran its collectives on gloo",
            [*counted, f"gloo's own lines: {', '.join(gloo)}"],
            "The gloo findings above are the evidence; NCCL_DEBUG changes nothing for gloo.",
        )
    return Problem(
        Severity.WARN,
        f"no NCCL debug output in {logs.lines} lines of {len(logs.sources)} input(s)",
        counted,
        "If this job used NCCL (backend nccl), NCCL logs only when asked to. Rerun with:\n"
        f"export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS={NCCL_DEBUG_SUBSYS}\n"
        "export NCCL_DEBUG_FILE=/tmp/nccl.%h.%p.log   # one file per process",
    )


# --- the catalogue of known signatures -----------------------------------------------------------


def _signature_rule(signature: Signature) -> Callable[[LogReading], Problem | None]:
    def rule(reading: LogReading) -> Problem | None:
        hit = reading.logs.signatures.get(signature.id)
        if hit is None:
            return None
        lines = [h for h in hit.lines if signature.describes(h[1])]
        if not lines:
            return None
        text, _, key = lines[0]
        matched = [m for m in match_line(text) if m.signature.id == signature.id]
        if not matched:
            return None
        evidence = [line.strip() for _, line, _ in lines]
        if len(lines) == len(hit.lines) and hit.count > len(evidence):
            evidence.append(f"(seen {hit.count} times in all)")
        proc = reading.logs.processes.get(key or "")
        return matched[0].to_problem(
            evidence, proc.host if proc else None, proc.rank if proc else None
        )

    return rule


def _register_signatures(signatures: Iterable[Signature]) -> None:
    for sig in signatures:
        register(Check(sig.id, "logs", sig.category, "logs", _signature_rule(sig), sig.title))


_register_signatures(SIGNATURES)


@check("logs.nccl-warning", area="logs", category="other", scope="logs")
def unexplained_warnings(reading: LogReading) -> Iterator[Problem]:
    """NCCL printed WARN lines that no known signature explains (one finding per process)."""
    for p in reading.logs.processes.values():
        plain = [w for w in p.warns if not match_line(w.msg)]
        if not plain:
            continue
        evidence = []
        for w in plain[:6]:
            where = f"{w.file}:{w.line}" + (f" ({w.func})" if w.func else "") if w.file else ""
            evidence.append(f"{where} {w.msg}".strip())
            evidence.extend(f"  {h}" for h in w.hints[:2])
        yield Problem(
            Severity.WARN,
            f"NCCL printed {len(plain)} warning(s) in {p.key}",
            evidence,
            "Read the warnings (and the HINT lines under them); rerun with NCCL_DEBUG=INFO for context.",
            node=p.host,
            rank=p.rank,
        )


# --- one communicator's ranks ---------------------------------------------------------------------


def _init_stuck(group: CommGroup) -> tuple[list[Member], list[Member]]:
    """(ranks that began init, those of them that never completed it)."""
    started = [m for m in group.members if m[1].init_start or m[1].init_complete]
    return started, [m for m in started if not m[1].init_complete]


@check("logs.init-incomplete", area="logs", category="collective_timeout_hang", scope="logs")
@_per_group
def init_incomplete(group: CommGroup) -> Problem | None:
    """Ranks began NCCL init and never reached Init COMPLETE."""
    started, stuck = _init_stuck(group)
    if not stuck:
        return None
    evidence = [f"{_who(m)} last line: {m[0].last_line}" for m in stuck]
    if len(stuck) == len(started):
        title = f"NCCL init never completed on any of the {len(started)} ranks in these logs"
    else:
        title = f"{len(stuck)} of {len(started)} ranks never reached Init COMPLETE (ranks {_ranks(stuck)})"
    return _problem(Severity.FAIL, title, evidence, _HANG_FIX, stuck[0])


@check("logs.ranks-missing", area="logs", category="collective_timeout_hang", scope="logs")
@_per_group
def ranks_missing(group: CommGroup) -> Problem | None:
    """Ranks of a communicator printed nothing in the logs given (a warning when init hung)."""
    nranks = group.nranks
    present = {c.rank for _, c in group.members}
    if not nranks or None in present or len(present) >= nranks:
        return None  # (logs without init lines do not say which rank a process is)
    missing = [r for r in range(nranks) if r not in present]
    shown = ", ".join(map(str, missing[:16])) + (" …" if len(missing) > 16 else "")
    return _problem(
        Severity.WARN if _init_stuck(group)[1] else Severity.INFO,
        f"{len(missing)} of {nranks} ranks printed nothing in these logs (ranks {shown})",
        [f"communicator {group.key}: logs of {len(present)} ranks given"],
        "Pass the logs of every rank (NCCL_DEBUG_FILE=/path/nccl.%h.%p.log on every node). A rank\n"
        "that never started, or died before NCCL printed anything, also looks like this.",
    )


def _disagreement(
    group: CommGroup, what: str, get: Callable[[Member], Any], severity: Severity, fix: str
) -> Problem | None:
    values = [(m, v) for m in group.members if (v := get(m)) is not None]
    distinct = {v for _, v in values}
    if len(distinct) < 2:
        return None
    common = Counter(v for _, v in values).most_common(1)[0][0]
    odd = [(m, v) for m, v in values if v != common]
    evidence = [f"{_who(m)}: {what} {v}" for m, v in odd] + [
        f"{len(values) - len(odd)} other ranks: {what} {common}"
    ]
    title = f"ranks disagree on {what}: {', '.join(sorted(str(v) for v in distinct))}"
    return _problem(severity, title, evidence, fix, odd[0][0])


@check("logs.nranks-mismatch", area="logs", category="env_config", scope="logs")
@_per_group
def nranks_mismatch(group: CommGroup) -> Problem | None:
    """Ranks of one communicator were started with different world sizes."""
    return _disagreement(
        group,
        "nranks",
        lambda m: m[1].nranks,
        Severity.FAIL,
        "Every rank of a communicator must be started with the same world size\n"
        "(WORLD_SIZE / --nnodes × --nproc-per-node); a stale unique id from another job does this too.",
    )


@check("logs.channels-mismatch", area="logs", category="env_config", scope="logs")
@_per_group
def channels_mismatch(group: CommGroup) -> Problem | None:
    """Ranks of one communicator built different channel counts."""
    return _disagreement(
        group,
        "channel count",
        lambda m: m[1].channels.get("coll"),
        Severity.WARN,
        "Ranks see different topologies or NCCL_* settings\n"
        "(NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS, NCCL_ALGO). Make nodes and env identical.",
    )


def _traced(group: CommGroup) -> list[Member]:
    traced = [m for m in group.members if m[1].last_op is not None]
    return traced if len(traced) >= 2 else []


def _first_mismatch(traced: list[Member]) -> tuple[int, dict[tuple, list[Member]]] | None:
    """The first opCount at which ranks called different collectives, with who called what."""
    by_op: dict[int, dict[tuple, list[Member]]] = defaultdict(lambda: defaultdict(list))
    for m in traced:
        for op in m[1].ops.values():
            if op.func not in P2P_FUNCS:
                by_op[op.op_count][op.signature()].append(m)
    return next(((n, by_op[n]) for n in sorted(by_op) if len(by_op[n]) > 1), None)


@check(
    "logs.collective-mismatch", area="logs", category="collective_timeout_hang", scope="logs",
    explains=WATCHDOG_TIMEOUTS,
    remedy="call the same collectives in the same order on every rank",
)  # fmt: skip
@_per_group
def collective_mismatch(group: CommGroup) -> Problem | None:
    """Ranks called different collectives (or sizes) at one opCount."""
    mismatch = _first_mismatch(_traced(group))
    if mismatch is None:
        return None
    op_count, calls = mismatch
    evidence = [
        f"{_ranks(ms)}: {func} count {count} datatype {dt} op {redop}"
        for (func, count, dt, redop), ms in calls.items()
    ]
    return _problem(
        Severity.FAIL,
        f"ranks called different collectives at opCount {op_count:#x}",
        evidence,
        "Every rank must issue the same collectives in the same order with the same sizes.\n"
        "Look for rank-dependent code paths (if rank == 0: ...), uneven data per rank, or\n"
        "different NCCL_ALGO/NCCL_PROTO between ranks.",
        min(calls.values(), key=len)[0],
    )


@check(
    "logs.collective-divergence", area="logs", category="collective_timeout_hang", scope="logs",
    explains=WATCHDOG_TIMEOUTS, remedy="read the early ranks' stacks and Flight Recorder dumps",
)  # fmt: skip
@_per_group
def collective_divergence(group: CommGroup) -> Problem | None:
    """Some ranks stopped before an opCount the others reached (and no call mismatched)."""
    traced = _traced(group)
    if not traced or _first_mismatch(traced) is not None:
        return None
    newest = max(m[1].last_op.op_count for m in traced)  # type: ignore[union-attr]
    behind = [m for m in traced if m[1].last_op.op_count < newest]  # type: ignore[union-attr]
    if not behind:
        return None
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
    return _problem(
        Severity.FAIL,
        title,
        evidence,
        "The ranks that stopped early either hang inside the previous collective or never called\n"
        "the next one (a rank-dependent code path, an exception, a data loader that ran dry).\n"
        "Get their Python stacks (py-spy dump --pid PID) and PyTorch's Flight Recorder\n"
        "(TORCH_FR_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1).",
        behind[0],
    )


@check("logs.comm-aborted", area="logs", category="collective_timeout_hang", scope="logs")
@_per_group
def comm_aborted(group: CommGroup) -> Problem | None:
    """The communicator was aborted on some ranks."""
    aborted = [m for m in group.members if m[1].ended == "Abort"]
    if not aborted:
        return None
    return _problem(
        Severity.WARN,
        f"the communicator was aborted on {len(aborted)} rank(s) (ranks {_ranks(aborted)})",
        [f"{_who(m)} last line: {m[0].last_line}" for m in aborted],
        "An abort follows an error or a timeout (PyTorch's watchdog aborts the communicator):\n"
        "the first failure on any rank, earlier in the logs, is the cause.",
        aborted[0],
    )


@check(
    "logs.rank-stopped-early", area="logs", category="collective_timeout_hang", scope="logs",
    explains=WATCHDOG_TIMEOUTS, remedy="read the early ranks' stacks and Flight Recorder dumps",
)  # fmt: skip
@_per_group
def rank_stopped_early(group: CommGroup) -> Problem | None:
    """Ranks whose log stops while the others reached teardown."""
    ended = [m for m in group.members if m[1].ended]
    running = [m for m in group.members if not m[1].ended and (m[1].init_complete or m[1].last_op)]
    if not (ended and running):
        return None
    return _problem(
        Severity.WARN,
        f"{len(running)} of {len(group.members)} ranks never tore the communicator down "
        f"while the others did (ranks {_ranks(running)})",
        [f"{_who(m)} last line: {m[0].last_line}" for m in running],
        "Those ranks were killed, crashed or hung before destroying the communicator: look at\n"
        "their last lines, their exit status and the launcher's output.",
        running[0],
    )


@check(
    "logs.rank-behind", area="logs", category="collective_timeout_hang", scope="logs",
    explains=WATCHDOG_TIMEOUTS,
    remedy="read the lagging rank's stack and Flight Recorder dump",
)  # fmt: skip
def rank_behind(reading: LogReading) -> Problem | None:
    """Across the ranks of a process group, the one whose last completed collective (PyTorch's
    SeqNum, counted per group) is lowest."""
    groups: dict[str | None, dict[int, int]] = {}
    for (pg, rank), seq in reading.logs.completed_seq.items():
        groups.setdefault(pg, {})[rank] = seq
    apart = {pg: seqs for pg, seqs in groups.items() if len(set(seqs.values())) > 1}
    if not apart:
        return None
    # the group whose ranks are furthest apart: the others wait on it
    pg, seqs = max(apart.items(), key=lambda item: max(item[1].values()) - min(item[1].values()))
    low = min(seqs.values())
    behind = sorted(r for r, s in seqs.items() if s == low)
    ahead = max(seqs.values())
    where = f" in process group {pg}" if pg is not None else ""
    return Problem(
        Severity.FAIL,
        f"rank{'s' if len(behind) > 1 else ''} {', '.join(map(str, behind))} "
        f"{'are' if len(behind) > 1 else 'is'} behind{where}: last completed collective {low}, "
        f"others reached {ahead}",
        [f"rank {r}: last completed SeqNum {s}" for r, s in sorted(seqs.items())][:MAX_EVIDENCE],
        "The others wait in a collective these ranks never issued or never finished: read their\n"
        "own output for a traceback or a stall, then dump their stacks:\n"
        "py-spy dump --pid <pid of the rank behind>\n"
        "export TORCH_NCCL_DESYNC_DEBUG=1 TORCH_FR_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1",
        rank=behind[0],
    )


# --- the processes ---------------------------------------------------------------------------------


@check("logs.version-mismatch", area="logs", category="version_mismatch", scope="logs")
def version_mismatch(reading: LogReading) -> Problem | None:
    """Processes run different NCCL versions."""
    procs = reading.logs.processes.values()
    versions = {p.key: p.nccl_version for p in procs if p.nccl_version}
    if len(set(versions.values())) < 2:
        return None
    return Problem(
        Severity.FAIL,
        f"processes run different NCCL versions: {', '.join(sorted(set(versions.values())))}",
        [f"{key}: NCCL {v}" for key, v in sorted(versions.items())],
        "Use one NCCL everywhere: the same container image or the same torch wheel on\n"
        "every node (PyTorch wheels bundle their own libnccl).",
    )


@check("logs.env-differs", area="logs", category="env_config", scope="logs")
def env_differs(reading: LogReading) -> Problem | None:
    """NCCL_* settings differ between processes (or are unset on some)."""
    procs = list(reading.logs.processes.values())
    if len(procs) < 2:
        return None
    env_values: dict[str, dict[str, str]] = defaultdict(dict)
    for p in procs:
        for name, value in p.env.items():
            env_values[name][p.key] = value
    differing = {
        n: v for n, v in env_values.items() if len(set(v.values())) > 1 or len(v) < len(procs)
    }
    if not differing:
        return None
    evidence = [
        f"{n}: "
        + ", ".join(f"{k}={v}" for k, v in sorted(vals.items())[:6])
        + ("" if len(vals) == len(procs) else f" (unset on {len(procs) - len(vals)} processes)")
        for n, vals in sorted(differing.items())
    ]
    return Problem(
        Severity.WARN,
        f"NCCL_* settings differ between processes: {', '.join(sorted(differing))}",
        evidence,
        "Set NCCL_* variables identically on every node (different NCCL_ALGO/PROTO/IB_* values\n"
        "make ranks choose differently and hang). Check ~/.nccl.conf and /etc/nccl.conf too.",
    )


@check("logs.nccl-error", area="logs", category="other", scope="logs")
def nccl_error(reading: LogReading) -> Iterator[Problem]:
    """NCCL returned an error code; a detail when a known signature already names the cause."""
    explained = _explained(reading)
    for p in reading.logs.processes.values():
        if not p.error_code:
            continue
        name, category = RESULTS.get(p.error_code, (f"error {p.error_code}", "other"))
        yield Problem(
            Severity.INFO if p.key in explained else Severity.FAIL,
            f"NCCL returned {name} ({p.error_code}) in {p.key}",
            [w.text.strip() for w in p.warns[-3:]] + p.backtrace[-4:],
            "The WARN lines before the error chain name the cause; the '-> N' lines are the\n"
            "call path (read bottom-up).",
            node=p.host,
            rank=p.rank,
            category=category,
        )


@check("logs.connect-retries", area="logs", category="connect_refused_or_timeout", scope="logs")
def connect_retries(reading: LogReading) -> Iterator[Problem]:
    """A process retried its connections to peers."""
    for p in reading.logs.processes.values():
        retries = sum(p.connect_retries.values())
        if not retries:
            continue
        peers = ", ".join(f"{k} ({n}×)" for k, n in sorted(p.connect_retries.items())[:5])
        yield Problem(
            Severity.WARN,
            f"{p.key} retried connections {retries} times",
            [f"peers: {peers}", f"last line: {p.last_line}"],
            "The peer was not listening yet or could not be reached: check that it started, that\n"
            "its address is routable from here and that no firewall drops the port.",
            node=p.host,
            rank=p.rank,
        )
