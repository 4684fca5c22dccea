"""The setup nccldoctor exists for, built for real: one Docker container per host on Docker's
default bridge, the rendezvous ports published on the master's host (NetLab docker="bridge",
docs/docker.md#lab), each container started with nothing but ``--master <that host>``; and the
same containers on the host's network, the fix."""

from __future__ import annotations

import json

import pytest

from tests.cluster.test_check_netns import (
    EXPIRE_S,
    FAST,
    PORT,
    STALL_S,
    TWO_RANK_STALL_S,
    TWO_RANK_STALLED_INIT,
)

pytestmark = [pytest.mark.netns, pytest.mark.slow]

PUBLISHED = (int(PORT), int(PORT) + 1)
# Behind the NAT init stalls until its deadline; the run must end with its answer 10 s later.
ANSWER_WITHIN = TWO_RANK_STALL_S + 10


def _start(lab, extra_for=None, env=None, extra=()):
    master = lab.hosts[0].address
    return [
        lab.start(h, ["--master", master, "--nodes", "2", "--port", PORT, *FAST, *extra,
                      *(extra_for or {}).get(h.name, ())], out=lab.reports / h.name, env=env)
        for h in lab.hosts
    ]  # fmt: skip


def _ids(doc, severity="fail"):
    return {f["id"] for f in doc["findings"] if f["severity"] == severity}


def test_docker_bridge_the_master_finds_itself_and_the_verdict_names_nat_first(lab):
    lab = lab(2, docker="bridge", publish=PUBLISHED)
    runs = _start(lab, extra=TWO_RANK_STALLED_INIT)
    lab.wait(runs, 120)
    master, node = runs
    cluster, own = master.cluster_report(), node.node_report()
    assert cluster["run"]["master"] is True and own["run"]["node_rank"] == 1
    for doc, check, who in (
        (cluster, "cluster.advertised-address-shared", "both nodes advertise 198.18.17.2"),
        (own, "container.bridge-network", "node node1 advertises 198.18.17.2"),
    ):
        hang = doc["hang"]
        assert hang["cause"] == {"check": check, "category": "docker_network"}, hang
        first, cited, _ = hang["verdict"].partition(f" ({check})")  # the cause's sentence
        assert cited and first.startswith(f"{who} from behind Docker NAT") and ";" not in first
    assert "--network host --ipc host" in next(
        f["fix"] for f in cluster["findings"] if f["id"] == "cluster.advertised-address-shared"
    )
    for run in runs:
        assert run.rc == 1 and "never started" not in run.stdout
        assert "frame #" not in run.stderr and "Exception raised from" not in run.stderr
    # from the agent's first phase to the cluster report on disk (the interpreter's own start,
    # a second or two on this shared machine, is before it)
    started = min(p["started"] for p in cluster["phases"] if p["phase"] == "preflight")
    answered = (master.run_dir / "check-cluster.json").stat().st_mtime - started
    assert answered < ANSWER_WITHIN, answered


def test_only_the_store_port_published_each_node_says_it_cannot_tell(lab):
    """`-p 29400:29400` alone: nccldoctor's own port is not forwarded, so no node hears its
    hello; each says so, with --node-rank 0 as the remedy, never "never started"."""
    lab = lab(2, docker="bridge", publish=PUBLISHED[:1])
    runs = _start(lab, extra=["--phase-timeout", f"reach={EXPIRE_S}"])  # reach waits in vain
    lab.wait(runs, 90)
    for run in runs:
        doc = run.node_report()
        assert run.rc == 3 and "run.master-unknown" in _ids(doc)  # 3: the run could not go on
        assert "run.master-refused" not in _ids(doc)
        (finding,) = [f for f in doc["findings"] if f["id"] == "run.master-unknown"]
        assert "--node-rank 0" in finding["fix"]
        assert f"-p {PUBLISHED[1]}:{PUBLISHED[1]}" in finding["fix"]


def test_node_rank_0_twice_the_second_master_says_so(lab):
    lab = lab(2, docker="bridge", publish=PUBLISHED)
    # the first master's rendezvous waits in vain for the node that refused to join
    runs = _start(lab, {h.name: ("--node-rank", "0") for h in lab.hosts},
                  extra=["--phase-timeout", f"rendezvous={STALL_S}"])  # fmt: skip
    lab.wait(runs, 120)
    master, second = runs
    assert "run.second-master" in _ids(second.node_report())
    assert "run.second-master" not in _ids(master.node_report())
    assert master.rc in (1, 3) and second.rc == 3


def test_docker_host_network_is_healthy_and_one_hostname_is_told_apart(lab):
    """The fix: the same containers on the host's network, healthy. Each started with
    `docker run --hostname trainer`, no node name given: each node is named by its hostname,
    and the world adds the node rank to the shared one."""
    lab = lab(2, docker="host", hostname="trainer")
    runs = _start(lab, env={"NCCLDOCTOR_NODE_NAME": ""})  # the hostname names the node
    lab.wait(runs, 150)
    for run in runs:
        assert run.rc == 0, (run.host.name, run.stdout[-3000:])
    # a run's folder is named at its start, by the hostname; the report after the world's name
    doc = json.loads((runs[0].out / "trainer" / "latest" / "check-cluster.json").read_text())
    assert doc["verdict"] == "healthy" and not _ids(doc, "warn")
    assert sorted(n["node"] for n in doc["nodes"]) == ["trainer#0", "trainer#1"]
    assert sorted(r["node"] for r in doc["ranks"]) == ["trainer#0", "trainer#1"]
    assert (runs[1].out / "trainer" / "latest" / "check-trainer#1.json").is_file()
    (node0,) = [n for n in doc["nodes"] if n["node"] == "trainer#0"]
    assert node0["container"]["runtime"] == "docker"
    assert node0["container"]["network_mode"] == "host"
    lan = next(i for i in node0["network"]["interfaces"] if i["name"] == "eth0")
    assert lan["ipv4"] == [f"{lab.hosts[0].address}/24"]
    assert f"eth0 {lab.hosts[0].address}" in runs[0].stdout
