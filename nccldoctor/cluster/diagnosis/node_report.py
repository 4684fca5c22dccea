"""The node report: what one node observed during `nccldoctor check` (node_run.py), judged."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from checks import all_checks, run_checks, run_node_checks
from checks.linkrates import link_budget
from nccldoctor.cluster.config import CheckConfig
from nccldoctor.cluster.diagnosis import causes, merge, results, verdict
from nccldoctor.cluster.diagnosis.node_run import NodeRun
from nccldoctor.facts.ranks import RankOutcome
from nccldoctor.model import AreaState, Finding, Severity
from nccldoctor.report import Report

# Node checks that read what the run measures into the facts (libnccl's bootstrap interface, the
# address the master saw): preflight's predictions are replaced by their judgement of the
# measurement, run once when the report is built (with the GPU rules, once the backend is known).
RUN_MEASURED = (
    "master.nat-bridge",
    "socket.default-pick-differs",
    "socket.ifname-not-routed",
    "socket.pick-virtual",
)


RUN_STOPPED = "run.incomplete"
# gather.py names the lost master in run.lost; run.master-lost is its finding
MASTER_LOST = {"check": "run.master-lost", "category": "remote_peer_closed"}


def build_node_report(
    run: NodeRun, config: CheckConfig, command: Sequence[str], elapsed_s: float
) -> Report:
    """This node's report (kind "check"): the preflight document plus the run's sections."""
    rejudged: tuple[str, ...] = ()
    facts = run.facts
    if facts and run.preflight:
        # the GPU rules judge for the backend the run uses: a run on gloo needs no GPU
        backend = run.world.backend if run.world else ("nccl" if run.preflight.cuda else "gloo")
        facts = dataclasses.replace(facts, backend=backend, backend_asked=config.backend != "auto")
        gpu_rules = tuple(c.id for c in all_checks("node") if c.area == "gpu")
        rejudged = RUN_MEASURED + gpu_rules
    nodes = [facts] if facts else []
    findings = [f for f in run.findings if f.id not in rejudged] + (
        run_node_checks(facts, only=rejudged) if facts else []
    )
    by_rank = run.workers.results if run.workers else {}
    findings += verdict.worker_findings(run.ranks, by_rank, run.lost)
    nccl, nccl_findings = nccl_section(run.ranks)
    findings += nccl_findings
    flight_recorder, fr_findings = flight_recorder_section(run.ranks)
    findings += fr_findings
    run.observed.network = facts.network if facts else None
    run.observed.aborted = run.aborted
    findings += run_checks("run", run.observed, node=run.node)
    # run.incomplete is the fallback: it stands only where no other finding says why it stopped
    if any(f.severity is Severity.FAIL and f.id != RUN_STOPPED for f in findings):
        findings = [f for f in findings if f.id != RUN_STOPPED]
    # This node's own probe is enough to explain its hang; the MTU needs every node's facts.
    observed = run.observed
    port_probe = dataclasses.asdict(observed.port_probe) if observed.port_probe else None
    cause = causes.judge(nodes, run.ranks, {run.node: observed.port_probe})
    world = run.world
    status = dict(run.preflight.area_status) if run.preflight else {}
    status["run"] = _run_status(run)
    state = dict(run.preflight.area_state) if run.preflight else {}
    if run.aborted:
        state["run"] = AreaState.STOPPED
    elif not run.ranks:
        state["run"] = AreaState.NOT_MEASURED
    bandwidth = results.bandwidth_section(
        by_rank, world.backend if world else "", world.world_size if world else 0
    )
    if run.tcp is not None:
        bandwidth["tcp_wire_Gbitps"][run.node] = round(run.tcp.gbps, 3)
    network = (nccl or {}).get("network")
    findings += run_checks("bandwidth", link_budget(nodes, bandwidth, network))
    return Report(
        kind="check",
        nodes=nodes,
        findings=findings,
        command=list(command),
        completed=run.workers is not None and not run.aborted,
        area_status=status,
        area_state=state,
        extra={
            "phases": [
                row.to_dict() for row in (*run.phases, *(run.workers.phases if run.workers else ()))
            ],
            "bandwidth": bandwidth,
            "ranks": [r.to_dict() for r in run.ranks],
            "hang": verdict.hang_section(
                run.ranks, run.lost, *causes.verdict_args(cause), lost_of=MASTER_LOST
            ),
            "mnist": results.mnist_section(by_rank),
            "nccl": nccl,
            "flight_recorder": flight_recorder,
            "cluster": merge.cluster_section(config.master, world, {}),
            "timeouts": config.timeouts.to_dict(),
            "run": {
                "run_id": run.run_id,
                "node": run.node,
                "node_rank": run.node_rank,
                "master": run.is_master,
                "launcher": config.launcher,
                "aborted": run.aborted,
                "reach": dataclasses.asdict(observed.reach) if observed.reach else None,
                "hello": dataclasses.asdict(observed.hello) if observed.hello else None,
                "bootstrap": dataclasses.asdict(observed.bootstrap) if observed.bootstrap else None,
                "port_probe": port_probe,
                "elapsed_s": round(elapsed_s, 3),
            },
        },
    )


def nccl_section(ranks: Sequence[RankOutcome]) -> tuple[dict[str, Any] | None, list[Finding]]:
    """The NCCL log summary of this node's ranks (``NCCL_DEBUG_FILE``), when NCCL wrote any."""
    from pathlib import Path

    from nccldoctor.explain import explain
    from nccldoctor.ncclog.inputs import file_sources

    files = [p for r in ranks for p in sorted(Path(r.log_path).parent.glob("nccl.*.log"))]
    sources = file_sources(files)
    if not sources:
        return None, []
    summary, findings = explain(sources, jobs=1)
    return summary, findings


def flight_recorder_section(
    ranks: Sequence[RankOutcome],
) -> tuple[dict[str, Any] | None, list[Finding]]:
    """The Flight Recorder dumps the monitor collected from stuck ranks, matched across them."""
    from pathlib import Path

    from nccldoctor.explain import explain_dumps

    return explain_dumps([(Path(r.flight_recorder), r.rank) for r in ranks if r.flight_recorder])


def bootstrap_interface(lines: Sequence[str]) -> tuple[str, str] | None:
    """(interface, address) of NCCL's "Bootstrap: Using" line, read by the ncclog parser."""
    from nccldoctor.ncclog.parser import SourceParser

    parser = SourceParser("libnccl bootstrap probe")
    data = ("\n".join(lines) + "\n").encode()
    parser.feed(data, 0, len(data))
    parser.finish()
    for process in parser.result.processes.values():
        if process.bootstrap:
            return process.bootstrap["ifname"], process.bootstrap["address"]
    return None


def _run_status(run: NodeRun) -> str:
    if run.aborted:
        return f"stopped: {run.aborted}"
    if not run.ranks:
        return "no workers ran"
    ok = sum(r.ok for r in run.ranks)
    return f"{ok}/{len(run.ranks)} local ranks ok"
