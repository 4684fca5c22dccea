"""`nccldoctor check` across network namespaces: real processes, real sockets, the gloo backend.

Each scenario asserts the verdict, the category, the node/rank/phase named, the exit codes, the
reports on every surviving node, and that the run ended within its deadline.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.netns, pytest.mark.slow]

PORT = "29400"
WAIT = 20.0  # --timeout: every wait of the run
# The budgets short enough for a shared 2-core machine, long enough for its torch imports.
# The bandwidth sweep and each node's TCP turn only need to happen (a row, a rate), not to be
# precise. The isolation rounds are tested on their own; the faults of these tests are not to be
# paired off after them (--isolate auto runs rounds when an all-node run fails).
FAST = ["--timeout", str(WAIT), "--phase-timeout", "bandwidth_budget=0.5",
        "--phase-timeout", "tcp_probe=0.5", "--phase-timeout", "exit_barrier=25",
        "--phase-timeout", "settle=2", "--isolate", "never"]  # fmt: skip
# Start-up (torch imports) plus the phases a healthy run walks through, on a loaded machine.
HEALTHY_DEADLINE = 150.0
# The phase a fault stalls ends at this deadline rather than WAIT: long enough for its healthy
# part (the small sizes, the store connect, the other nodes' arrival) on a loaded machine, short
# for the wall time. Start-up budgets stay as they are.
STALL_S = 8
# A phase that waits in vain with nothing healthy inside it (a node that never joins, a port that
# drops every packet, the results of a killed node) ends at this deadline: it only has to expire.
EXPIRE_S = 4
# init stalls until its deadline: gloo's own timeout (the collective one) ends the waiting rank's
# init first, as under --timeout alone, so that rank fails where it would have, not stalls
STALLED_INIT = ["--phase-timeout", f"init={STALL_S}", "--phase-timeout", f"collective={STALL_S}"]
# The collective budget is gloo's timeout in init too: two ranks' init took under a second on
# this loaded machine, so a stall of a two-rank run is waited out sooner than STALL_S.
TWO_RANK_STALL_S = 5
TWO_RANK_STALLED_INIT = ["--phase-timeout", f"init={TWO_RANK_STALL_S}",
                         "--phase-timeout", f"collective={TWO_RANK_STALL_S}"]  # fmt: skip


def start_all(lab, nodes, extra=(), env_for=None, count=None):
    hosts = lab.hosts if count is None else lab.hosts[:count]
    master = lab.hosts[0].address
    runs = []
    for host in hosts:
        args = ["--master", master, "--nodes", str(nodes), "--port", PORT, *FAST, *extra]
        runs.append(
            lab.start(host, args, out=lab_out(lab, host), env=(env_for or {}).get(host.name))
        )
    return runs


def lab_out(lab, host):
    return lab.reports / host.name


def wait_all_ok(lab, runs, deadline=HEALTHY_DEADLINE):
    """Until every run ends: each exits 0 within ``deadline`` and leaves its node report."""
    lab.wait(runs, deadline)
    for run in runs:
        assert run.rc == 0, (run.host.name, run.stderr[-3000:])
        assert run.elapsed < deadline
    assert_reports(runs)


def assert_reports(runs, reach=WAIT):
    """Every run left its node report, with the reach timeout it was given."""
    for run in runs:
        doc = run.node_report()
        assert doc["kind"] == "check"
        assert doc["timeouts"]["reach"] == reach


def names(findings, **where):
    return [f for f in findings if all(f.get(k) == v for k, v in where.items())]


def test_healthy_two_nodes(lab):
    lab = lab(2)
    runs = start_all(lab, 2)
    wait_all_ok(lab, runs)
    cluster = runs[0].cluster_report()
    assert cluster["verdict"] in ("healthy", "warnings")  # a CPU machine has no GPU: a warning
    assert cluster["exit_code"] == 0
    assert cluster["hang"] is None
    assert [r["state"] for r in cluster["ranks"]] == ["ok", "ok"]
    assert cluster["cluster"]["world_size"] == 2
    assert {n["name"] for n in cluster["cluster"]["nodes"]} == {"node0", "node1"}
    assert cluster["bandwidth"]["rows"], "the bandwidth sweep left no table"
    assert cluster["bandwidth"]["tcp_wire_Gbitps"]["node1"] > 0
    assert cluster["mnist"]["params_identical"] is True
    assert "Check of 2 ranks on node0, node1, backend gloo." in runs[0].stdout  # the headline


def by_category(report, category):
    return [f for f in report["findings"] if f["category"] == category]


def test_wrong_socket_ifname_on_one_node(lab):
    lab = lab(2)
    wrong = {"NCCL_SOCKET_IFNAME": "ib9", "GLOO_SOCKET_IFNAME": "ib9"}
    runs = start_all(lab, 2, extra=STALLED_INIT, env_for={"node1": wrong})
    lab.wait(runs, HEALTHY_DEADLINE + WAIT)
    assert [run.rc for run in runs] == [1, 1], runs[1].stderr[-3000:]
    assert_reports(runs)
    cluster = runs[0].cluster_report()
    found = by_category(cluster, "interface_selection")
    assert {f["node"] for f in found if f["severity"] == "fail"} == {"node1"}
    assert any("GLOO_SOCKET_IFNAME=ib9" in f["title"] and "eth0" in f["fix"] for f in found)
    assert cluster["hang"]["phase"] == "init"
    # the missing interface explains the init timeout: it leads, the rank's end follows
    assert cluster["hang"]["cause"] == {"check": "socket.ifname-missing",
                                        "category": "interface_selection"}  # fmt: skip
    assert cluster["hang"]["verdict"].startswith(
        "on node node1, NCCL_SOCKET_IFNAME=ib9 matches no interface: NCCL init will fail "
        "(socket.ifname-missing): rank 1 on node node1 failed in init_process_group"
    )


def test_bridge_that_nccl_would_pick(lab):
    pytest.importorskip("nccldoctor.probes.libnccl")
    lab = lab(2)
    node1 = lab.hosts[1]
    node1.exec("ip", "link", "add", "br-0ca1", "type", "bridge")
    node1.exec("ip", "addr", "add", f"198.19.{lab.subnet}.1/24", "dev", "br-0ca1")
    node1.exec("ip", "link", "set", "br-0ca1", "up")
    runs = start_all(lab, 2)
    lab.wait(runs, HEALTHY_DEADLINE)
    assert [run.rc for run in runs] == [1, 1], runs[1].stderr[-3000:]
    cluster = runs[0].cluster_report()
    found = [f for f in by_category(cluster, "interface_selection") if f["node"] == "node1"]
    # one finding: libnccl's measured pick superseded preflight's prediction of it
    (pick,) = [f for f in found if f["id"] == "socket.default-pick-differs"]
    assert "br-0ca1" in pick["title"] and "eth0" in pick["title"]
    assert pick["severity"] == "fail" and "NCCL_SOCKET_IFNAME==eth0" in pick["fix"]
    assert pick["evidence"][0].startswith("measured: libnccl's ncclGetUniqueId")
    assert [r["state"] for r in cluster["ranks"]] == ["ok", "ok"]  # pinned to eth0, it works


def test_master_port_dropped_by_firewall(lab):
    lab = lab(2)
    master = lab.hosts[0]
    master.exec("iptables", "-A", "INPUT", "-i", "eth0", "-p", "tcp", "--dport", PORT, "-j", "DROP")
    # node1's reach and the master's rendezvous wait for each other in vain
    runs = start_all(lab, 2, extra=["--phase-timeout", f"reach={EXPIRE_S}",
                                    "--phase-timeout", f"rendezvous={EXPIRE_S}"])  # fmt: skip
    lab.wait(runs, 3 * WAIT + 60)
    assert [run.rc for run in runs] == [3, 3]
    assert_reports(runs, reach=EXPIRE_S)
    node = runs[1].node_report()
    assert node["findings"][-1]["id"] == "run.master-port-blocked"
    assert by_category(node, "firewall_or_port")[0]["node"] == "node1"
    assert node["phases"][1]["phase"] == "reach" and node["phases"][1]["status"] == "fail"
    cluster = runs[0].cluster_report()
    blocked = [f for f in by_category(cluster, "firewall_or_port") if f["node"] == "node1"]
    assert blocked and PORT in blocked[0]["title"]
    assert runs[1].elapsed < WAIT + 60


def test_three_nodes_expected_two_started(lab):
    lab = lab(3)
    runs = start_all(lab, 3, extra=["--phase-timeout", f"rendezvous={EXPIRE_S}"], count=2)
    lab.wait(runs, 2 * WAIT + 60)
    assert [run.rc for run in runs] == [3, 3]
    assert_reports(runs)
    cluster = runs[0].cluster_report()
    assert cluster["cluster"]["missing_nodes"] == ["node rank 2"]
    missing = [f for f in cluster["findings"] if f["id"] == "run.nodes-missing"]
    assert missing and "only 2 of 3 nodes joined" in missing[0]["title"]
    assert cluster["completed"] is False


def test_node_killed_mid_run(lab):
    import time

    lab = lab(2)
    # the master's exit barrier waits in vain for the killed node's results
    runs = start_all(lab, 2, extra=["--phase-timeout", f"exit_barrier={EXPIRE_S}"],
                     env_for={"node1": {"NCCLDOCTOR_FAULT": "hang:ddp:rank=1"}})  # fmt: skip
    events = lab_out(lab, lab.hosts[1]) / "node1" / "latest" / "rank1" / "events.jsonl"
    deadline = time.monotonic() + HEALTHY_DEADLINE
    while time.monotonic() < deadline:
        if events.exists() and '"phase": "ddp", "status": "start"' in events.read_text():
            break
        time.sleep(0.3)
    else:
        pytest.fail("rank 1 never reached ddp")
    lab.kill_host(lab.hosts[1])
    killed_at = time.monotonic()
    lab.wait(runs, WAIT + 60)
    assert runs[0].rc == 1, runs[0].stderr[-3000:]
    assert runs[0].ended - killed_at < WAIT + 25 + 15  # collective timeout + exit barrier
    cluster = runs[0].cluster_report()
    lost = [f for f in cluster["findings"] if f["id"] == "run.node-lost"]
    assert lost and lost[0]["node"] == "node1" and lost[0]["category"] == "remote_peer_closed"
    assert "workers" in lost[0]["title"]
    assert "node node1 (node rank 1) stopped reporting" in cluster["hang"]["verdict"]
    assert runs[0].node_report()["ranks"][0]["phase_reached"] == "ddp"


@pytest.mark.parametrize("kind", ["hang", "crash"])
def test_worker_fault_in_allreduce(lab, kind):
    lab = lab(2)
    fault = {"NCCLDOCTOR_FAULT": f"{kind}:allreduce_correctness:rank=1"}
    runs = start_all(lab, 2, extra=["--phase-timeout", f"collective={TWO_RANK_STALL_S}"],
                     env_for={"node1": fault})  # fmt: skip
    lab.wait(runs, HEALTHY_DEADLINE + WAIT)
    assert [run.rc for run in runs] == [1, 1], runs[0].stderr[-3000:]
    assert_reports(runs)
    cluster = runs[0].cluster_report()
    hang = cluster["hang"]
    assert hang["phase"] == "allreduce_correctness"
    first = next(f for f in cluster["findings"] if f["id"].startswith("run.rank-"))
    assert (first["node"], first["rank"], first["severity"]) == ("node1", 1, "fail")
    rank1 = next(r for r in cluster["ranks"] if r["rank"] == 1)
    if kind == "hang":
        assert hang["stuck"][0] == {"node": "node1", "rank": 1, "phase": "allreduce_correctness",
                                    "last_nccl_line": None}  # fmt: skip
        assert hang["verdict"].startswith(
            "rank 1 on node node1 never finished allreduce_correctness"
        )
        assert first["category"] == "collective_timeout_hang"
        assert "hang_forever" in (rank1["stacks"] or "")
        assert any("main thread stopped at" in e and "hang_forever" in e for e in first["evidence"])
    else:
        assert hang["stuck"] == []
        assert hang["verdict"].startswith("rank 1 on node node1 failed in allreduce_correctness")
        assert "injected crash" in rank1["error"]
    assert "; rank 0 " in hang["verdict"]  # the consequence, after the cause


def test_wrong_token(lab):
    lab = lab(2)
    # the master's rendezvous waits in vain for the node it refused
    runs = start_all(lab, 2, extra=["--phase-timeout", f"rendezvous={EXPIRE_S}"],
                     env_for={"node0": {"NCCLDOCTOR_TOKEN": "tok-A7f3q"},
                              "node1": {"NCCLDOCTOR_TOKEN": "tok-B9k2z"}})  # fmt: skip
    lab.wait(runs, 2 * WAIT + 60)
    assert [run.rc for run in runs] == [3, 3]
    assert_reports(runs)
    node = runs[1].node_report()
    assert [f["id"] for f in node["findings"] if f["severity"] == "fail"] == ["run.token-refused"]
    cluster = runs[0].cluster_report()
    refused = [f for f in cluster["findings"] if f["id"] == "run.node-refused"]
    assert refused and refused[0]["node"] == "node1"
    for run in runs:
        text = (run.run_dir / f"check-{run.host.name}.json").read_text()
        assert "tok-A7f3q" not in text and "tok-B9k2z" not in text


def test_unresolvable_master(lab):
    lab = lab(1)
    run = lab.start(lab.hosts[0], ["--master", "no-such-master.invalid", "--nodes", "2",
                                   "--port", PORT, *FAST], out=lab_out(lab, lab.hosts[0]))  # fmt: skip
    lab.wait([run], 60)
    assert run.rc == 3
    node = run.node_report()
    # one failure, one id
    (found,) = [f for f in node["findings"] if "does not resolve" in f["title"]]
    assert (found["id"], found["category"], found["node"]) == (
        "master.unresolvable", "env_config", "node0"
    )  # fmt: skip
    assert node["phases"][1] == {**node["phases"][1], "phase": "reach", "status": "fail"}
    assert run.elapsed < 40
