"""The run's judgement, from observations to findings: plan_world, verdicts."""

from __future__ import annotations

from nccldoctor.cluster.agent.gate import Hello
from nccldoctor.cluster.agent.rendezvous import NodeEntry, World, plan_world
from nccldoctor.cluster.diagnosis.findings import rendezvous_findings
from nccldoctor.cluster.diagnosis.verdict import hang_section, rank_findings
from nccldoctor.facts.ranks import RankOutcome
from nccldoctor.forensics.behind import categorize


def entry(slot, name, rank=None, procs=1, cuda=False):
    return NodeEntry(slot=slot, name=name, requested_rank=rank, procs=procs, cuda=cuda)


def test_plan_world_keeps_requested_ranks_and_fills_in_join_order():
    world = plan_world("r", "auto", [entry(0, "a", 0, 2), entry(1, "b"), entry(2, "c", 1)], 3)
    assert [(n.node_rank, n.name, n.rank_offset) for n in world.nodes] == [
        (0, "a", 0), (1, "c", 2), (2, "b", 3)]  # fmt: skip
    assert world.world_size == 4 and world.backend == "gloo" and world.abort is None
    assert World.from_json(world.to_json()) == world


def test_plan_world_names_missing_ranks_and_clashes():
    short = plan_world("r", "auto", [entry(0, "a", 0), entry(1, "b")], 3)
    assert short.missing == ["node rank 2"] and "only 2 of 3" in short.abort
    clash = plan_world("r", "gloo", [entry(0, "a", 0), entry(1, "b", 0)], 2)
    assert "b asked for node rank 0" in clash.abort


def test_plan_world_tells_nodes_with_one_hostname_apart_by_node_rank():
    same = plan_world("r", "gloo", [entry(0, "trainer", 0), entry(1, "trainer"), entry(2, "x")], 3)
    assert [n.name for n in same.nodes] == ["trainer#0", "trainer#1", "x"]
    assert [n.name for n in plan_world("r", "gloo", [entry(0, "a", 0), entry(1, "b")], 2).nodes] \
        == ["a", "b"]  # fmt: skip


def test_plan_world_auto_backend_is_nccl_only_when_every_node_has_cuda():
    assert (
        plan_world("r", "auto", [entry(0, "a", 0, cuda=True), entry(1, "b", cuda=True)], 2).backend
        == "nccl"
    )
    assert (
        plan_world("r", "auto", [entry(0, "a", 0, cuda=True), entry(1, "b")], 2).backend == "gloo"
    )


def test_rendezvous_findings_name_refused_and_blocked_nodes():
    world = plan_world("r", "gloo", [entry(0, "a", 0)], 3)
    hellos = [Hello("b", "", "198.18.0.2", False, "wrong or missing token"),
              Hello("c", "198.18.0.3", "198.18.0.3", True, "connect timed out")]  # fmt: skip
    found = {f.id: f for f in rendezvous_findings(world, hellos, 29400)}
    assert found["run.node-refused"].node == "b"
    assert found["run.node-never-joined"].node == "c"
    assert "connect timed out" in found["run.node-never-joined"].evidence[1]
    assert found["run.nodes-missing"].category == "connect_refused_or_timeout"


def rank(r, node, state, phase, error=None, ended=None, lines=()):
    return RankOutcome.from_dict(
        {"rank": r, "node": node, "state": state, "phase_reached": phase, "error": error,
         "exit_code": 3, "stuck": "deadline" if state == "stuck" else None,
         "last_nccl_lines": list(lines), "log_path": f"/x/rank{r}/worker.log",
         "ended_at": ended})  # fmt: skip


def test_hang_verdict_names_the_stuck_rank_first():
    ranks = [rank(0, "A", "failed", "barrier", "barrier: RuntimeError: Timed out waiting 2000ms", 5),
             rank(1, "B", "stuck", "init", "init: timed out after 20 s (worker deadline)", 9,
                  ["B:1:1 [0] NCCL INFO Bootstrap: Using eth0:198.18.0.2<0>"])]  # fmt: skip
    hang = hang_section(ranks)
    assert hang["phase"] == "init"
    assert hang["verdict"] == (
        "rank 1 on node B never finished init_process_group; its last NCCL line was "
        "'B:1:1 [0] NCCL INFO Bootstrap: Using eth0:198.18.0.2<0>'; "
        "rank 0 waited in barrier (RuntimeError: Timed out waiting 2000ms)."
    )
    assert hang["stuck"] == [{"node": "B", "rank": 1, "phase": "init",
                              "last_nccl_line": "B:1:1 [0] NCCL INFO Bootstrap: Using eth0:198.18.0.2<0>"}]  # fmt: skip
    findings = rank_findings(ranks)
    assert [(f.rank, f.severity.value, f.category) for f in findings] == [
        (1, "fail", "collective_timeout_hang"), (0, "warn", "collective_timeout_hang")]  # fmt: skip


def test_the_earliest_failure_is_the_cause():
    ranks = [rank(0, "A", "failed", "ddp", "ddp: Connection closed by peer", 12),
             rank(1, "B", "crashed", "ddp", "Killed", 10), rank(2, "B", "ok", "destroy")]  # fmt: skip
    assert hang_section(ranks)["verdict"] == (
        "rank 1 on node B crashed in ddp: Killed; rank 0 lost its peer in ddp "
        "(Connection closed by peer)."
    )
    assert hang_section([rank(0, "A", "ok", "destroy")]) is None
    assert hang_section([], ["node B (node rank 1) stopped reporting"])["phase"] is None


def test_categorize_error_text():
    assert categorize("Unable to find address for: ib9") == "interface_selection"
    assert categorize("Connection reset by peer") == "remote_peer_closed"
    assert categorize("Timed out waiting 20000ms for recv") == "collective_timeout_hang"
    assert categorize("ValueError: x") == "other"


def test_main_thread_frame_of_a_faulthandler_dump():
    from nccldoctor.forensics.behind import stopped_at as main_thread_frame

    dump = (
        "Current thread 0x1 (most recent call first):\n"
        '  File "/x/workerwatch.py", line 75 in dump\n'
        '  File "/py/threading.py", line 1002 in _bootstrap\n\n'
        "Thread 0x2 (most recent call first):\n"
        '  File "/x/faults.py", line 98 in hang_forever\n'
        '  File "/x/worker.py", line 326 in <module>\n'
        '  File "<frozen runpy>", line 198 in _run_module_as_main\n'
    )
    assert main_thread_frame(dump).describe() == "/x/faults.py:98 in hang_forever"
    assert main_thread_frame(None) is None and main_thread_frame("garbage") is None
