"""The isolation rounds through a real store: the master's decision, what members write, and a
whole run of rounds among nodes played by threads of this process (real gloo groups on lo)."""

from __future__ import annotations

import contextlib
import threading

from nccldoctor.cluster.isolate import results, rounds
from nccldoctor.cluster.isolate.messages import MemberResult, RoundCall, RunState
from nccldoctor.cluster.isolate.results import MIN_STALL_S, Pace
from nccldoctor.cluster.isolate.scheduler import Round
from nccldoctor.facts.isolation import Isolation
from tests.ports import free_port

# Threads of one process on lo: their pairs' busbw is the GIL's and the scheduler's noise, a
# factor of three apart at times. A link rated this low holds no pair slow (a group is slow only
# below a third of its link too), so these tests judge who took part, not who was fast.
NOISE = {f"node{i}": 1e-6 for i in range(4)}


def test_auto_isolates_when_the_all_node_run_failed_or_a_node_said_nothing() -> None:
    ok = RunState(True)
    plan = rounds.should_isolate(
        "auto", {"a": ok, "b": RunState(False, "rank 1 stuck"), "c": None}, {}
    )
    assert (
        plan.run
        and plan.why == "the all-node run failed on b; c never said how the all-node run went"
    )
    assert not rounds.should_isolate("auto", {"a": ok, "b": ok, "c": ok}, {}).run
    assert (
        rounds.should_isolate("always", {"a": ok, "b": ok, "c": ok}, {}).why == "--isolate always"
    )
    assert not rounds.should_isolate("never", {"a": None}, {}).run


def test_auto_isolates_when_one_node_s_link_is_far_slower_than_the_others() -> None:
    ok = RunState(True)
    states = {n: ok for n in "abcd"}
    plan = rounds.should_isolate("auto", states, {"b": 9.4, "c": 9.9, "d": 0.1})
    assert (
        plan.run and plan.why == "TCP to the master: d 0.10 Gbit/s, the others' median 9.40 Gbit/s"
    )
    assert not rounds.should_isolate("auto", states, {"b": 9.4, "c": 5.0, "d": 7.0}).run
    assert not rounds.should_isolate("auto", states, {"b": 9.4, "d": 0.1}).run  # two: no median


def test_a_group_is_judged_by_its_slowest_member_and_its_worst_end() -> None:
    ok = MemberResult("ok", 0.1, [(1 << 20, 0.01), (8 << 20, 0.1)])
    slow = MemberResult("ok", 0.3, [(1 << 20, 0.02), (8 << 20, 0.4)])
    test = results.group_test(2, ("a", "b"), {"a": ok, "b": slow}, {"a", "b"})
    assert test.status == "ok" and test.init_s == 0.3
    assert [(r.size_bytes, r.busbw_GBps) for r in test.rates] == [
        (1 << 20, 0.0524),
        (8 << 20, 0.021),
    ]
    error = MemberResult("error", 0.1, [], "RuntimeError: Connection reset by peer")
    assert results.group_test(2, ("a", "b"), {"a": ok, "b": error}, {"a", "b"}).detail == (
        "b: RuntimeError: Connection reset by peer"
    )
    late = results.group_test(2, ("a", "b"), {"a": ok}, {"a", "b"})
    assert (late.status, late.detail) == ("timeout", "b passed the group's deadline")
    gone = results.group_test(2, ("a", "b"), {"a": ok}, {"a"})
    assert (gone.status, gone.absent) == ("absent", ("b",))
    unread = results.group_test(2, ("a", "b"), {"a": ok}, {"a", "b"}, {"b": 'status "fine"'})
    assert (unread.status, unread.detail) == ("timeout", 'b\'s result was refused: status "fine"')


