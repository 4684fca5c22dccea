"""Rules over one communicator's ranks in the logs (scope ``logs``): who never finished init,
who is missing, who disagrees with the others, where the ranks went separate ways, who
stopped early or fell behind.
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from checks import Problem, check
from nccldoctor.debugenv import NCCL_DEBUG_SUBSYS
from nccldoctor.model import Severity
from nccldoctor.ncclog.summary import CommGroup, LogReading, Member

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

    return functools.wraps(judge)(rule)  # its page names and reads the judge (docs/findings/)


# A rank that stopped or diverged is why the others' watchdogs time out: their timeouts follow.
WATCHDOG_TIMEOUTS = ("torch.watchdog-timeout", "torch.watchdog-failure-seq", "torch.watchdog-stuck")


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
