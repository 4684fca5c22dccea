"""The node run holds what each phase returned: the facts as the run measured them and the
findings under the node's name in the world, without touching the records the phases returned."""

from __future__ import annotations

from nccldoctor.cluster.diagnosis.node_run import NodeRun, Place, Preflight, Role, TcpMeasured
from nccldoctor.cluster.records import PhaseRow, World, WorldNode
from nccldoctor.facts import NetworkFacts, NodeFacts
from nccldoctor.facts.env import EnvFacts, IfList
from nccldoctor.facts.run import HelloReply, NcclBootstrap, PortProbe
from nccldoctor.model import Finding, Severity


def preflight(env: EnvFacts | None = None) -> Preflight:
    network = NetworkFacts(nccl_default_pick="docker0", nccl_pick="docker0")
    facts = NodeFacts(node="trainer", network=network, env=env or EnvFacts())
    findings = (
        Finding("socket.pick-virtual", "interface_selection", Severity.WARN, "NCCL picks docker0", area="network",
                node="trainer"),
        Finding("master.unreachable", "connect_refused_or_timeout", Severity.FAIL, "no route", area="network",
                node="head"),
    )  # fmt: skip
    return Preflight(facts, findings, {"network": "1 warning"}, {}, cuda=False)


def test_a_phases_result_is_held_and_read_through_the_run():
    run = NodeRun("trainer", port=29400)
    assert (run.facts, run.findings, run.world, run.node_rank, run.is_master, run.run_id) == (
        None, [], None, None, False, "")  # fmt: skip
    world = World("r1", "gloo", [WorldNode(0, 0, "head", "198.18.0.1", "198.18.0.1", 1, 0),
                                 WorldNode(1, 1, "trainer", "198.18.0.2", "198.18.0.2", 1, 1)],
                  expected=2)  # fmt: skip
    probe = PortProbe("198.18.0.1:40001", True, "", "198.18.0.2:40002", False, "timed out", 3.0)
    nccl = NcclBootstrap("libnccl.so.2", 0, None, ("eth0", "198.18.0.2"))
    for result in (preflight(), Role("r1", master=False), Place(world, 1), nccl, TcpMeasured(9.4),
                   probe, None):  # fmt: skip
        run.hold(result)
    assert (run.run_id, run.is_master, run.world, run.node_rank) == ("r1", False, world, 1)
    assert run.tcp == TcpMeasured(9.4) and run.preflight and run.preflight.cuda is False
    # what the run rules judge goes where they read it
    assert run.observed.port_probe is probe and run.observed.bootstrap is nccl


def test_the_facts_take_what_the_run_measured_in_place_of_preflights_predictions():
    run = NodeRun("trainer")
    run.hold(preflight())
    run.observed.hello = HelloReply(True, seen="198.18.7.7")
    run.observed.bootstrap = NcclBootstrap("libnccl.so.2", 0, None, ("eth0", "198.18.0.2"))
    network = run.facts.network
    assert network.seen_by_master == "198.18.7.7"
    assert (network.nccl_pick, network.nccl_default_pick, network.nccl_pick_measured) == (
        "eth0", "eth0", True)  # fmt: skip
    # the record preflight returned is as it was
    assert run.preflight.facts.network.nccl_pick == "docker0"
    assert run.preflight.facts.network.seen_by_master is None


def test_a_forced_interface_leaves_nccls_own_order_unknown():
    forced = EnvFacts(socket_ifname=IfList("eth0", entries=["eth0"]))
    run = NodeRun("trainer")
    run.hold(preflight(forced))
    run.observed.bootstrap = NcclBootstrap("libnccl.so.2", 0, None, ("eth0", "198.18.0.2"))
    assert (run.facts.network.nccl_pick, run.facts.network.nccl_default_pick) == (
        "eth0", "docker0")  # fmt: skip


def test_a_renamed_node_has_its_own_facts_findings_and_rows_renamed_and_no_one_elses():
    run = NodeRun("trainer", phases=[PhaseRow("trainer", None, "rendezvous")])
    run.hold(preflight())
    run.rename("trainer-1")
    assert run.facts.node == run.observed.node == run.phases[0].node == "trainer-1"
    assert [f.node for f in run.findings] == ["trainer-1", "head"]
    assert [f.node for f in run.preflight.findings] == ["trainer", "head"]
