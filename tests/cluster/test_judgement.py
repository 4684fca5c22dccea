"""The run's judgement, from observations to findings: plan_world, verdicts."""

from __future__ import annotations

import pytest

from checks import run_checks
from checks.signatures import category_of
from nccldoctor.cluster.agent.rendezvous import plan_world
from nccldoctor.cluster.diagnosis.findings import clocks, rendezvous_seen
from nccldoctor.cluster.diagnosis.verdict import hang_section, rank_findings
from nccldoctor.cluster.records import Hello, NodeEntry, World
from nccldoctor.facts.ranks import RankOutcome
from nccldoctor.facts.world import WorldSeen

# gloo's own messages, as its format strings print them (pytorch/gloo gloo/transport/tcp/
# unbound_buffer.cc UnboundBuffer::waitRecv, pair.cc Pair::read, device.cc lookupAddrForIface).
GLOO_TIMEOUT = (
    "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 2000ms for "
    "recv operation to complete"
)
GLOO_CLOSED = (
    "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
    "[198.18.0.3]:46033"
)
GLOO_READ_RESET = (
    "[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Read error [198.18.0.3]:46033: "
    "Connection reset by peer. This is typically caused by a remote worker hanging or bugs in "
    "the application."
)
GLOO_NO_ADDRESS = (
    "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:84] "
    "ifa != nullptr. Unable to find address for: ib9"
)


def entry(slot, name, rank=None, procs=1, cuda=False):
    return NodeEntry(slot=slot, name=name, requested_rank=rank, procs=procs, cuda=cuda)


def test_plan_world_keeps_requested_ranks_and_fills_in_join_order():
    world = plan_world("r", "auto", [entry(0, "a", 0, 2), entry(1, "b"), entry(2, "c", 1)], 3)
    assert [(n.node_rank, n.name, n.rank_offset) for n in world.nodes] == [
        (0, "a", 0), (1, "c", 2), (2, "b", 3)]  # fmt: skip
    assert world.world_size == 4 and world.backend == "gloo" and world.abort is None
    assert World.from_json(world.to_json()) == world


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "Expecting value"),
        ("[]", "expected an object for World"),
        ('{"run_id": "r", "backend": "gloo", "nodes": null, "expected": 2}', "expected list"),
        (
            '{"run_id": "r", "backend": "gloo", "nodes": [{"node_rank": "0"}], "expected": 2}',
            "expected int, got str",
        ),
        (
            '{"run_id": "r", "backend": "gloo", "nodes": [], "expected": true}',
            "expected int, got bool",
        ),
        ('{"run_id": "r", "nodes": []}', "missing 2 required"),
    ],
)
def test_a_world_written_in_the_masters_place_is_refused_with_why(text, why):
    """Anyone who knows the run id can write the world key (docs/design.md#gate)."""
    with pytest.raises(ValueError, match=why):
        World.from_json(text)


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
    seen = WorldSeen(rendezvous=rendezvous_seen(world, hellos, 29400))
    found = {f.id: f for f in run_checks("world", seen)}
    assert sorted(found) == ["run.node-never-joined", "run.node-refused", "run.nodes-missing"]
    assert found["run.node-refused"].node == "b"
    assert (
        found["run.node-refused"].title == "node b (198.18.0.2) was refused: wrong or missing token"
    )
    never = found["run.node-never-joined"]
    assert never.node == "c" and never.category == "firewall_or_port"
    assert never.title == (
        "node c (198.18.0.3) reached nccldoctor's port 29401 but never joined the store on port 29400"
    )
    assert "connect timed out" in never.evidence[1]
    assert found["run.nodes-missing"].category == "connect_refused_or_timeout"
    assert found["run.nodes-missing"].evidence == ["joined: a ()"]


def test_a_joined_node_under_its_given_name_is_not_named_never_joined():
    """Two nodes sharing a hostname join as "trainer#0" and "trainer#1": their hellos name the
    hostname, and the master matches them by the name they gave and the address it saw."""
    joined = [entry(0, "trainer", 0), entry(1, "trainer")]
    world = plan_world("r", "gloo", joined, 2)
    world.nodes[0].seen, world.nodes[1].seen = "198.18.0.2", "198.18.0.3"
    hellos = [Hello("trainer", "198.18.0.2", "198.18.0.2", True),
              Hello("trainer", "198.18.0.3", "198.18.0.3", True)]  # fmt: skip
    assert run_checks("world", WorldSeen(rendezvous=rendezvous_seen(world, hellos, 29400))) == []
    # without a published world the master judges no rendezvous
    assert run_checks("world", WorldSeen()) == []


