"""The node agent: runs the phases of `nccldoctor check` on one node and always writes a report.

Phases (DESIGN.md): preflight → reach → rendezvous → bootstrap → tcp → workers → gather. Each has
a deadline from :class:`Timeouts` and is recorded in ``phases``. The master (node rank 0, or the
node owning ``--master``) also hosts the store and the gate, and after the exit barrier merges
every node's report into the cluster report. Any way out — success, a failed phase, an error,
SIGINT/SIGTERM — goes through one ``finally`` that stops the workers and writes the report(s).
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nccldoctor.cluster import gate, launcher, merge, rendezvous, results, verdict, watchdog
from nccldoctor.cluster.config import CheckConfig
from nccldoctor.cluster.findings import hello_findings, interface_findings, reach_findings
from nccldoctor.cluster.reach import ReachResult, connect, is_local, local_interfaces, locate
from nccldoctor.facts import NodeFacts, to_dict
from nccldoctor.model import Finding, Severity
from nccldoctor.preflight import run_preflight
from nccldoctor.report import Report, write_report

Progress = Callable[[str], None]


class Interrupted(Exception):
    """SIGINT or SIGTERM arrived; the run stops and the report is still written."""


class PhaseFailed(Exception):
    """A phase ended the run; its findings say why."""


@dataclass
class NodeRun:
    """Everything this node observed, turned into its report at the end."""

    node: str
    facts: NodeFacts | None = None
    findings: list[Finding] = field(default_factory=list)
    area_status: dict[str, str] = field(default_factory=dict)
    phases: list[dict[str, Any]] = field(default_factory=list)
    is_master: bool = False
    run_id: str = ""
    reach: dict[str, Any] | None = None
    hello: dict[str, Any] | None = None
    world: rendezvous.World | None = None
    node_rank: int | None = None
    bootstrap: dict[str, Any] | None = None
    tcp_gbps: float | None = None
    ranks: list[dict[str, Any]] = field(default_factory=list)
    rank_phases: list[dict[str, Any]] = field(default_factory=list)
    worker_results: dict[int, dict] = field(default_factory=dict)
    workers_started: bool = False
    aborted: str | None = None


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
        self.run = NodeRun(config.node_name)
        self.store: Any = None
        self.keys: rendezvous.Keys | None = None
        self.gate: gate.GateServer | None = None
        self.launched: list[launcher.Launched] = []
        self.entries: list[rendezvous.NodeEntry] = []
        self._hello_found: list[Finding] = []
        self._stopping = False
        self.started = time.monotonic()

    # -- the template: phases in order, one finally -------------------------------------------
    def execute(self) -> tuple[Report, Path]:
        """Run every phase; the report to show (the cluster's on the master) and its path."""
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self._phases()
        except Interrupted as exc:
            self.run.aborted = f"interrupted by {exc}"
        except PhaseFailed as exc:
            self.run.aborted = str(exc)
        except Exception as exc:  # a bug must still leave a report behind
            self.run.aborted = f"internal error: {type(exc).__name__}: {exc}"
            self.run.findings.append(
                Finding(
                    "run.crashed",
                    "other",
                    Severity.FAIL,
                    f"nccldoctor itself failed: {type(exc).__name__}: {exc}",
                    [],
                    "This is a bug in nccldoctor; please report it with this report attached.",
                    area="run",
                    node=self.run.node,
                )
            )
        self._stopping = True
        try:
            watchdog.stop(self.launched)
            return self._finish()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
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

    def _fail(self, findings: list[Finding], message: str) -> None:
        self.run.findings.extend(findings)
        raise PhaseFailed(message)

    # -- phases --------------------------------------------------------------------------------
    def _preflight(self) -> None:
        with self.phase("preflight"):
            pf = run_preflight(master=self.config.master, env=self.env, command=self.command)
            self.run.facts = pf.nodes[0]
            self.run.facts.node = self.run.node
            self.run.findings.extend(pf.findings)
            self.run.area_status.update(pf.area_status)

    def _reach(self) -> None:
        c, t, run = self.config, self.config.timeouts, self.run
        with self.phase("reach") as row:
            deadline = time.monotonic() + t.reach
            result = locate(c.master)
            run.reach = asdict(result)
            if result.resolve_error:
                self._fail(
                    reach_findings(result, c.port, run.node), f"reach: {result.resolve_error}"
                )
            address = result.addresses[0]
            run.is_master = c.node_rank == 0 or (c.node_rank is None and is_local(address))
            row["detail"] = f"{result.interface} → {address}:{c.port}"
            if run.is_master:
                self._host()
            else:  # hello first: the master learns of this node even when its store port is blocked
                self._hello(result, deadline)
            connect(result, c.port, max(deadline, time.monotonic() + 3))
            run.reach = asdict(result)
            if not result.connected:
                if not run.is_master:
                    gate.send_note(address, c.gate_port, run.node, c.token, str(result.error))
                self._fail(reach_findings(result, c.port, run.node), f"reach: {result.error}")
            if run.hello and not run.hello["ok"]:
                self._fail(self._hello_found, f"reach: {run.hello['error']}")

    def _hello(self, result: ReachResult, deadline: float) -> None:
        c, run = self.config, self.run
        address, advertised = result.addresses[0], result.source or ""
        reply = gate.say_hello(address, c.gate_port, run.node, advertised, c.token, deadline)
        run.hello = {
            "ok": reply.ok,
            "seen": reply.seen,
            "advertised": advertised,
            "skew_s": reply.skew_s,
            "rtt_s": reply.rtt_s,
            "error": reply.error,
        }
        self._hello_found = hello_findings(reply, advertised, run.node, f"{address}:{c.gate_port}")
        if reply.refused:
            self._fail(self._hello_found, f"reach: {reply.error}")
        if reply.ok:
            run.findings.extend(self._hello_found)
            run.run_id = reply.run_id

    def _host(self) -> None:
        """The master's store and gate, up before anyone can knock."""
        c = self.config
        self.run.run_id = uuid.uuid4().hex[:12]
        budget = c.timeouts.rendezvous + c.timeouts.workers_total() + c.timeouts.exit_barrier
        try:
            self.store = rendezvous.host_store(c.port, budget)
            self.gate = gate.GateServer(c.gate_port, c.token, self.run.run_id)
        except Exception as exc:
            self._fail(
                [
                    Finding(
                        "run.port-in-use",
                        "firewall_or_port",
                        Severity.FAIL,
                        f"the master cannot listen on port {c.port} or {c.gate_port}: {exc}",
                        [str(exc)],
                        f"Pick a free port with --port (ss -ltnp | grep {c.port} shows the owner).",
                        area="network",
                        node=self.run.node,
                    )
                ],
                f"reach: {exc}",
            )

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
                cuda=self._cuda(),
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
            row["detail"] = f"{len(world.nodes)} node(s), world size {world.world_size}"
            if world.abort:
                raise PhaseFailed(f"rendezvous: {world.abort}")
            if me is None:
                self._fail(
                    [
                        Finding(
                            "run.node-late",
                            "connect_refused_or_timeout",
                            Severity.FAIL,
                            f"node {run.node} arrived after the master closed the join window",
                            [f"world: {', '.join(n.name for n in world.nodes)}"],
                            "Start every node within the rendezvous timeout, or pass --nodes.",
                            area="cluster",
                            node=run.node,
                        )
                    ],
                    "rendezvous: arrived too late",
                )

    def _bootstrap(self) -> None:
        """NCCL's own interface choice (libnccl's ncclGetUniqueId, no GPU needed), compared with
        the kernel's route to the master and the user's NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME."""
        run = self.run
        with self.phase("bootstrap") as row:
            pick = run.facts.network.nccl_default_pick if run.facts else None
            libraries = [lib.path for lib in run.facts.software.nccl_libraries if not lib.error]
            try:
                from nccldoctor.probes.libnccl import bootstrap_probe
            except ImportError:
                bootstrap_probe = None
            if bootstrap_probe is None or not libraries:
                row["status"], row["detail"] = "skipped", "libnccl or its bootstrap probe missing"
            else:
                probe = bootstrap_probe(libraries[0], self.env, self.config.timeouts.bootstrap)
                used = bootstrap_interface(probe.output_lines)
                run.bootstrap = {
                    "library": libraries[0],
                    "rc": probe.rc,
                    "error": probe.error,
                    "interface": used,
                    "lines": probe.output_lines[-20:],
                }
                pick = used[0] if used else pick
                row["detail"] = f"NCCL picks {used[0]} ({used[1]})" if used else str(probe.error)
            run.findings.extend(
                interface_findings(
                    run.node, (run.reach or {}).get("interface"), local_interfaces(), self.env, pick
                )
            )

    def _tcp(self) -> None:
        c, run = self.config, self.run
        with self.phase("tcp") as row:
            if run.is_master:
                row["status"], row["detail"] = "skipped", "the master receives"
                return
            turns = len(run.world.nodes) if run.world else 1
            deadline = time.monotonic() + turns * (c.timeouts.tcp_probe + 6)
            address = run.reach["addresses"][0]
            gbps, error = gate.measure_tcp(
                address, c.gate_port, run.node, c.token, c.timeouts.tcp_probe, deadline
            )
            run.tcp_gbps = gbps
            row["detail"] = f"{gbps:.2f} Gbit/s" if gbps is not None else error
            if gbps is None:
                row["status"] = "fail"

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
                interface=(run.reach or {}).get("interface"),
                timeouts=c.timeouts,
                mnist_root=c.mnist_root,
                out=self.node_dir,
            )
            run.workers_started = True
            self.launched = launcher.launch(spec, self.env)
            watch = watchdog.monitor(
                self.launched, run.node, c.timeouts, world.backend, on_change=self.progress
            )
            run.ranks, run.rank_phases, run.worker_results = results.worker_sections(watch)
            bad = [r for r in run.ranks if r["state"] != "ok"]
            if watch.stuck_reason:
                row["status"], row["detail"] = "timeout", watch.stuck_reason
            elif bad:
                row["status"] = "fail"
                row["detail"] = ", ".join(f"rank {r['rank']} {r['state']}" for r in bad)

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
        report = self.node_report()
        path = write_report(report, self.config.out / f"check-{self.run.node}.json")
        self.progress(f"node report: {path}")
        if not self.run.is_master:
            if self.store is not None and self.run.node_rank is not None and self.keys:
                with contextlib.suppress(Exception):
                    doc = report.to_dict()
                    doc["report_path"] = str(path)
                    self.store.set(self.keys.result(self.run.node_rank), json.dumps(doc))
            return report, path
        cluster = self._cluster_report(report, path)
        cluster_path = write_report(cluster, self.config.out / "check-cluster.json")
        self.progress(f"cluster report: {cluster_path}")
        return cluster, cluster_path

    def node_report(self) -> Report:
        run = self.run
        findings = list(run.findings)
        findings += verdict.worker_findings(run.ranks, run.worker_results)
        if run.aborted and not any(f.severity is Severity.FAIL for f in findings):
            findings.append(
                Finding(
                    "run.incomplete",
                    "other",
                    Severity.FAIL,
                    f"the run stopped: {run.aborted}",
                    [],
                    "See the phases of this report.",
                    area="run",
                    node=run.node,
                )
            )
        world = run.world
        status = dict(run.area_status)
        status["run"] = _run_status(run)
        bandwidth = results.bandwidth_section(
            run.worker_results, world.backend if world else "", world.world_size if world else 0
        )
        if run.tcp_gbps is not None:
            bandwidth["tcp_wire_gbps"][run.node] = round(run.tcp_gbps, 3)
        return Report(
            kind="check",
            nodes=[run.facts] if run.facts else [],
            findings=findings,
            command=self.command,
            completed=run.workers_started and not run.aborted,
            area_status=status,
            extra={
                "phases": run.phases + run.rank_phases,
                "bandwidth": bandwidth,
                "ranks": run.ranks,
                "hang": verdict.hang_section(run.ranks),
                "mnist": results.mnist_section(run.worker_results),
                "cluster": merge.cluster_section(self.config.master, world, {}),
                "timeouts": self.config.timeouts.to_dict(),
                "run": {
                    "run_id": run.run_id,
                    "node": run.node,
                    "node_rank": run.node_rank,
                    "master": run.is_master,
                    "launcher": self.config.launcher,
                    "aborted": run.aborted,
                    "reach": run.reach,
                    "hello": run.hello,
                    "bootstrap": run.bootstrap,
                    "elapsed_s": round(time.monotonic() - self.started, 3),
                },
            },
        )

    def _cluster_report(self, own: Report, own_path: Path) -> Report:
        run, t = self.run, self.config.timeouts
        others: dict[int, dict] = {}
        last_phase: dict[int, str] = {}
        world = run.world
        if world and self.store is not None and self.keys:
            ranks = [n.node_rank for n in world.nodes if n.node_rank != run.node_rank]
            deadline = time.monotonic() + (
                0 if run.aborted and run.aborted.startswith("interrupted") else t.exit_barrier
            )
            self.progress(f"gather: waiting up to {t.exit_barrier:.0f} s for {len(ranks)} node(s)")
            others, last_phase = rendezvous.gather_results(self.store, self.keys, ranks, deadline)
        own_doc = own.to_dict()
        own_doc["report_path"] = str(own_path)
        return merge.merge(
            master=self.config.master,
            world=world,
            own=own_doc,
            others=others,
            lost=last_phase,
            hellos=self.gate.snapshot() if self.gate else [],
            tcp_gbps=self.gate.tcp_gbps if self.gate else {},
            port=self.config.port,
            entries=self.entries,
            command=self.command,
        )


