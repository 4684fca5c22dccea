"""The pure parts of the host faults: the lab's namespace wrapper, the master's name on loopback,
the master's address compared across nodes, local ranks in the facts, a lost master."""

from __future__ import annotations

import socket
from pathlib import Path

from checks import get_check, run_checks
from nccldoctor.cluster.agent.gather import master_lost
from nccldoctor.cluster.agent.reach import locate, still_listening
from nccldoctor.cluster.config import CheckConfig
from nccldoctor.cluster.diagnosis.node_run import NodeRun, Place
from nccldoctor.cluster.diagnosis.verdict import hang_section, rank_findings
from nccldoctor.cluster.records import PhaseRow, World, WorldNode
from nccldoctor.facts import NodeFacts
from nccldoctor.facts.network import Interface, Route
from nccldoctor.facts.ranks import RankOutcome
from nccldoctor.facts.run import MasterLost, ReachResult, RunObserved
from nccldoctor.lab.netns import isolated
from nccldoctor.model import Severity
from nccldoctor.probes import collect_node_facts
from nccldoctor.probes.network import probe as network_probe
from tests.ports import free_port

INTERFACES = {"lo": ["127.0.0.1"], "eth0": ["198.18.5.1"]}
DEBIAN_LINE = "127.0.1.1 trainer-01"


def on_master(master="trainer-01", addresses=("127.0.1.1",), lines=(DEBIAN_LINE,), more=()):
    """The master's facts where its name resolves to ``addresses``, the route to it is lo."""
    facts = NodeFacts(node="node0")
    net = facts.network
    net.interfaces = [Interface("lo", kind="loopback", ipv4=["127.0.0.1/8"]),
                      Interface("eth0", ipv4=["198.18.5.1/24"]), *more]  # fmt: skip
    net.master, net.master_addresses = master, list(addresses)
    net.master_hosts_entries = list(lines)
    net.route_to_master = Route(addresses[0] if addresses else "", "lo", "127.0.0.1")
    return facts


def loopback_findings(facts):
    return get_check("master.loopback").run(facts, node=facts.node)


def test_isolated_is_the_command_itself_without_options():
    assert isolated(["python", "-m", "x"], None, None) == ["python", "-m", "x"]


def test_isolated_mounts_shm_and_sets_the_hostname_then_execs():
    argv = isolated(["python", "a b"], "64m", "node0-x")
    assert argv[:6] == ["unshare", "--mount", "--propagation", "private", "--uts", "sh"]
    assert argv[6:8] == [
        "-c",
        'mount -t tmpfs -o size=64m tmpfs /dev/shm && hostname node0-x && exec "$@"',
    ]
    assert argv[8:] == ["sh", "python", "a b"]


def test_master_name_on_loopback_names_the_hosts_line_and_the_fix():
    (f,) = loopback_findings(on_master())
    assert (f.id, f.category, f.severity, f.node) == (
        "master.loopback", "connect_refused_or_timeout", Severity.FAIL, "node0"
    )  # fmt: skip
    assert f.title.startswith("the master trainer-01 resolves to 127.0.1.1 (loopback) on this")
    assert (
        f.evidence[0] == "trainer-01 -> 127.0.1.1 on this node (/etc/hosts: 127.0.1.1 trainer-01)"
    )
    assert f.evidence[1] == "routable addresses here: eth0 198.18.5.1/24"
    assert "replace '127.0.1.1 trainer-01' with:\n198.18.5.1 trainer-01" in f.fix
    assert "--master 198.18.5.1" in f.fix
    eth1 = Interface("eth1", ipv4=["198.18.6.1/24"])
    (f,) = loopback_findings(on_master(lines=(), more=(eth1,)))
    assert "not from /etc/hosts" in f.evidence[0]
    assert "<this node's routable IP>" in f.fix


def test_master_on_loopback_on_purpose_or_routable_is_quiet():
    assert loopback_findings(on_master(addresses=("198.18.5.1",))) == []
    (f,) = loopback_findings(on_master("127.0.0.1", ("127.0.0.1",)))  # not a name: the plain one
    assert f.title == "the master 127.0.0.1 is a loopback address: other nodes cannot reach it"
    single = on_master()
    single.env.variables = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
    assert loopback_findings(single) == []
    assert loopback_findings(on_master(addresses=())) == []


def test_locate_quotes_the_hosts_lines_naming_the_master(tmp_path: Path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "hosts").write_text(f"127.0.0.1 localhost\n{DEBIAN_LINE}  # Debian\n")
    found = locate(network_probe(tmp_path, {}, "127.0.0.1"))
    assert found.hosts_lines == [] and found.loopback
    assert locate(network_probe(tmp_path, {}, "trainer-01")).hosts_lines == [
        f"{DEBIAN_LINE}  # Debian"
    ]


def master_view(name, addresses):
    facts = NodeFacts(node=name)
    facts.network.master, facts.network.master_addresses = "trainer-01", addresses
    return facts


def test_master_address_differs_between_nodes():
    check = get_check("cluster.master-address-differs")
    (f,) = check.run([master_view("node0", ["127.0.1.1"]), master_view("node1", ["198.18.5.1"])])
    assert f.title == "the address of the master trainer-01 differs between nodes (2 values)"
    assert f.evidence == ["127.0.1.1: node0", "198.18.5.1: node1"]
    assert check.run([master_view("a", ["198.18.5.1"]), master_view("b", ["198.18.5.1"])]) == []
    assert check.run([master_view("a", []), master_view("b", ["198.18.5.1"])]) == []
    assert check.run([]) == []


