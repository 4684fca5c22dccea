"""What the workers' ends mean: the hang section, its one-sentence verdict, and the findings.

The rank that stopped first is the cause; the others stopped because of it. A stuck rank (the
watchdog had to stop it) comes first, then the earliest failure by its event time; every other
rank is reported as a consequence ("rank 0 waited in barrier").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nccldoctor.cluster.records import WORKER_PHASES
from nccldoctor.forensics.behind import categorize, culprits, stopped_at
from nccldoctor.forensics.stacks import without_cpp_frames
from nccldoctor.model import Finding, Severity

# The verdict names the cause and at most this many groups of other ranks.
VERDICT_GROUPS = 4
PHASE_LABELS = {"init": "init_process_group", "startup": "its start (Python, torch import)"}


def _label(phase: str | None) -> str:
    return PHASE_LABELS.get(phase or "startup", phase or "startup")


def _first_line(text: str | None, phase: str | None = None, limit: int = 200) -> str:
    """The error's last non-empty line (torch's C++ frames cut: the line torch meant for a
    person), without a leading ``<phase>: ``, at most ``limit`` chars."""
    lines = [line.strip() for line in without_cpp_frames(text or "").splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    if phase and line.startswith(f"{phase}: "):
        line = line[len(phase) + 2 :]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def hang_section(
    ranks: list[dict[str, Any]],
    lost: Sequence[str] = (),
    cause: str | None = None,
    cause_of: dict[str, str] | None = None,
    lost_of: dict[str, str] | None = None,
) -> dict[str, Any] | None:
    """The report's ``hang`` section (docs/report.md): null when every rank ended well and no node was lost.
    ``cause`` (see ``causes``), when the network explains the stop, leads the verdict;
    ``cause_of`` ({"check", "category"}) names the finding it rests on, ``lost_of`` the one
    behind the ``lost`` sentences, when a lost node explains every rank's end."""
    ordered = culprits(ranks, WORKER_PHASES)
    if not ordered and not lost:
        return None
    rests_on = cause_of if cause else None
    if _lost_is_cause(ordered, lost):
        sentences = [*lost, *_consequences(ordered)]
        if not cause and lost_of:  # a dead node explains its peers' errors
            sentences[0] = f"{sentences[0]} ({lost_of['check']})"
            rests_on = lost_of
    else:
        sentences = [_sentence(r, True) for r in ordered[:1]]
        sentences += _consequences(ordered[1:]) + list(lost)
    if cause:
        sentences[0] = f"{cause}: {sentences[0]}"
    return {
        "phase": ordered[0]["phase_reached"] if ordered else None,
        "stuck": [
            {
                "node": r["node"],
                "rank": r["rank"],
                "phase": r["phase_reached"],
                "last_nccl_line": (r["last_nccl_lines"] or [None])[-1],
            }
            for r in ordered
            if r["state"] == "stuck"
        ],
        "verdict": "; ".join(sentences) + ".",
        **({"cause": rests_on} if rests_on else {}),
    }


def _lost_is_cause(ordered: list[dict[str, Any]], lost: Sequence[str]) -> bool:
    """A lost node is the cause when every rank that ended badly only lost its peer."""
    return bool(lost) and all(
        r["state"] != "stuck"
        and categorize(_first_line(r["error"], r["phase_reached"])) == "remote_peer_closed"
        for r in ordered
    )


def _consequences(ranks: list[dict[str, Any]]) -> list[str]:
    """The other ranks' sentences, ranks that did the same together ("ranks 0-9, 12 waited in
    barrier"; the error only when the group shares it: gloo's name each rank's peer address), at
    most ``VERDICT_GROUPS`` of them: at any scale the verdict stays a line; the findings still
    list every rank with its own error."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in ranks:
        groups.setdefault(_predicate(r, detail=False), []).append(r)
    sentences = []
    for predicate, members in groups.items():
        detailed = {_predicate(r, detail=True) for r in members}
        text = detailed.pop() if len(detailed) == 1 else predicate
        text = text.replace(" its ", " their ", 1) if members[1:] else text
        sentences.append(rank_label([r["rank"] for r in members]) + text)
    if len(sentences) <= VERDICT_GROUPS:
        return sentences
    rest = sum(len(members) for members in list(groups.values())[VERDICT_GROUPS - 1 :])
    return [*sentences[: VERDICT_GROUPS - 1], f"{rest} more ranks stopped (see the findings)"]


def rank_label(ranks: Sequence[int]) -> str:
    """ "rank 3", or "ranks 0-10, 12, 13" (sorted; three or more consecutive ranks as a range)."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    spans: list[list[int]] = []
    for rank in sorted(ranks):
        if spans and rank == spans[-1][1] + 1:
            spans[-1][1] = rank
        else:
            spans.append([rank, rank])
    return "ranks " + ", ".join(
        f"{a}-{b}" if b > a + 1 else ", ".join(map(str, range(a, b + 1))) for a, b in spans
    )


def _predicate(r: dict[str, Any], detail: bool) -> str:
    """A consequence's sentence without its leading "rank N"."""
    return _sentence(r, False, detail).removeprefix(f"rank {r['rank']}")