# NCCL bootstrap.cc: "Bootstrap : Using%s" (<=2.23) / "Bootstrap: Using%s" (2.24+), where %s is
# " <ifname>:<addr><port>" from ncclSocketToString (shared/reference/nccl-logs.md §4).
_BOOTSTRAP_USING = re.compile(r"Bootstrap ?: Using\s+([^:\s]+):(\S+?)<\d+>")


def bootstrap_interface(lines: Sequence[str]) -> tuple[str, str] | None:
    """(interface, address) of NCCL's "Bootstrap: Using" line, if it printed one."""
    for line in lines:
        match = _BOOTSTRAP_USING.search(line)
        if match:
            return match.group(1), match.group(2)
    return None


def _run_status(run: NodeRun) -> str:
    if run.aborted:
        return f"stopped: {run.aborted}"
    if not run.ranks:
        return "no workers ran"
    ok = sum(r["state"] == "ok" for r in run.ranks)
    return f"{ok}/{len(run.ranks)} local ranks ok"


def run_check(
    config: CheckConfig,
    env: Mapping[str, str],
    command: Sequence[str] = (),
    progress: Progress | None = None,
) -> tuple[Report, Path]:
    """Run `nccldoctor check` on this node; the report to show and where it was written."""
    return NodeAgent(config, env, command, progress).execute()
