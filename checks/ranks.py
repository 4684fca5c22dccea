"""Checks over how the ranks of a `check` run ended (``scope="ranks"``).

The subject is a :class:`~nccldoctor.facts.ranks.RanksSeen`: the ranks that stopped, in the order
of causes (``forensics/behind.py``). The rank that stopped first is the cause: it fails; every
other rank that stopped is a consequence and warns ("rank 0 waited in barrier"), unless lost
nodes explain every rank's end, when all of them are consequences. Where a cause seen before
the workers puts nodes at fault (their ephemeral ports dropped), a rank there is the cause and a
rank stuck elsewhere waited on them ("rank 7 waited in init_process_group on node node3"): it
only waited, and is not called stuck itself. Wrong sums and diverging DDP replicas fail on their own.

The sentences here are also the hang verdict's (``cluster/diagnosis/verdict.py``): one wording.
"""

from __future__ import annotations

from collections.abc import Sequence

from checks import Problem, check
from checks.signatures import category_of
from nccldoctor.facts.ranks import OutcomeState, RankOutcome, RanksSeen
from nccldoctor.facts.serde import to_dict
from nccldoctor.forensics.behind import stopped_at
from nccldoctor.forensics.stacks import without_cpp_frames
from nccldoctor.model import Severity

PHASE_LABELS = {"init": "init_process_group", "startup": "its start (Python, torch import)"}


def phase_label(phase: str | None) -> str:
    return PHASE_LABELS.get(phase or "startup", phase or "startup")