def test_rounds_among_threads_name_the_node_that_never_takes_its_place(tmp_path) -> None:
    """Four nodes; node3 said how the all-node run went and then never took part: it is
    unreachable, its partners are not blamed, and every other pair passed with numbers."""
    from nccldoctor.meet import host_store

    port = free_port()
    store = host_store(port, 10)
    keys = rounds.IsoKeys("nccldoctor/test")
    names = {0: "node0", 1: "node1", 2: "node2", 3: "node3"}

    def member(rank: int) -> rounds.Member:
        return rounds.Member(names[rank], rank, "127.0.0.1", port, "gloo", "lo", 2.0)

    for rank in names:
        rounds.publish_state(store, keys, rank, rank != 1, "" if rank != 1 else "rank 1 stuck")
    threads = [
        threading.Thread(target=rounds.take_part,
                         args=(rounds.own_client(member(r), 15), keys, member(r), 15), daemon=True)
        for r in (1, 2)
    ]  # fmt: skip
    for thread in threads:
        thread.start()
    answer = rounds.coordinate(store, keys, member(0), names, "auto", {}, 5.0, budget_GBps=NOISE)
    for thread in threads:
        thread.join(10)
    assert isinstance(answer, Isolation) and not isinstance(answer, Round)
    assert answer.why_run == "the all-node run failed on node1"
    states = {v.node: v.state for v in answer.nodes}
    assert states == {"node0": "ok", "node1": "ok", "node2": "ok", "node3": "unreachable"}
    passed = [t for t in answer.tests if t.status == "ok"]
    assert passed and all(t.busbw_GBps and t.busbw_GBps > 0 for t in passed)
    assert all(len(t.rates) == 3 for t in passed)
    assert RoundCall.from_json(store.get(keys.round(answer.rounds + 1))) == RoundCall(done=True)


def test_a_node_that_dies_after_a_round_is_unreachable_from_the_round_it_missed(tmp_path) -> None:
    from nccldoctor.meet import host_store

    port = free_port()
    store = host_store(port, 10)
    keys = rounds.IsoKeys("nccldoctor/dies")
    names = {0: "node0", 1: "node1", 2: "node2", 3: "node3"}

    def member(rank: int) -> rounds.Member:
        return rounds.Member(names[rank], rank, "127.0.0.1", port, "gloo", "lo", 2.0)

    for rank in names:
        rounds.publish_state(store, keys, rank, rank != 1, "" if rank != 1 else "rank 1 stuck")
    dead = threading.Event()

    def die_after_round_one() -> None:  # node3 stops once it took its place in round 1
        watcher = rounds.own_client(member(0), 15)
        watcher.wait([keys.took(1, 3)])
        dead.set()

    threads = [threading.Thread(target=die_after_round_one, daemon=True)] + [
        threading.Thread(target=rounds.take_part, daemon=True,
                         args=(rounds.own_client(member(r), 15), keys, member(r), 15,
                               dead if r == 3 else None))
        for r in (1, 2, 3)
    ]  # fmt: skip
    for thread in threads:
        thread.start()
    answer = rounds.coordinate(store, keys, member(0), names, "auto", {}, 5.0, budget_GBps=NOISE)
    assert isinstance(answer, Isolation)
    node3 = next(v for v in answer.nodes if v.node == "node3")
    assert node3.state == "unreachable" and "after taking part in round(s) 0, 1" in node3.why
    assert {v.node for v in answer.culprits} == {"node3"} and not answer.links


def test_the_master_does_not_wait_for_a_node_that_stopped_and_no_node_waits_for_it() -> None:
    """node2 stopped before its isolate phase and handed its report over: the master reads it
    as silent at once rather than at the end of its wait; a master that stops before its own
    isolate phase writes a plan of no rounds, which a node's wait reads at once."""
    import time

    from nccldoctor.meet import host_store

    port = free_port()
    store = host_store(port, 10)
    keys = rounds.IsoKeys("nccldoctor/gone")
    names = {0: "node0", 1: "node1", 2: "node2"}
    for rank in (0, 1):
        rounds.publish_state(store, keys, rank, True, "")
    started = time.monotonic()
    plan = rounds.coordinate(store, keys, rounds.Member("node0", 0, "127.0.0.1", port, "gloo",
                                                        "lo", 2.0),
                             names, "never", {}, 60.0, gone=lambda rank: rank == 2)  # fmt: skip
    assert isinstance(plan, rounds.Plan) and time.monotonic() - started < 10

    other = rounds.IsoKeys("nccldoctor/stopped")
    rounds.close_plan(store, other, "rendezvous: only 2 of 3 nodes joined")
    rounds.close_plan(store, other, "a second word is not written over the first")
    assert rounds.wait_plan(store, other, 1.0) == rounds.Plan(
        False, "rendezvous: only 2 of 3 nodes joined"
    )


