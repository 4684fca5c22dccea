"""The run rules over a node's observations: each fires on its own record, with today's text."""

from __future__ import annotations

from checks import run_checks
from nccldoctor.facts.run import HelloReply, ReachResult, RunObserved
from nccldoctor.model import Severity


def judged(**observed: object) -> list[tuple[str, Severity, str]]:
    found = run_checks("run", RunObserved("node1", 29400, **observed), node="node1")
    assert all(f.node == "node1" for f in found)
    return [(f.id, f.severity, f.title) for f in found]


def test_nothing_observed_is_nothing_found():
    assert judged() == []


def test_a_listener_that_cannot_bind():
    assert judged(listen_error="[Errno 98] Address already in use") == [(
        "run.port-in-use", Severity.FAIL,
        "the master cannot listen on port 29400 or 29401: [Errno 98] Address already in use",
    )]  # fmt: skip


def test_a_node_after_the_join_window():
    assert judged(late_for=["node0", "node2"]) == [
        (
            "run.node-late",
            Severity.FAIL,
            "node node1 arrived after the master closed the join window",
        )
    ]


def test_the_agents_own_crash():
    assert judged(crash="KeyError: 'x'") == [
        ("run.crashed", Severity.FAIL, "nccldoctor itself failed: KeyError: 'x'")
    ]


def test_the_hello_refused_or_unanswered():
    refused = HelloReply(False, error="bad token", refused=True)
    assert [i for i, *_ in judged(hello=refused, gate="198.18.0.1:29401")] == ["run.token-refused"]
    connected = ReachResult("m", ["198.18.0.1"], connected=True, attempts=1)
    silent = HelloReply(False, error="timed out")
    assert judged(hello=silent, gate="198.18.0.1:29401", reach=connected) == [(
        "run.gate-unreachable", Severity.FAIL,
        "node node1 reached the store port but not nccldoctor's port 198.18.0.1:29401",
    )]  # fmt: skip
    # the store port did not answer either: that failure is reach's alone
    unanswered = ReachResult("m", ["198.18.0.1"], attempts=3, timed_out=3, error="timed out")
    assert [i for i, *_ in judged(hello=silent, reach=unanswered)] == ["run.master-port-blocked"]


def test_a_run_that_stopped():
    assert judged(aborted="rendezvous: timed out") == [
        ("run.incomplete", Severity.FAIL, "the run stopped: rendezvous: timed out")
    ]
