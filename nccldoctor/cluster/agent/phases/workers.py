"""Workers: launch this node's ranks (launcher) and watch them to the end (watchdog). With several
processes per node, local rank 0 forks its own rank's worker and hands the world to the others,
which run theirs (agent/local.py); the watchdog watches them all alike."""

from __future__ import annotations

import time

from nccldoctor.cluster.agent import launcher, local, outcomes, watchdog
from nccldoctor.cluster.agent.state import AgentState, PhaseEnd, PhaseFailed
from nccldoctor.cluster.agent.worldend import WorldEnd
from nccldoctor.cluster.records import PhaseStatus


def run(state: AgentState) -> PhaseEnd:
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
        node=run.node,
        out=state.node_dir,
    )
    if c.local is None:
        state.launched = launcher.launch(spec, state.env, fork=_can_fork(state))
    else:
        state.launched = _per_process(state, spec)
    ended = WorldEnd.connect(c.master, c.port, state.keys.prefix) if state.keys else None
    watch = watchdog.watch_ranks(
        state.launched, run.node, c.timeouts, world.backend, on_change=state.progress, world=ended
    )
    seen = outcomes.workers_seen(watch)
    bad = [r for r in seen.ranks if not r.ok]
    if watch.stuck_reason:
        return PhaseEnd(watch.stuck_reason, PhaseStatus.TIMEOUT, seen)
    if bad:
        return PhaseEnd(", ".join(f"rank {r.rank} {r.state}" for r in bad), PhaseStatus.FAIL, seen)
    return PhaseEnd(result=seen)


def _per_process(state: AgentState, spec: launcher.WorkerSpec) -> list[launcher.Launched]:
    """Local rank 0 of several: its own rank forked, the others handed the spec. The ranks are
    the launcher's (RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK), as a training job's would be."""
    me, leader, t = state.config.local, state.leader, state.config.timeouts
    assert me is not None and leader is not None
    if spec.world_size != me.world_size:
        raise PhaseFailed(
            f"workers: the nodes that came make a world of {spec.world_size} ranks, the launcher "
            f"started {me.world_size} processes; every node must run the same number"
        )
    followers = leader.wait_joined(time.monotonic() + t.startup)
    missing = leader.missing()
    if missing:
        refused = f" (refused: {'; '.join(leader.refused)})" if leader.refused else ""
        raise PhaseFailed(
            f"workers: local rank(s) {', '.join(map(str, missing))} of this node never reached "
            f"local rank 0 within {t.startup:.0f} s{refused}"
        )
    launched = []
    for follower in followers:  # first: they set up while this process finishes its imports
        directory = launcher.prepare(spec, follower.rank)
        log_path = directory / "worker.log"
        proc = local.FollowerProcess(follower, log_path)
        follower.lines.send(local.HandOver(spec.to_dict()))
        launched.append(
            launcher.Launched(follower.rank, follower.local_rank, directory, proc, log_path)
        )
    own = launcher.launch_one(spec, me.rank, 0, state.env, fork=_can_fork(state))
    return [own, *launched]


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