def test_the_link_budget_is_the_link_nccl_would_use_and_none_for_gloo() -> None:
    """eth0 at 100 Gbit/s on each node, and on node1 an active 200 Gb/s HDR port: every node is
    held to its InfiniBand ports where any node has them (node0 has none: no budget)."""
    from nccldoctor.cluster.isolate.budget import link_budgets
    from nccldoctor.cluster.records import NodeEntry
    from nccldoctor.facts import NodeFacts
    from nccldoctor.facts.network import Interface, NetworkFacts, Route
    from nccldoctor.facts.rdma import Hca, IbPort, RdmaFacts

    def facts(name: str, hdr: bool) -> NodeFacts:
        net = NetworkFacts(interfaces=[Interface("eth0", speed_mbps=100_000)],
                           route_to_master=Route("198.18.0.1", interface="eth0"))  # fmt: skip
        port = IbPort(1, state="ACTIVE", rate="200 Gb/sec (4X HDR)", link_layer="InfiniBand")
        rdma = RdmaFacts(hcas=[Hca("mlx5_0", ports=[port])] if hdr else [])
        return NodeFacts(node=name, network=net, rdma=rdma)

    entries = [
        NodeEntry(0, "a", facts=facts("a", False)),
        NodeEntry(1, "b", facts=facts("b", True)),
    ]
    names = {0: "node0", 1: "node1"}
    assert link_budgets(entries, names, "nccl") == ("IB", {"node1": 25.0})
    assert link_budgets(entries[:1], names, "nccl") == ("Socket", {"node0": 12.5})  # the NIC
    assert link_budgets(entries, names, "gloo") == ("", {})


def test_auto_isolates_when_the_all_node_busbw_is_far_below_what_the_links_carry() -> None:
    from nccldoctor.cluster.isolate.budget import below_links

    budgets = {"node0": 25.0, "node1": 12.5}
    why = below_links(1.2, "IB", budgets)  # 40% of 12.5 is 5
    assert (
        why == "the all-node busbw 1.20 GB/s is below 40% of what node1's link carries (12.50 GB/s)"
    )
    assert below_links(5.5, "IB", budgets) == "" and below_links(None, "IB", budgets) == ""
    assert below_links(1.2, "", budgets) == "" and below_links(1.2, "IB", {}) == ""
    ok = RunState(True)
    plan = rounds.should_isolate("auto", {"a": ok, "b": ok, "c": ok}, {}, why)
    assert plan.run and plan.why == why


def test_under_gloo_auto_isolates_when_the_all_node_busbw_ran_at_one_node_s_wire() -> None:
    """Six gloo lab nodes, the default sweep: the TCP probes and the all-node run's largest busbw
    as measured. node3 rate-limited to 100 Mbit/s held the busbw at its wire while the others'
    carry 24 times more: auto ran no round (its probe was not a twenty-fifth of the others' on a
    loaded machine). Healthy, gloo levelled off at 0.2 GB/s, next to node3's probe read low, but
    the others' median carries under five times that; links all as slow are no node's fault."""
    from nccldoctor.cluster.isolate.budget import ran_at_wire

    limited = {"node1": 0.609, "node2": 3.226, "node3": 0.094, "node4": 3.333, "node5": 1.435}
    why = ran_at_wire(0.011938, limited)
    assert why == (
        "the all-node busbw 11.9 MB/s ran at node3's TCP rate to the master (11.8 MB/s), the "
        "others' median 291 MB/s"
    )
    plan = rounds.should_isolate("auto", {n: RunState(True) for n in limited}, limited, why)
    assert plan.run and plan.why == why
    assert rounds.slow_links(limited) == ""  # the probes alone did not say it
    healthy = {"node1": 7.928, "node2": 7.267, "node3": 1.474, "node4": 5.239, "node5": 8.943}
    assert ran_at_wire(0.200176, healthy) == ""
    healthy = {"node1": 0.622, "node2": 1.549, "node3": 0.623, "node4": 7.756, "node5": 7.03}
    assert ran_at_wire(0.190334, healthy) == ""
    assert ran_at_wire(0.1, {"node1": 0.94, "node2": 0.95, "node3": 0.93}) == ""  # all 1 GbE
    assert ran_at_wire(0.05, limited) == ""  # four times node3's probe: it under-measured
    assert ran_at_wire(0.0013, limited) == ""  # a sweep cut short never reached the wire
    assert ran_at_wire(None, limited) == "" and ran_at_wire(0.01, {"node3": 0.1}) == ""


