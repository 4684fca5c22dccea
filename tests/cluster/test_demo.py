"""`nccldoctor demo`: the whole check on this machine, in namespaces (root) and on loopback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nccldoctor.cluster.timeouts import timeouts_from
from nccldoctor.lab.demo import run_demo
from tests.cluster.netns import netns_available

pytestmark = [pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
ARGS = ["--backend", "gloo", "--timeout", "20", "--phase-timeout", "bandwidth_budget=2"]


@pytest.mark.netns
def test_demo_in_namespaces_prints_the_verdict_and_cleans_up(tmp_path):
    if not netns_available():
        pytest.skip("needs root and ip netns")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "nccldoctor", "demo", "--nodes", "2", "--timeout", "20",
         "--out", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=400,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Check of 2 ranks on node0, node1, backend gloo." in proc.stdout  # the headline
    assert f"Report: {tmp_path}/node0/check-cluster.json (netns" in proc.stdout
    assert proc.stdout.splitlines()[-1] == f"Page: {tmp_path}/node0/check-cluster.html"
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
    report = result.report
    assert report.extra["cluster"]["world_size"] == 2
    assert [r["state"] for r in report.extra["ranks"]] == ["ok", "ok"]
    # A loopback master is rightly a failure for real nodes; nothing else may fail here.
    failed = {f.id for f in report.findings if f.severity.value == "fail"}
    assert failed <= {"master.loopback"} and result.exit_code == (1 if failed else 0)
    assert (tmp_path / "node1" / "check-node1.json").is_file()
    # every node's check wrote its page beside its JSON: the master the cluster's, node1 its own
    assert "check report" in (tmp_path / "node0" / "check-cluster.html").read_text()
    assert "check report" in (tmp_path / "node1" / "check-node1.html").read_text()