def test_local_ranks_from_the_caller_or_the_launcher(tmp_path: Path):
    assert collect_node_facts(tmp_path, {}, local_ranks=2).local_ranks == 2
    assert collect_node_facts(tmp_path, {"LOCAL_WORLD_SIZE": "4"}).local_ranks == 4
    assert collect_node_facts(tmp_path, {"LOCAL_WORLD_SIZE": "x"}).local_ranks is None
    assert collect_node_facts(tmp_path, {"LOCAL_WORLD_SIZE": "0"}).local_ranks is None


def rank(r, error, state="failed"):
    return RankOutcome.from_dict(
        {"rank": r, "node": "node1", "state": state, "phase_reached": "ddp", "error": error,
         "exit_code": 3, "stuck": None, "last_nccl_lines": [], "log_path": "/x/worker.log",
         "ended_at": 5.0})  # fmt: skip


CLOSED = "ddp: RuntimeError: [pair.cc:553] Connection closed by peer [198.18.5.1]:6025"
LOST = "the master node0 (node rank 0) was lost during the workers phase"


def test_a_lost_master_is_the_cause_when_the_ranks_only_lost_their_peer():
    ranks = [rank(1, CLOSED)]
    assert hang_section(ranks, [LOST])["verdict"] == (
        f"{LOST}; rank 1 lost its peer in ddp (RuntimeError: [pair.cc:553] Connection closed by "
        "peer [198.18.5.1]:6025)."
    )
    (consequence,) = rank_findings(ranks, [LOST])
    assert consequence.severity is Severity.WARN and consequence.title.startswith("rank 1 lost")
    (cause,) = rank_findings(ranks)
    assert cause.severity is Severity.FAIL


def test_a_rank_that_failed_on_its_own_stays_the_cause_beside_a_lost_node():
    ranks = [rank(1, "ddp: ValueError: bad batch")]
    assert hang_section(ranks, [LOST])["verdict"].startswith("rank 1 on node node1 failed in ddp")
    assert [f.severity for f in rank_findings(ranks, [LOST])] == [Severity.FAIL]
    stuck = [rank(1, "ddp: timed out", state="stuck")]
    assert hang_section(stuck, [LOST])["verdict"].startswith("rank 1 on node node1 never finished")


def test_master_lost_names_the_master_and_the_ranks_that_lost_it():
    ranks = [rank(1, CLOSED), rank(2, "ddp: other peer [198.18.5.3]:1")]
    lost = MasterLost("node0", "198.18.5.1", "connect to 198.18.5.1:29400: Connection refused",
                      "workers", {r.rank: r.error for r in ranks})  # fmt: skip
    (f,) = run_checks("run", RunObserved("node1", 29400, master_lost=lost), node="node1")
    assert (f.id, f.category, f.severity, f.node) == (
        "run.master-lost", "remote_peer_closed", Severity.FAIL, "node0"
    )  # fmt: skip
    assert f.title.startswith("the master node0 (198.18.5.1) was lost during node node1's workers")
    assert f.evidence == [
        "store: connect to 198.18.5.1:29400: Connection refused",
        "rank 1: ddp: RuntimeError: [pair.cc:553] Connection closed by peer [198.18.5.1]:6025",
    ]
    assert "nccldoctor report merge" in f.fix


def test_still_listening_answers_none_or_the_error():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert still_listening("127.0.0.1", port) is None
    error = still_listening("127.0.0.1", port)
    assert error == f"connect to 127.0.0.1:{port}: Connection refused"


def test_a_node_that_outlives_the_master_says_so_before_handing_over_its_report():
    with socket.socket() as server:  # a port nobody listens on once closed
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
    world = World("r", "gloo", [WorldNode(0, 0, "head", "127.0.0.1", "127.0.0.1", 1, 0),
                                WorldNode(1, 1, "node1", "127.0.0.2", "127.0.0.2", 1, 1)],
                  expected=2)  # fmt: skip
    run = NodeRun("node1", phases=[PhaseRow("node1", None, "workers")], place=Place(world, 1))
    run.observed.reach = ReachResult("head-name", addresses=["127.0.0.1"])
    assert master_lost(run, CheckConfig("head-name", port=port)) is True
    (f,) = run_checks("run", run.observed, node=run.node)
    assert f.id == "run.master-lost"
    assert f.node == "head" and "during node node1's workers phase" in f.title
    assert run.lost == ["the master head (node rank 0) was lost during the workers phase"]
    assert master_lost(NodeRun("n"), CheckConfig("head-name", port=port)) is False  # no world


def test_a_master_whose_store_answers_is_not_lost():
    from nccldoctor.meet import connect_store, host_store

    port = free_port()
    server = host_store(port, 10.0)
    client = connect_store("127.0.0.1", port, 10.0)
    world = World("r", "gloo", [WorldNode(0, 0, "head", "127.0.0.1", "127.0.0.1", 1, 0),
                                WorldNode(1, 1, "node1", "127.0.0.2", "127.0.0.2", 1, 1)],
                  expected=2)  # fmt: skip
    run = NodeRun("node1", phases=[PhaseRow("node1", None, "workers")], place=Place(world, 1))
    run.observed.reach = ReachResult("head-name", addresses=["127.0.0.1"])
    assert master_lost(run, CheckConfig("head-name", port=port), client) is False
    assert client.timeout.total_seconds() == 10.0  # the ping's own deadline is put back
    assert run.observed.master_lost is None and server is not None
