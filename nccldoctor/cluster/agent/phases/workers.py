"""Workers: launch this node's ranks (launcher) and watch them to the end (watchdog)."""

from __future__ import annotations

from typing import Any

from nccldoctor.cluster.agent import launcher, watchdog
from nccldoctor.cluster.agent.state import AgentState
from nccldoctor.cluster.diagnosis import results


def run(state: AgentState, row: dict[str, Any]) -> None:
    c, run, world = state.config, state.run, state.run.world
    assert world is not None and run.node_rank is not None
    me = next(n for n in world.nodes if n.node_rank == run.node_rank)
    spec = launcher.WorkerSpec(
        run_id=run.run_id,
        backend=world.backend,
        master=c.master,
        port=c.port,
        node_rank=me.node_rank,
        rank_offset=me.rank_offset,
        local_world=me.procs,
        world_size=world.world_size,
        interface=run.observed.reach.interface if run.observed.reach else None,
        timeouts=c.timeouts,
        mnist_root=c.mnist_root,
        out=state.node_dir,
    )
    run.workers_started = True
    state.launched = launcher.launch(spec, state.env, fork=_can_fork(state))
    watch = watchdog.watch_ranks(
        state.launched, run.node, c.timeouts, world.backend, on_change=state.progress
    )
    run.ranks, run.rank_phases, run.worker_results = results.worker_sections(watch)
    bad = [r for r in run.ranks if not r.ok]
    if watch.stuck_reason:
        row["status"], row["detail"] = "timeout", watch.stuck_reason
    elif bad:
        row["status"] = "fail"
        row["detail"] = ", ".join(f"rank {r.rank} {r.state}" for r in bad)


def _can_fork(state: AgentState) -> bool:
    """Whether the workers can be forked from here: the background import of torch is done
    (long before this, normally) and a child could still use CUDA (launcher.forkable)."""
    if state.torch is None:
        return False
    try:
        state.torch.result(timeout=state.config.timeouts.startup)
    except Exception:  # torch broken or stuck here: each worker starts on its own and says why
        return False
    return launcher.forkable()
