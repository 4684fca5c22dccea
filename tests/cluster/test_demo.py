"""`nccldoctor demo`: the whole check on this machine, in namespaces (root) and on loopback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nccldoctor.cluster.timeouts import timeouts_from
from nccldoctor.lab.demo import run_demo
from tests.cluster.netns import netns_available
from tests.cluster.test_check_netns import TWO_RANK_STALL_S

pytestmark = [pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
# The bandwidth sweep and the TCP turn only need to happen (a row, a rate), not to be precise.
SHORT = {"bandwidth_budget": "0.5", "tcp_probe": "0.5"}
ARGS = ["--backend", "gloo", "--timeout", "20",
        *(f"--phase-timeout={name}={s}" for name, s in SHORT.items())]  # fmt: skip


@pytest.mark.netns
def test_demo_in_namespaces_prints_the_verdict_and_cleans_up(tmp_path):
    if not netns_available():
        pytest.skip("needs root and ip netns")
    # the demo has no --phase-timeout: its nodes' checks read the budgets from the environment
    short = {f"NCCLDOCTOR_TIMEOUT_{name.upper()}": s for name, s in SHORT.items()}
    env = {**os.environ, "PYTHONPATH": str(REPO), **short}
    proc = subprocess.run(
        [sys.executable, "-m", "nccldoctor", "demo", "--nodes", "2", "--timeout", "20",
         "--out", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=400,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Check of 2 ranks on node0, node1, backend gloo." in proc.stdout  # the headline
    run = re.search(rf"^Report: {tmp_path}/node0/([^/]+)/check-cluster.json \(netns; each "
                    rf"node's output in {tmp_path}/node\*/\1.log\)$", proc.stdout, re.M)  # fmt: skip
    assert run, proc.stdout[-2000:]
    assert proc.stdout.splitlines()[-1] == f"Page: {tmp_path}/node0/{run[1]}/check-cluster.html"
    assert os.readlink(tmp_path / "node0" / "latest") == run[1]
    tag = re.search(r"on bridge (ca[0-9a-f]{6})br", proc.stderr).group(1)
    assert "network namespaces removed" in proc.stderr
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert tag not in namespaces
    assert tag not in subprocess.run(["ip", "link"], capture_output=True, text=True).stdout


def test_demo_on_loopback(tmp_path):
    messages: list[str] = []
    result = run_demo(2, tmp_path, ARGS, timeouts_from(20), {**os.environ, "PYTHONPATH": str(REPO)},
                      progress=messages.append, use_netns=False)  # fmt: skip
    assert result.mode == "loopback", messages
    # told before the verdict why a demo on loopback ends with master.loopback
    assert messages[0].startswith("--loopback: ") and "(master.loopback)" in messages[0], messages
    report = result.report
    assert report.extra["cluster"]["world_size"] == 2
    assert [r["state"] for r in report.extra["ranks"]] == ["ok", "ok"]
    # A loopback master is rightly a failure for real nodes; nothing else may fail here.
    failed = {f.id for f in report.findings if f.severity.value == "fail"}
    assert failed <= {"master.loopback"} and result.exit_code == (1 if failed else 0)
    run = result.report_path.parent.name  # every node's folder of the run has the demo's name
    assert result.report_path == tmp_path / "node0" / run / "check-cluster.json"
    assert (tmp_path / "node1" / run / "check-node1.json").is_file()
    # every node's check wrote its page beside its JSON: the master the cluster's, node1 its own
    assert "check report" in (tmp_path / "node0" / run / "check-cluster.html").read_text()
    assert "check report" in (tmp_path / "node1" / run / "check-node1.html").read_text()
    assert result.node_logs == [tmp_path / f"node{i}" / f"{run}.log" for i in (0, 1)]


@pytest.mark.netns
def test_the_users_loop_docker_bridge_then_host_network_in_one_folder(tmp_path):
    """As a user works: the bridge demo, read the fix, rerun with host networking
    in the same folder. The rerun is healthy and holds nothing of the first run (it once
    reported the first run's hang beside its own 0 exit codes)."""
    if not netns_available():
        pytest.skip("needs root and ip netns")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # behind the NAT init stalls until its deadline
    stalled = [f"{name}={TWO_RANK_STALL_S}" for name in ("init", "collective")]
    args = [*ARGS, *(f"--phase-timeout={item}" for item in stalled)]
    bridge = run_demo(2, tmp_path, args, timeouts_from(20, stalled), env, scenario="docker-bridge")
    assert bridge.exit_code == 1 and bridge.report is not None
    assert bridge.report.extra["hang"]["cause"]["category"] == "docker_network"
    # the first line a person reads names the cause and its fix, in one glance
    line = bridge.report.to_dict()["headline"]["line"]
    assert "bridge network" in line and line.endswith("→ run the containers with --network host")
    assert len(line) <= 160 and "/__w/" not in line
    host = run_demo(2, tmp_path, ARGS, timeouts_from(20), env, scenario="docker-host")
    assert host.exit_code == 0 and host.report is not None, host.node_logs
    doc = host.report.to_dict()
    assert doc["verdict"] == "healthy" and doc["hang"] is None
    assert [(r["state"], r["error"]) for r in doc["ranks"]] == [("ok", None)] * 2
    first, second = bridge.report_path.parent, host.report_path.parent
    assert first.parent == second.parent and first != second
    assert first.name not in json.dumps(doc)
    assert not [f["id"] for f in doc["findings"] if f["severity"] in ("warn", "fail")]
    for node in ("node0", "node1"):  # each node's rerun read only its own rank's events
        (rank,) = (tmp_path / node / second.name).glob("rank*")
        events = (rank / "events.jsonl").read_text()
        assert events.count('"phase": "init", "status": "start"') == 1
        assert os.readlink(tmp_path / node / "latest") == second.name
