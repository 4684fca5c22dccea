"""What strangers may write to the master's store: checked before use, left out, named
(cluster/diagnosis/peer.py, the rendezvous' and the gather's reads of it)."""

from __future__ import annotations

import copy
import json
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checks import run_checks
from nccldoctor.cluster.agent import gather, rendezvous
from nccldoctor.cluster.diagnosis import merge, peer
from nccldoctor.cluster.diagnosis.findings import rendezvous_seen
from nccldoctor.cluster.records import NodeEntry
from nccldoctor.facts import NodeFacts, from_dict
from nccldoctor.facts.world import HelloFlood, Rejected, WorldSeen
from nccldoctor.meet import host_store
from nccldoctor.report import Report
from tests.ports import free_port
from tests.strategies import JSON

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "reports"
HEALTHY = json.loads((FIXTURES / "healthy-check.json").read_text())


def deep(levels: int) -> object:
    value: object = []
    for _ in range(levels):
        value = [value]
    return value


def with_(path: tuple, value: object) -> str:
    doc = copy.deepcopy(HEALTHY)
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return json.dumps(doc)


def test_a_node_report_is_read_back():
    report, why = peer.node_result(json.dumps(HEALTHY))
    assert why == "" and isinstance(report, Report) and report.kind == "check"


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deep to parse"),
        (with_(("findings",), deep(60)), "nested more than 48 deep"),
        ('{"kind": "check", "exit_code": ' + "9" * 5000 + "}", "not JSON: Exceeds the limit"),
        (with_(("exit_code",), 10**30), "an integer of 31 digits"),
        (with_(("findings",), "none"), "findings is a string, not array"),
        (with_(("findings", 0, "severity"), "dire"), "findings[0].severity is 'dire', not one of"),
        (with_(("nodes", 0, "network", "interfaces", 0, "mtu"), "1500"), "mtu is a string"),
        (with_(("ranks",), {"0": "ok"}), "ranks is an object"),
        (with_(("report_path",), {"a": 1}), "report_path is an object"),
        (json.dumps({**HEALTHY, "nodes": "x" * (peer.MAX_RESULT_BYTES)}), "bytes, more than"),
        (b"\xff\xfe{}", "not JSON"),
        ("[1, 2]", "the document is an array, not object"),
    ],
    ids=[
        "deep-raw",
        "deep",
        "digits",
        "huge-int",
        "type",
        "enum",
        "nested-type",
        "ranks",
        "report-path",
        "size",
        "not-utf8",
        "not-object",
    ],
)
def test_a_result_that_is_not_a_node_report_is_refused_with_why(raw, why):
    report, said = peer.node_result(raw)
    assert report is None and why in said, said