def first_line(text: str | None, phase: str | None = None, limit: int = 200) -> str:
    """The error's last non-empty line (torch's C++ frames cut: the line torch meant for a
    person), without a leading ``<phase>: ``, at most ``limit`` chars."""
    lines = [line.strip() for line in without_cpp_frames(text or "").splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    if phase and line.startswith(f"{phase}: "):
        line = line[len(phase) + 2 :]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def lost_is_cause(ordered: Sequence[RankOutcome], lost: Sequence[str]) -> bool:
    """A lost node is the cause when every rank that ended badly only lost its peer."""
    return bool(lost) and all(
        r.state is not OutcomeState.STUCK and category_of(r.error) == "remote_peer_closed"
        for r in ordered
    )


# What a rank that stopped did, by its state (a state from a newer version: it "ended")
_VERBS = {OutcomeState.CRASHED: "crashed", OutcomeState.UNKNOWN: "ended"}
_UNKNOWN_STATE = "state: one this nccldoctor does not know (the report's own ranks entry names it)"


def sentence(r: RankOutcome, cause: bool, detail: bool = True, at_fault: Sequence[str] = ()) -> str:
    """What rank ``r`` did; ``detail``: with its error or last NCCL line; ``at_fault``: the
    nodes a cause seen before the workers names, which a stuck rank elsewhere waited on."""
    who = f"rank {r.rank} on node {r.node}"
    phase = phase_label(r.phase_reached)
    if waited_on(r, cause, at_fault):
        named = f"node {at_fault[0]}" if len(at_fault) == 1 else f"nodes {', '.join(at_fault)}"
        return f"rank {r.rank} waited in {phase} on {named}"
    if r.state is OutcomeState.STUCK:
        line = r.last_nccl_line if detail else None
        text = f"{who} never finished {phase}"
        return text + (f"; its last NCCL line was {line!r}" if line else "")
    error = first_line(r.error, r.phase_reached)
    category = category_of(r.error)
    error = error if detail else ""
    if not cause and category == "collective_timeout_hang":
        return f"rank {r.rank} waited in {phase}" + (f" ({error})" if error else "")
    if not cause and category == "remote_peer_closed":
        return f"rank {r.rank} lost its peer in {phase}" + (f" ({error})" if error else "")
    verb = _VERBS.get(r.state, "failed")
    return f"{who} {verb} in {phase}" + (f": {error}" if error else "")


def waited_on(r: RankOutcome, cause: bool, at_fault: Sequence[str]) -> bool:
    """A stuck rank, not the cause, on a node the cause does not name: it waited on them."""
    return bool(at_fault) and not cause and r.state is OutcomeState.STUCK and r.node not in at_fault


def _stopped(seen: RanksSeen, stuck: bool) -> list[Problem]:
    """The stopped ranks (stuck ones, or the others), the cause failing, the rest warning."""
    first = None if lost_is_cause(seen.stopped, seen.lost) else 0  # the cause among the ranks
    problems = []
    for i, r in enumerate(seen.stopped):
        if (r.state is OutcomeState.STUCK) != stuck:
            continue
        category = "collective_timeout_hang" if stuck else category_of(r.error)
        evidence = [f"phase: {r.phase_reached}", f"exit code: {r.exit_code}"]
        evidence += [_UNKNOWN_STATE] if r.state is OutcomeState.UNKNOWN else []
        evidence += [f"error: {first_line(r.error)}"] if r.error else []
        evidence += [f"stuck: {r.stuck}"] if r.stuck else []  # the watchdog's or its own deadline's
        frame = stopped_at(r.stacks)
        evidence += [f"main thread stopped at: {frame.describe()}"] if frame else []
        evidence += [f"last NCCL line: {line}" for line in r.last_nccl_lines[-2:]]
        evidence.append(f"log: {r.log_path}")
        waited = waited_on(r, i == first, seen.at_fault)
        problems.append(
            Problem(
                Severity.FAIL if i == first else Severity.WARN,
                sentence(r, i == first, at_fault=seen.at_fault),
                evidence,
                _FIXES["waited"] if waited else _FIXES.get(category, _FIXES["other"]),
                node=r.node,
                rank=r.rank,
                category=category,
            )
        )
    return problems


@check("run.rank-stuck", area="run", category="collective_timeout_hang", scope="ranks")
def rank_stuck(seen: RanksSeen) -> list[Problem]:
    """A rank never finished a phase: the watchdog (or its own deadline) had to stop it."""
    return _stopped(seen, stuck=True)


@check("run.rank-failed", area="run", category="other", scope="ranks")
def rank_failed(seen: RanksSeen) -> list[Problem]:
    """A rank ended with an error or died; the first to stop is the cause."""
    return _stopped(seen, stuck=False)


@check("run.allreduce-wrong", area="run", category="other", scope="ranks")
def allreduce_wrong(seen: RanksSeen) -> list[Problem]:
    """An allreduce returned wrong sums."""
    problems = []
    for rank, result in sorted(seen.results.items()):
        wrong = [c for c in result.correctness if not c.ok]
        if wrong:
            problems.append(
                Problem(
                    Severity.FAIL,
                    f"allreduce returned wrong values on rank {rank}",
                    [f"{c.dtype} × {c.count}: {c.wrong} wrong" for c in wrong],
                    "Wrong sums with a healthy network point at memory or GPU faults: run "
                    "nvidia-smi -q -d ECC and NCCL's nccl-tests all_reduce_perf -c 1 on this node.",
                    node=result.node,
                    rank=rank,
                )
            )
    return problems


@check("run.ddp-replicas-differ", area="run", category="other", scope="ranks")
def ddp_replicas_differ(seen: RanksSeen) -> Problem | None:
    """The DDP replicas are not bit-identical after the training steps."""
    result = seen.results.get(0)
    if result is None or result.params_identical is not False:
        return None
    return Problem(
        Severity.FAIL,
        "DDP replicas are not bit-identical after the training steps",
        [f"checksums: {to_dict(result.checksums)}"],
        "Replicas diverge when gradients are reduced wrongly or a rank skips a step; check the "
        "allreduce correctness findings first.",
        node=result.node,
        rank=0,
    )


_FIXES = {
    "collective_timeout_hang": (
        "Look at the stuck rank's stacks and last NCCL lines in the report. A rank that never\n"
        "enters the collective is a program bug; one that waits on the network points at a\n"
        "blocked port or a wrong interface (see the network findings)."
    ),
    "remote_peer_closed": "A peer died first: read the first failing rank's error above.",
    "waited": (
        "Nothing to fix on this node: it waited on the node at fault; the finding that names\n"
        "that node (its ephemeral ports, its interface) says what to fix there."
    ),
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