def _sentence(r: dict[str, Any], cause: bool, detail: bool = True) -> str:
    """What rank ``r`` did; ``detail``: with its error or last NCCL line."""
    who = f"rank {r['rank']} on node {r['node']}"
    phase = _label(r["phase_reached"])
    if r["state"] == "stuck":
        line = (r["last_nccl_lines"] or [None])[-1] if detail else None
        text = f"{who} never finished {phase}"
        return text + (f"; its last NCCL line was {line!r}" if line else "")
    error = _first_line(r["error"], r["phase_reached"])
    category = categorize(error)
    error = error if detail else ""
    if not cause and category == "collective_timeout_hang":
        return f"rank {r['rank']} waited in {phase}" + (f" ({error})" if error else "")
    if not cause and category == "remote_peer_closed":
        return f"rank {r['rank']} lost its peer in {phase}" + (f" ({error})" if error else "")
    verb = "crashed" if r["state"] == "crashed" else "failed"
    return f"{who} {verb} in {phase}" + (f": {error}" if error else "")


def worker_findings(
    ranks: list[dict[str, Any]], results: dict[int, dict], lost: Sequence[str] = ()
) -> list[Finding]:
    """The cause as a failing finding, the consequences as warnings, wrong results as failures;
    with ``lost`` nodes (sentences) that explain every rank's end, all ranks are consequences."""
    return rank_findings(ranks, lost) + result_findings(results)


def rank_findings(ranks: list[dict[str, Any]], lost: Sequence[str] = ()) -> list[Finding]:
    findings = []
    ordered = culprits(ranks, WORKER_PHASES)
    first = 0 if not _lost_is_cause(ordered, lost) else None  # the cause among the ranks
    for i, r in enumerate(ordered):
        category = "collective_timeout_hang" if r["state"] == "stuck" else categorize(r["error"])
        evidence = [f"phase: {r['phase_reached']}", f"exit code: {r['exit_code']}"]
        evidence += [f"error: {_first_line(r['error'])}"] if r["error"] else []
        evidence += [f"watchdog: {r['stuck']}"] if r["stuck"] else []
        frame = stopped_at(r.get("stacks"))
        evidence += [f"main thread stopped at: {frame.describe()}"] if frame else []
        evidence += [f"last NCCL line: {line}" for line in r["last_nccl_lines"][-2:]]
        evidence.append(f"log: {r['log_path']}")
        findings.append(
            Finding(
                id="run.rank-stuck" if r["state"] == "stuck" else "run.rank-failed",
                category=category,
                severity=Severity.FAIL if i == first else Severity.WARN,
                title=_sentence(r, i == first),
                evidence=evidence,
                fix=_FIXES.get(category, _FIXES["other"]),
                area="run",
                node=r["node"],
                rank=r["rank"],
            )
        )
    return findings


def result_findings(results: dict[int, dict]) -> list[Finding]:
    findings = []
    for rank, result in sorted(results.items()):
        wrong = [c for c in result.get("correctness") or [] if not c.get("ok", True)]
        if wrong:
            findings.append(
                Finding(
                    id="run.allreduce-wrong",
                    category="other",
                    severity=Severity.FAIL,
                    title=f"allreduce returned wrong values on rank {rank}",
                    evidence=[
                        f"{c.get('dtype')} × {c.get('count')}: {c.get('wrong')} wrong"
                        for c in wrong
                    ],
                    fix="Wrong sums with a healthy network point at memory or GPU faults: run "
                    "nvidia-smi -q -d ECC and NCCL's nccl-tests all_reduce_perf -c 1 on this node.",
                    area="run",
                    node=result.get("node"),
                    rank=rank,
                )
            )
        if rank == 0 and result.get("params_identical") is False:
            findings.append(
                Finding(
                    id="run.ddp-replicas-differ",
                    category="other",
                    severity=Severity.FAIL,
                    title="DDP replicas are not bit-identical after the training steps",
                    evidence=[f"checksums: {result.get('checksums')}"],
                    fix="Replicas diverge when gradients are reduced wrongly or a rank skips a "
                    "step; check the allreduce correctness findings first.",
                    area="run",
                    node=result.get("node"),
                    rank=rank,
                )
            )
    return findings


_FIXES = {
    "collective_timeout_hang": (
        "Look at the stuck rank's stacks and last NCCL lines in the report. A rank that never\n"
        "enters the collective is a program bug; one that waits on the network points at a\n"
        "blocked port or a wrong interface (see the network findings)."
    ),
    "remote_peer_closed": "A peer died first: read the first failing rank's error above.",
    "interface_selection": (
        "Set NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME to the interface that routes to the\n"
        "master on every node (see the reach findings), e.g. export NCCL_SOCKET_IFNAME==eth0"
    ),
    "connect_refused_or_timeout": (
        "Allow TCP between the nodes on the interface in use (NCCL and gloo use ephemeral\n"
        "ports in both directions): check iptables -S / ufw status / the security group."
    ),
    "cuda_error": "Run nvidia-smi on this node and read the worker log named in the evidence.",
    "other": "Read the worker log named in the evidence.",
}