def test_the_schema_is_read_as_jsonschema_reads_it():
    """The checker agrees with the reference validator on one-field changes of a report."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(peer._schema())
    changes = [(("findings", 0, "severity"), "warn"), (("findings", 0, "severity"), 3),
               (("nodes", 0, "gpu", "devices"), [{}]), (("area_status", "gpu"), 1),
               (("area_status", "no-such-area"), "x"), (("command",), ["a", 1]),
               (("schema_version",), 0), (("kind",), "Check!"), (("bandwidth", "rows"), [{}]),
               (("consistency", "columns"), [["a"]]), (("ranks", 0, "rank"), 1.0)]  # fmt: skip
    for path, value in changes:
        doc = json.loads(with_(path, value))
        assert (peer.schema_error(doc, peer._schema()) == "") == validator.is_valid(doc), path


ENTRY = {"slot": 1, "name": "node1", "advertised": "198.18.0.2", "seen": "198.18.0.2", "procs": 2,
         "cuda": False, "requested_rank": None, "skew_s": 0.01, "facts": HEALTHY["nodes"][0]}  # fmt: skip


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"slot": 7}, "it claims slot 7"),
        ({"name": "\x1b]0;x\x07"}, "its name is not a host name"),
        ({"procs": 0}, "procs 0 is not 1..4096"),
        ({"procs": True}, "procs: expected int, got bool"),
        ({"requested_rank": "0"}, "requested_rank: expected int, got str"),
        ({"slot": None}, "slot: expected int, got null"),
        ({"skew_s": float("nan")}, "skew_s is not a finite number"),
        ({"facts": {"node": 5}}, "facts: node is an integer, not string"),
        # what the schema leaves open and the Facts do not: a driver version that is a number
        (
            {"facts": {**ENTRY["facts"], "gpu": {"kernel_driver": 1}}},
            "facts: expected str, got int",
        ),
        ({"admin": True}, "an unknown key 'admin'"),
        ({"seen": "198.18.0.2\x1b[2J"}, "its seen address is not an address"),
    ],
)
def test_a_node_entry_that_is_not_one_is_refused_with_why(change, why):
    facts = from_dict(NodeFacts, ENTRY["facts"])
    assert peer.node_entry(json.dumps(ENTRY), 1) == (NodeEntry(**{**ENTRY, "facts": facts}), "")
    assert peer.node_entry(json.dumps({**ENTRY, **change}), 1) == (None, why)


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from([*ENTRY, "extra"]), value=JSON)
def test_any_value_in_any_field_of_an_entry_is_an_entry_or_refused(key, value):
    entry, why = peer.node_entry(json.dumps({**ENTRY, key: value}), 1)
    assert (entry is None) == bool(why)
    if entry is not None:  # read as the node would write it again
        assert peer.node_entry(entry.to_json(), 1) == (entry, "")


NODE0 = NodeEntry(slot=0, name="node0", facts=NodeFacts("node0"))


@pytest.fixture
def store():
    server = host_store(free_port(), 10.0)
    yield server


def publish(store, keys, entry: dict) -> None:
    slot = int(store.add(keys.count, 1))
    store.set(keys.node(slot), json.dumps({**entry, "slot": slot}))


def test_the_join_window_counts_only_node_entries(store):
    keys = rendezvous.Keys("run1")
    rendezvous.publish_entry(store, keys, NODE0)
    publish(store, keys, {"name": "intruder", "facts": deep(60)})
    publish(store, keys, {**ENTRY, "name": "node1"})
    rejected: list[Rejected] = []
    start = time.monotonic()
    entries = rendezvous.gather_entries(store, keys, 2, start + 10, 1.0, rejected=rejected)
    assert [(e.slot, e.name) for e in entries] == [(0, "node0"), (2, "node1")]
    assert time.monotonic() - start < 2  # the two nodes were in: the window closed at once
    assert rejected == [Rejected("entry", "intruder", "node/1", "nested more than 48 deep")]


def test_a_counter_pushed_far_ahead_still_leaves_the_nodes_behind_it_read(store):
    keys = rendezvous.Keys("run1")
    rendezvous.publish_entry(store, keys, NODE0)
    store.add(keys.count, 10**9)
    publish(store, keys, {**ENTRY, "name": "node1"})
    entries = rendezvous.gather_entries(store, keys, 2, time.monotonic() + 10, 1.0)
    assert [e.name for e in entries] == ["node0", "node1"]


def test_a_bad_result_in_a_nodes_name_does_not_hide_its_own(store):
    keys = rendezvous.Keys("run1")
    store.set(keys.result(1, int(store.add(keys.results(1), 1))), "[" * 5000)
    store.set(keys.result(1, int(store.add(keys.results(1), 1))), with_(("exit_code",), 10**40))
    own = Report.from_dict(copy.deepcopy(HEALTHY))
    gather.publish(store, keys, 1, own, Path("/tmp/check-node1.json"))
    store.set(keys.result(1, int(store.add(keys.results(1), 1))), json.dumps(HEALTHY))  # forged
    store.add(keys.results(2), 1)  # a number taken, nothing written: never waited for alone
    store.set(keys.phase(2), "\x1b]0;x\x07" + "w" * 10_000)
    rejected: list[Rejected] = []
    results, lost = rendezvous.gather_results(
        store, keys, {1: "node1", 2: "node2"}, time.monotonic() + 1, rejected
    )
    assert list(results) == [1] and results[1].extra["report_path"] == "/tmp/check-node1.json"
    assert lost == {2: "]0;x" + "w" * 58}  # 64 bytes, less the control codes
    assert [(r.node, r.key) for r in rejected] == [("node1", "result/1/1"), ("node1", "result/1/2"),
                                                   ("node1", "result/1/4")]  # fmt: skip
    assert rejected[2].why == "a second report in its name (result/1/3 was merged)"
    assert rejected[1].why == "an integer of 41 digits"


def test_a_verdict_that_is_no_exit_code_is_not_taken(store):
    keys = rendezvous.Keys("run1")
    for junk in ("255", "-1", "1" * 5000, "ok"):
        store.set(keys.verdict, junk)
        assert gather.await_verdict(store, keys, 0.5) is None
    store.set(keys.verdict, "1")
    assert gather.await_verdict(store, keys, 0.5) == 1


def test_the_master_names_a_flood_and_every_rejection_in_one_finding_each():
    world = rendezvous.plan_world("run1", "gloo", [NodeEntry(slot=0, name="n0")], 2)
    flood = HelloFlood(19977, 19970, ("198.18.0.9", "198.18.0.8"), 5, 2)
    rejected = [Rejected("entry", "intruder", "node/3", "nested more than 48 deep"),
                Rejected("result", "n1", "result/1/1", "not JSON")]  # fmt: skip
    seen = WorldSeen(rendezvous=rendezvous_seen(world, [], 29400, flood, rejected))
    found = {f.id: f for f in run_checks("world", seen)}
    assert found["run.hello-flood"].title == (
        "19977 more hellos reached the master's listener than the 2 nodes of the run, 19970 of "
        "them without the token"
    )
    assert found["run.hello-flood"].evidence == ["from 198.18.0.9, 198.18.0.8 and 3 more addresses"]
    titles = [(f.node, f.title) for f in run_checks("world", seen) if f.id == "run.store-rejected"]
    assert titles == [
        ("intruder", "a node entry written as intruder was left out of the world: nested more "
                     "than 48 deep"),
        ("n1", "a result written as node n1's was left out of the merge: not JSON"),
    ]  # fmt: skip


def test_a_merge_with_rejections_keeps_the_nodes_and_names_them():
    world = rendezvous.plan_world("run1", "gloo", [NodeEntry(slot=0, name="node-a")], 1)
    own = Report.from_dict(copy.deepcopy(HEALTHY))
    gathered = merge.Gathered(master="198.18.0.1", world=world, port=29400,
                              rejected=[Rejected("result", "node-b", "result/1/1", "not JSON")],
                              flood=HelloFlood(5, 0, ("198.18.0.9",), 1, 1))  # fmt: skip
    cluster = merge.merge_reports([("own.json", own)], gathered)
    ids = [f.id for f in cluster.findings]
    assert ids.count("run.store-rejected") == 1 and ids.count("run.hello-flood") == 1
    assert asdict(gathered.rejected[0])["node"] == "node-b"


def test_a_report_that_breaks_the_merge_is_left_out_and_the_rest_merged(monkeypatch):
    """A result that held to the schema but that the merge cannot take (none is known: the
    merge is made to fail on one here) costs that node's report, not the cluster's."""
    real = merge.merge_reports

    def fragile(reports, gathered=None):
        if any(r.extra.get("report_path") == "/poison.json" for _, r in reports):
            raise KeyError("poison")
        return real(reports, gathered)

    monkeypatch.setattr(merge, "merge_reports", fragile)
    own = Report.from_dict(copy.deepcopy(HEALTHY))
    good = Report.from_dict({**copy.deepcopy(HEALTHY), "report_path": "/good.json"})
    bad = Report.from_dict({**copy.deepcopy(HEALTHY), "report_path": "/poison.json"})
    world = rendezvous.plan_world("run1", "gloo", [NodeEntry(slot=0, name="node-a")], 1)
    gathered = merge.Gathered(master="198.18.0.1", world=world, port=29400)
    cluster = gather.merge_or_leave_out(("/own.json", own), {1: bad, 2: good}, gathered,
                                        {1: "node-b", 2: "node-c"})  # fmt: skip
    (rejected,) = [f for f in cluster.findings if f.id == "run.store-rejected"]
    assert (
        rejected.node == "node-b" and "the merge failed on it: KeyError: 'poison'" in rejected.title
    )
    assert cluster.extra["run"]["nodes_reported"] == 2  # the master's and node-c's


def test_a_merge_that_fails_on_every_report_is_a_bug_not_a_bad_node(monkeypatch):
    """What no value of a report raises (here a RuntimeError from the merge itself, on any
    report beside the master's) is not taken for a node's bad report: leaving the nodes out
    would hide the bug behind rejections."""
    real = merge.merge_reports

    def broken(reports, gathered=None):
        if len(reports) > 1:
            raise RuntimeError("a bug in the merge")
        return real(reports, gathered)

    monkeypatch.setattr(merge, "merge_reports", broken)
    own = Report.from_dict(copy.deepcopy(HEALTHY))
    good = Report.from_dict({**copy.deepcopy(HEALTHY), "report_path": "/good.json"})
    world = rendezvous.plan_world("run1", "gloo", [NodeEntry(slot=0, name="node-a")], 1)
    gathered = merge.Gathered(master="198.18.0.1", world=world, port=29400)
    with pytest.raises(RuntimeError, match="a bug in the merge"):
        gather.merge_or_leave_out(("/own.json", own), {1: good}, gathered, {1: "node-b"})


def test_the_master_keeps_its_store_up_until_every_node_read_the_verdict(store):
    """The store goes down with the master's agent: a node that asked for the verdict a moment
    after it was set found no store, and exited with its own code, not the cluster's."""
    keys = rendezvous.Keys("run1")
    gather.publish(store, keys, 1, Report.from_dict(copy.deepcopy(HEALTHY)), Path("/n1.json"))
    announced = threading.Thread(target=gather.announce_verdict, args=(store, keys, 1))
    announced.start()
    time.sleep(0.3)
    assert announced.is_alive()  # node1 has not read it yet
    assert gather.await_verdict(store, keys, 5) == 1
    announced.join(timeout=1)
    assert not announced.is_alive()
    gather.publish(store, keys, 2, Report.from_dict(copy.deepcopy(HEALTHY)), Path("/n2.json"))
    start = time.monotonic()
    gather.announce_verdict(store, keys, 1, 0.3)  # node2 never reads: the master goes at the bound
    assert 0.3 <= time.monotonic() - start < 1
    # an interrupted node (scancel: the kill follows) will not read it, and is not waited for
    interrupted = rendezvous.Keys("run2")
    gather.publish(store, interrupted, 1, Report.from_dict(copy.deepcopy(HEALTHY)),
                   Path("/n1.json"), reads_verdict=False)  # fmt: skip
    start = time.monotonic()
    gather.announce_verdict(store, interrupted, 1, 5.0)
    assert time.monotonic() - start < 1
