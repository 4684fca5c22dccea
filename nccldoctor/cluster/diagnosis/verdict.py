"""What the workers' ends mean: the hang section and its one-sentence verdict; the findings are
the ``ranks`` rules' (``checks/ranks.py``), whose sentences the verdict shares.

The rank that stopped first is the cause; the others stopped because of it. A stuck rank (the
watchdog had to stop it) comes first, then the earliest failure by its event time; every other
rank is reported as a consequence ("rank 0 waited in barrier").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from checks import run_checks
from checks.ranks import lost_is_cause, sentence
from nccldoctor.cluster.records import WORKER_PHASES
from nccldoctor.facts.ranks import OutcomeState, RankOutcome, RankResult, RanksSeen
from nccldoctor.forensics.behind import culprits
from nccldoctor.model import Finding

# The verdict names the cause and at most this many groups of other ranks.
VERDICT_GROUPS = 4


def hang_section(
    ranks: Sequence[RankOutcome],
    lost: Sequence[str] = (),
    cause: str | None = None,
    cause_of: dict[str, str] | None = None,
    lost_of: dict[str, str] | None = None,
    at_fault: Sequence[str] = (),
) -> dict[str, Any] | None:
    """The report's ``hang`` section (docs/report.md): null when every rank ended well and no node was lost.
    ``cause`` (see ``causes``), when the network explains the stop, leads the verdict;
    ``cause_of`` ({"check", "category"}) names the finding it rests on, ``lost_of`` the one
    behind the ``lost`` sentences, when a lost node explains every rank's end; ``at_fault``:
    the nodes the cause names (a rank there first, one stuck elsewhere waited on them)."""
    ordered = culprits(ranks, WORKER_PHASES, at_fault)
    if not ordered and not lost:
        return None
    rests_on = cause_of if cause else None
    if lost_is_cause(ordered, lost):
        sentences = [*lost, *_consequences(ordered, at_fault)]
        if not cause and lost_of:  # a dead node explains its peers' errors
            sentences[0] = f"{sentences[0]} ({lost_of['check']})"
            rests_on = lost_of
    else:
        sentences = [sentence(r, True) for r in ordered[:1]]
        sentences += _consequences(ordered[1:], at_fault) + list(lost)
    if cause:
        sentences[0] = f"{cause}: {sentences[0]}"
    return {
        "phase": ordered[0].phase_reached if ordered else None,
        "stuck": [
            {
                "node": r.node,
                "rank": r.rank,
                "phase": r.phase_reached,
                "last_nccl_line": r.last_nccl_line,
            }
            for r in ordered
            if r.state is OutcomeState.STUCK
        ],
        "verdict": "; ".join(sentences) + ".",
        **({"cause": rests_on} if rests_on else {}),
    }


def _consequences(ranks: Sequence[RankOutcome], at_fault: Sequence[str] = ()) -> list[str]:
    """The other ranks' sentences, ranks that did the same together ("ranks 0-9, 12 waited in
    barrier"; the error only when the group shares it: gloo's name each rank's peer address), at
    most ``VERDICT_GROUPS`` of them: at any scale the verdict stays a line; the findings still
    list every rank with its own error."""
    groups: dict[str, list[RankOutcome]] = {}
    for r in ranks:
        groups.setdefault(_predicate(r, False, at_fault), []).append(r)
    sentences = []
    for predicate, members in groups.items():
        detailed = {_predicate(r, True, at_fault) for r in members}
        text = detailed.pop() if len(detailed) == 1 else predicate
        text = text.replace(" its ", " their ", 1) if members[1:] else text
        sentences.append(rank_label([r.rank for r in members]) + text)
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


def _predicate(r: RankOutcome, detail: bool, at_fault: Sequence[str]) -> str:
    """A consequence's sentence without its leading "rank N"."""
    return sentence(r, False, detail, at_fault).removeprefix(f"rank {r.rank}")


def rank_findings(
    ranks: Sequence[RankOutcome], lost: Sequence[str] = (), at_fault: Sequence[str] = ()
) -> list[Finding]:
    """The ``ranks`` rules over the ranks' outcomes alone (a merge judges them anew)."""
    return worker_findings(ranks, {}, lost, at_fault)


def worker_findings(
    ranks: Sequence[RankOutcome],
    results: Mapping[int, RankResult],
    lost: Sequence[str] = (),
    at_fault: Sequence[str] = (),
) -> list[Finding]:
    """Every ``ranks`` rule over one run's ranks and their results (wrong sums, replicas), the
    stopped ranks in cause order (the cause first, as the verdict names them): the rules run
    in id order (run.rank-failed before run.rank-stuck), each over the ranks ordered once."""
    stopped = culprits(ranks, WORKER_PHASES, at_fault)
    order = {r.rank: i for i, r in enumerate(stopped)}
    findings = run_checks("ranks", RanksSeen(stopped, results, lost, at_fault))
    return sorted(findings, key=lambda f: order.get(f.rank, len(order)) if f.id in STOPPED else -1)


# The rules that judge a stopped rank; a merge drops the nodes' own and judges all ranks anew.
STOPPED = ("run.rank-stuck", "run.rank-failed")