def test_a_group_that_never_gets_past_its_first_op_ends_at_the_pace_of_those_that_pass() -> None:
    """node3 takes its place in every round and never connects (a node behind a firewall): each
    of its groups ends once it has taken four times as long as the groups that passed took to
    their first op (at least 2 s), not at the group's 6 s deadline; it is still named faulty."""
    import time

    import torch.distributed

    from nccldoctor.meet import host_store

    port = free_port()
    store = host_store(port, 10)
    keys = rounds.IsoKeys("nccldoctor/stalls")
    names = {0: "node0", 1: "node1", 2: "node2", 3: "node3"}

    def member(rank: int) -> rounds.Member:
        return rounds.Member(names[rank], rank, "127.0.0.1", port, "gloo", "lo", 6.0)

    def never_connects() -> None:
        client = rounds.own_client(member(3), 60)
        number = 1
        # the test may end and close its store between the last call and this member's read of it
        with contextlib.suppress(torch.distributed.DistNetworkError):
            while True:
                client.wait([keys.round(number)])
                if RoundCall.from_json(client.get(keys.round(number))).done:
                    return
                client.set(keys.took(number, 3), "1")
                number += 1

    for rank in names:
        rounds.publish_state(store, keys, rank, rank != 3, "" if rank != 3 else "rank 3 stuck")
    threads = [threading.Thread(target=never_connects, daemon=True)] + [
        threading.Thread(target=rounds.take_part, daemon=True,
                         args=(rounds.own_client(member(r), 30), keys, member(r), 30))
        for r in (1, 2)
    ]  # fmt: skip
    for thread in threads:
        thread.start()
    started = time.monotonic()
    answer = rounds.coordinate(store, keys, member(0), names, "auto", {}, 5.0, budget_GBps=NOISE)
    elapsed = time.monotonic() - started
    assert isinstance(answer, Isolation)
    assert {v.node: v.state for v in answer.culprits} == {"node3": "faulty"}
    stalled = [t for t in answer.tests if "node3" in t.members and t.round > 0]
    assert stalled and all(t.status == "timeout" for t in stalled)
    assert all("not past the first op" in t.detail and "node3" in t.detail for t in stalled)
    # every round of node3's ended long before its 6 s deadline
    assert elapsed < answer.rounds * (MIN_STALL_S + 3), (elapsed, answer.rounds)


def test_the_pace_is_four_times_the_slowest_first_op_that_passed_and_none_before_one() -> None:
    pace = Pace()
    assert pace.stall_s(6.0) is None  # no group passed yet: only the deadline ends a group
    pace.firsts += [0.1, 0.3]
    assert pace.stall_s(6.0) == MIN_STALL_S
    pace.firsts.append(1.0)
    assert pace.stall_s(6.0) == 4.0
    assert pace.stall_s(4.0) is None  # no sooner than the deadline: the deadline decides
    assert pace.stalled(["node3"], 4.04) == (
        "node3 not past the first op 4.0 s after the round's call; "
        "the groups that passed were within 1.0 s"
    )
