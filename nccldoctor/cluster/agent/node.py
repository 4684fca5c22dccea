"""The node agent: runs the phases of `nccldoctor check` on one node and always writes a report.

Phases (docs/design.md#phases): preflight → reach → rendezvous → bootstrap → tcp → ports → workers → gather.
Each has a deadline from :class:`Timeouts` and is recorded in ``phases``. The master (node rank
0, or the node owning ``--master``) also hosts the store and the gate, and after the exit barrier
merges every node's report into the cluster report. torch is imported in the background as the
agent starts, the store's part first, and the workers are forked from the agent with it loaded
(launcher). Any way out — success, a failed phase, an error, SIGINT/SIGTERM — goes through one
``finally`` that ends the workers and writes the report(s).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from nccldoctor.cluster.agent import gather, launcher, listener, monitor, rendezvous, whoami
from nccldoctor.cluster.agent.reach import ReachResult, connect, locate
from nccldoctor.cluster.config import CheckConfig
from nccldoctor.cluster.diagnosis import results
from nccldoctor.cluster.diagnosis.node_report import (
    NodeRun,
    bootstrap_interface,
    build_node_report,
    record_nccl_pick,
)
from nccldoctor.facts import to_dict
from nccldoctor.meet import is_local
from nccldoctor.preflight import run_preflight
from nccldoctor.probes.libnccl import bootstrap_probe
from nccldoctor.report import Report, write_report

Progress = Callable[[str], None]


class Interrupted(Exception):
    """SIGINT or SIGTERM arrived; the run stops and the report is still written."""


class PhaseFailed(Exception):
    """A phase ended the run; its findings say why."""


class NodeAgent:
    def __init__(
        self,
        config: CheckConfig,
        env: Mapping[str, str],
        command: Sequence[str] = (),
        progress: Progress | None = None,
    ) -> None:
        self.config = config
        self.env = dict(env)
        self.command = list(command)
        self.progress = progress or (lambda message: None)
        self.run = NodeRun(config.node_name, port=config.port)
        self.store: Any = None
        self.keys: rendezvous.Keys | None = None
        self.gate: listener.MasterListener | None = None
        self.launched: list[launcher.Launched] = []
        self.entries: list[rendezvous.NodeEntry] = []
        self._background = concurrent.futures.ThreadPoolExecutor(2, "nccldoctor-agent")
        self._bootstrap_probe: tuple[str, concurrent.futures.Future] | None = None
        self._torch_loaded = threading.Event()
        self._stopping = False
        self.started = time.monotonic()

    # -- the template: phases in order, one finally -------------------------------------------
    def execute(self) -> tuple[Report, Path]:
        """Run every phase; the report to show (the cluster's on the master) and its path."""
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        # Seconds of CPU: torch's own libraries first (then preflight may load others), then
        # what the workers use, while the phases up to theirs run.
        self._torch = self._background.submit(_import_torch, self._torch_loaded)
        try:
            self._phases()
        except Interrupted as exc:
            self.run.aborted = f"interrupted by {exc}"
        except PhaseFailed as exc:
            self.run.aborted = str(exc)
        except Exception as exc:  # a bug must still leave a report behind
            self.run.observed.crash = f"{type(exc).__name__}: {exc}"
            self.run.aborted = f"internal error: {self.run.observed.crash}"
        self._stopping = True
        try:
            monitor.stop(self.launched)
            if self.launched and not self.run.ranks:  # interrupted while watching the workers
                watch = monitor.observe(self.launched, self.run.node, str(self.run.aborted))
                self.run.ranks, self.run.rank_phases, self.run.worker_results = (
                    results.worker_sections(watch)
                )
            return self._finish()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._background.shutdown(wait=False, cancel_futures=True)
            if self.gate:
                self.gate.close()

    def _on_signal(self, signum: int, frame: object) -> None:
        if self._stopping:
            return
        self._stopping = True
        raise Interrupted(signal.Signals(signum).name)

    def _phases(self) -> None:
        self._preflight()
        self._reach()
        self._rendezvous()
        self._bootstrap()
        self._tcp()
        self._ports()
        self._workers()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[dict[str, Any]]:
        row = {
            "node": self.run.node,
            "rank": None,
            "phase": name,
            "status": "running",
            "started": time.time(),
            "ended": None,
            "duration_s": None,
            "detail": "",
        }
        self.run.phases.append(row)
        if self.store is not None and self.run.node_rank is not None and self.keys:
            rendezvous.set_phase(self.store, self.keys, self.run.node_rank, name)
        self.progress(f"{name} ...")
        try:
            yield row
            row["status"] = "ok" if row["status"] == "running" else row["status"]
        except PhaseFailed as exc:
            row["status"], row["detail"] = "fail", str(exc)
            raise
        except rendezvous.RendezvousError as exc:
            row["status"], row["detail"] = "timeout", str(exc)
            raise PhaseFailed(f"{name}: {exc}") from exc
        except BaseException as exc:
            row["status"], row["detail"] = "fail", f"{type(exc).__name__}: {exc}"
            raise
        finally:
            row["ended"] = time.time()
            row["duration_s"] = round(row["ended"] - row["started"], 3)
            self.progress(f"{name} {row['status']} ({row['duration_s']:.1f} s) {row['detail']}")

    # -- phases --------------------------------------------------------------------------------
    def _preflight(self) -> None:
        with self.phase("preflight"):
            # Preflight loads libnccl and libcudart by path to ask their versions. The dynamic
            # loader hands a loaded soname to every later DT_NEEDED of that name, so loaded
            # before torch's own, torch (and every worker forked from here) would run them.
            self._torch_loaded.wait(self.config.timeouts.startup)
            pf = run_preflight(
                master=self.config.master,
                env=self.env,
                command=self.command,
                local_ranks=self.config.procs_per_node,
            )
            self.run.facts = pf.nodes[0]
            for finding in pf.findings:  # the node's name in this run, not its hostname
                finding.node = self.run.node if finding.node == pf.nodes[0].node else finding.node
            self.run.facts.node = self.run.node
            self.run.cuda = self._cuda()
            self.run.findings.extend(pf.findings)
            libraries = [
                lib.path for lib in self.run.facts.software.nccl_libraries if not lib.error
            ]
            if libraries:
                future = self._background.submit(
                    bootstrap_probe, libraries[0], self.env, self.config.timeouts.bootstrap
                )
                self._bootstrap_probe = (libraries[0], future)
            self.run.area_status.update(pf.area_status)

    def _reach(self) -> None:
        c, t, run = self.config, self.config.timeouts, self.run
        with self.phase("reach") as row:
            deadline = time.monotonic() + t.reach
            result = locate(run.facts.network)
            run.observed.reach = result
            if result.resolve_error:
                raise PhaseFailed(f"reach: {result.resolve_error}")
            address = result.addresses[0]
            run.is_master = c.node_rank == 0 or (c.node_rank is None and is_local(address))
            if c.node_rank is None and not run.is_master:
                self._find_master(address, deadline)
            row["detail"] = f"{result.interface} → {address}:{c.port}"
            if run.is_master:
                self._host()
                if c.node_rank == 0:
                    self._check_alone(result, address)
            else:  # hello first: the master learns of this node even when its store port is blocked
                self._hello(result, deadline)
            connect(result, c.port, max(deadline, time.monotonic() + 3))
            if not result.connected:
                if not run.is_master:
                    listener.send_note(address, c.gate_port, run.node, c.token, str(result.error))
                raise PhaseFailed(f"reach: {result.error}")
            if run.hello and not run.hello["ok"]:
                raise PhaseFailed(f"reach: {run.hello['error']}")

    def _hello(self, result: ReachResult, deadline: float) -> None:
        c, run = self.config, self.run
        address, advertised = result.addresses[0], result.source or ""
        reply = listener.say_hello(address, c.gate_port, run.node, advertised, c.token, deadline)
        run.hello = {
            "ok": reply.ok,
            "seen": reply.seen,
            "advertised": advertised,
            "skew_s": reply.skew_s,
            "rtt_s": reply.rtt_s,
            "error": reply.error,
            "probe_port": reply.probe_port,
        }
        # what the master saw: master.nat-bridge compares it with the route's source
        run.facts.network.seen_by_master = reply.seen or None
        run.observed.hello, run.observed.gate = reply, f"{address}:{c.gate_port}"
        if reply.refused:
            raise PhaseFailed(f"reach: {reply.error}")
        if reply.ok:
            run.run_id = reply.run_id

    def _find_master(self, address: str, deadline: float) -> None:
        """No node owns ``address`` (Docker NAT): the master is the node whose own listener
        answers there (whoami); a node that cannot tell stops and says how to tell it."""
        self.run.run_id = uuid.uuid4().hex[:12]
        self.gate, found = whoami.search(self.config, address, self.run.run_id, deadline)
        self.run.observed.master_search, self.run.is_master = found, self.gate is not None
        if found.undecided:
            raise PhaseFailed(f"reach: cannot tell whether this node is the master: no "
                              f"nccldoctor answered at {found.gate} ({found.error})")  # fmt: skip

    def _check_alone(self, result: ReachResult, address: str) -> None:
        """``--node-rank 0``: stop when ``--master`` leads to another node's listener, and tell
        that node why this one will not join."""
        found = whoami.check_alone(self.config, address, self.gate)
        self.run.observed.master_search = found
        if found.second_master:
            self._hello(result, time.monotonic() + 3)
            why = f"started as the master (--node-rank 0) too, but --master leads to {found.gate}"
            listener.send_note(address, self.config.gate_port, self.run.node, self.config.token,
                               why)  # fmt: skip
            raise PhaseFailed(f"reach: {why}, another node's nccldoctor")

    def _host(self) -> None:
        """The master's store and gate (kept from whoami's search), up before anyone knocks."""
        c = self.config
        self.run.run_id = self.run.run_id or uuid.uuid4().hex[:12]
        budget = c.timeouts.rendezvous + c.timeouts.workers_total() + c.timeouts.exit_barrier
        try:
            self.store = rendezvous.host_store(c.port, budget)
            self.gate = self.gate or listener.MasterListener(c.gate_port, c.token, self.run.run_id)
        except Exception as exc:
            self.run.observed.listen_error = str(exc)
            raise PhaseFailed(f"reach: {exc}") from exc

    def _rendezvous(self) -> None:
        c, t, run = self.config, self.config.timeouts, self.run
        with self.phase("rendezvous") as row:
            self.keys = rendezvous.Keys(run.run_id)
            deadline = time.monotonic() + t.rendezvous
            entry = rendezvous.NodeEntry(
                slot=0 if run.is_master else -1,
                name=run.node,
                advertised=(run.hello or {}).get("advertised") or c.master,
                seen=(run.hello or {}).get("seen") or c.master,
                procs=self._procs(),
                cuda=run.cuda,
                requested_rank=0 if run.is_master else c.node_rank,
                skew_s=(run.hello or {}).get("skew_s", 0.0),
                facts=to_dict(run.facts),
            )
            if not run.is_master:
                self.store = rendezvous.connect_store(
                    c.master, c.port, max(1.0, deadline - time.monotonic())
                )
            slot = rendezvous.publish_entry(self.store, self.keys, entry)
            if run.is_master:
                entries = rendezvous.gather_entries(
                    self.store, self.keys, c.nodes, deadline, t.settle
                )
                world = rendezvous.plan_world(run.run_id, c.backend, entries, c.nodes)
                self.store.set(self.keys.world, world.to_json())
                self.entries = entries
            else:
                world = rendezvous.wait_world(self.store, self.keys, t.rendezvous + t.settle + 5)
            run.world = world
            me = world.node(slot)
            run.node_rank = me.node_rank if me else None
            if me and me.name != run.node:  # another node has this one's name
                run.rename(me.name)
            row["detail"] = f"{len(world.nodes)} node(s), world size {world.world_size}"
            if world.abort:
                raise PhaseFailed(f"rendezvous: {world.abort}")
            if me is None:
                run.observed.late_for = [n.name for n in world.nodes]
                raise PhaseFailed("rendezvous: arrived too late")

    def _bootstrap(self) -> None:
        """NCCL's own interface choice (libnccl's ncclGetUniqueId, no GPU needed; started right
        after preflight, in the background), compared with the kernel's route to the master and
        the user's NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME."""
        run = self.run
        with self.phase("bootstrap") as row:
            if self._bootstrap_probe is None:
                row["status"], row["detail"] = "skipped", "no loadable libnccl"
                return
            library, future = self._bootstrap_probe
            probe = future.result(timeout=self.config.timeouts.bootstrap + 5)
            used = bootstrap_interface(probe.output_lines)
            run.bootstrap = {
                "library": library,
                "rc": probe.rc,
                "error": probe.error,
                "interface": used,
                "lines": probe.output_lines[-20:],
            }
            row["detail"] = f"NCCL picks {used[0]} ({used[1]})" if used else str(probe.error)
            if used and run.facts:  # the node checks judge libnccl's answer, not a prediction
                forced = run.facts.env.socket_ifname
                run.facts.network = record_nccl_pick(
                    run.facts.network, used, forced is not None and not forced.ignored
                )

    def _tcp(self) -> None:
        c, run = self.config, self.run
        with self.phase("tcp") as row:
            if run.is_master:
                row["status"], row["detail"] = "skipped", "the master receives"
                return
            # The nodes take turns at the master (they share its link); the turns together
            # stay within tcp_total, so that the first workers do not wait in init for the last.
            probers = len(run.world.nodes) - 1 if run.world else 1
            seconds = c.timeouts.tcp_turn(probers)
            deadline = time.monotonic() + probers * (seconds + 6)
            address = run.observed.reach.addresses[0]
            gbps, error = listener.measure_tcp(
                address, c.gate_port, run.node, c.token, seconds, deadline
            )
            run.tcp_gbps = gbps
            row["detail"] = f"{gbps:.2f} Gbit/s" if gbps is not None else error
            if gbps is None:
                row["status"] = "fail"

    def _ports(self) -> None:
        """Connections to ephemeral ports both ways, before gloo/NCCL need them (F02)."""
        c, run = self.config, self.run
        with self.phase("ports") as row:
            probe_port = (run.hello or {}).get("probe_port")
            if run.is_master or not probe_port:
                row["status"], row["detail"] = "skipped", "the master listens"
                return
            probe = listener.probe_ports(run.observed.reach.addresses[0], c.gate_port, probe_port,
                                         run.node, c.token, c.timeouts.port_probe)  # fmt: skip
            run.observed.port_probe = probe
            if probe.blocked:
                row["status"], row["detail"] = "fail", f"{probe.to_master} or back: dropped"
            else:
                row["detail"] = f"{probe.to_master} and back: ok"

    def _workers(self) -> None:
        c, run, world = self.config, self.run, self.run.world
        assert world is not None and run.node_rank is not None
        me = next(n for n in world.nodes if n.node_rank == run.node_rank)
        with self.phase("workers") as row:
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
                out=self.node_dir,
            )
            run.workers_started = True
            self.launched = launcher.launch(spec, self.env, fork=self._can_fork())
            watch = monitor.monitor(
                self.launched, run.node, c.timeouts, world.backend, on_change=self.progress
            )
            run.ranks, run.rank_phases, run.worker_results = results.worker_sections(watch)
            bad = [r for r in run.ranks if r["state"] != "ok"]
            if watch.stuck_reason:
                row["status"], row["detail"] = "timeout", watch.stuck_reason
            elif bad:
                row["status"] = "fail"
                row["detail"] = ", ".join(f"rank {r['rank']} {r['state']}" for r in bad)

    def _can_fork(self) -> bool:
        """Whether the workers can be forked from here: the background import of torch is done
        (long before this, normally) and a child could still use CUDA (launcher.forkable)."""
        try:
            self._torch.result(timeout=self.config.timeouts.startup)
        except Exception:  # torch broken or stuck here: each worker starts on its own and says why
            return False
        return launcher.forkable()

    # -- the end -------------------------------------------------------------------------------
    @property
    def node_dir(self) -> Path:
        return self.config.out / self.run.node

    def _procs(self) -> int:
        if self.config.procs_per_node:
            return self.config.procs_per_node
        gpu = self.run.facts.gpu if self.run.facts else None
        if gpu is None:
            return 1
        visible = gpu.visible_nvml_indices if gpu.visible_nvml_indices is not None else gpu.devices
        return max(1, len(visible))

    def _cuda(self) -> bool:
        if self.config.backend == "gloo":
            return False
        gpu = self.run.facts.gpu if self.run.facts else None
        return bool(gpu and gpu.devices and gpu.torch.cuda_build is not None)

    def _finish(self) -> tuple[Report, Path]:
        store = self.store if self.keys and self.run.node_rank is not None else None
        if (
            store is not None
            and not self.run.is_master
            and gather.master_lost(self.run, self.config, store)
        ):
            store = None  # a dead master's store would only make the publish wait
        report = build_node_report(
            self.run, self.config, self.command, time.monotonic() - self.started
        )
        path = write_report(report, self.config.out / f"check-{self.run.node}.json")
        self.progress(f"node report: {path}")
        if not self.run.is_master:
            if store is not None:
                gather.publish(store, self.keys, self.run.node_rank, report, path)
            return report, path
        interrupted = bool(self.run.aborted and self.run.aborted.startswith("interrupted"))
        cluster = gather.cluster_report(
            report, path, self.run, self.config, store, self.keys,
            0.0 if interrupted else self.config.timeouts.exit_barrier,
            self.gate, self.entries, self.command, self.progress,
        )  # fmt: skip
        cluster_path = write_report(cluster, self.config.out / "check-cluster.json")
        self.progress(f"cluster report: {cluster_path}")
        return cluster, cluster_path


def _import_torch(loaded: threading.Event) -> None:
    """torch.distributed first (the store and preflight wait for it), then what the workers use."""
    try:
        import torch.distributed  # noqa: F401
    finally:
        loaded.set()  # a broken torch is preflight's to report, not to wait for
    from nccldoctor.cluster.worker.rank import preload_torch

    preload_torch()


def run_check(
    config: CheckConfig,
    env: Mapping[str, str],
    command: Sequence[str] = (),
    progress: Progress | None = None,
) -> tuple[Report, Path]:
    """Run `nccldoctor check` on this node; the report to show and where it was written."""
    return NodeAgent(config, env, command, progress).execute()