def test_clock_skew_warns_past_five_seconds_and_names_the_nodes():
    entries = [
        NodeEntry(0, "a", skew_s=0.4),
        NodeEntry(1, "b", skew_s=-7.25),
        NodeEntry(2, "c", skew_s=5.0),
    ]
    (f,) = run_checks("world", WorldSeen(clocks=clocks(entries)))
    assert (f.id, f.severity.value, f.node) == ("run.clock-skew", "warn", None)
    assert f.title == "clocks differ from the master's by more than 5 s on b"
    assert f.evidence == ["b: -7.25 s"]
    assert run_checks("world", WorldSeen(clocks=clocks(entries[:1]))) == []


def rank(r, node, state, phase, error=None, ended=None, lines=()):
    return RankOutcome.from_dict(
        {"rank": r, "node": node, "state": state, "phase_reached": phase, "error": error,
         "exit_code": 3, "stuck": "deadline" if state == "stuck" else None,
         "last_nccl_lines": list(lines), "log_path": f"/x/rank{r}/worker.log",
         "ended_at": ended})  # fmt: skip


def test_hang_verdict_names_the_stuck_rank_first():
    ranks = [rank(0, "A", "failed", "barrier", f"barrier: RuntimeError: {GLOO_TIMEOUT}", 5),
             rank(1, "B", "stuck", "init", "init: timed out after 20 s (worker deadline)", 9,
                  ["B:1:1 [0] NCCL INFO Bootstrap: Using eth0:198.18.0.2<0>"])]  # fmt: skip
    hang = hang_section(ranks)
    assert hang["phase"] == "init"
    assert hang["verdict"] == (
        "rank 1 on node B never finished init_process_group; its last NCCL line was "
        "'B:1:1 [0] NCCL INFO Bootstrap: Using eth0:198.18.0.2<0>'; "
        f"rank 0 waited in barrier (RuntimeError: {GLOO_TIMEOUT})."
    )
    assert hang["stuck"] == [{"node": "B", "rank": 1, "phase": "init",
                              "last_nccl_line": "B:1:1 [0] NCCL INFO Bootstrap: Using eth0:198.18.0.2<0>"}]  # fmt: skip
    findings = rank_findings(ranks)
    assert [(f.rank, f.severity.value, f.category) for f in findings] == [
        (1, "fail", "collective_timeout_hang"), (0, "warn", "collective_timeout_hang")]  # fmt: skip


def test_the_earliest_failure_is_the_cause():
    ranks = [rank(0, "A", "failed", "ddp", f"ddp: RuntimeError: {GLOO_CLOSED}", 12),
             rank(1, "B", "crashed", "ddp", "Killed", 10), rank(2, "B", "ok", "destroy")]  # fmt: skip
    assert hang_section(ranks)["verdict"] == (
        "rank 1 on node B crashed in ddp: Killed; rank 0 lost its peer in ddp "
        f"(RuntimeError: {GLOO_CLOSED})."
    )
    assert hang_section([rank(0, "A", "ok", "destroy")]) is None
    assert hang_section([], ["node B (node rank 1) stopped reporting"])["phase"] is None


def test_a_ranks_error_is_categorised_by_the_signature_catalogue():
    assert category_of(GLOO_TIMEOUT) == "collective_timeout_hang"
    assert category_of(f"ddp: RuntimeError: {GLOO_CLOSED}") == "remote_peer_closed"
    assert category_of(GLOO_READ_RESET) == "remote_peer_closed"
    assert category_of("init: DistNetworkError: Connection reset by peer") == "remote_peer_closed"
    assert category_of("RuntimeError: CUDA error: an illegal memory access was encountered") == (
        "cuda_error"
    )
    assert category_of("ValueError: x") == "other" and category_of(None) == "other"


def test_where_the_old_substring_table_disagreed_the_catalogue_answer_stays():
    # The table read any "timed out" as a hung collective: a store connect that timed out is a
    # connect problem (torch.store-client-timeout), not a collective that hung.
    assert category_of(
        "init: DistNetworkError: The client socket has timed out after 60000ms while trying to "
        "connect to (198.18.0.1, 29500)."
    ) == "connect_refused_or_timeout"  # fmt: skip
    # ... and any "cuda" as a CUDA error: a device the process cannot see is GPU visibility.
    assert category_of("RuntimeError: CUDA error: invalid device ordinal") == "gpu_visibility"
    assert category_of("RuntimeError: CUDA error: no CUDA-capable device is detected") == (
        "gpu_visibility"
    )
    # gloo's "no address for the interface" stays interface selection, as NCCL's own
    # "no socket interface found" (the catalogue said env_config and now says the same).
    assert category_of(GLOO_NO_ADDRESS) == "interface_selection"
    assert category_of("Bootstrap : no socket interface found") == "interface_selection"


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
