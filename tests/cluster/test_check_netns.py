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
FAST = ["--timeout", str(WAIT), "--phase-timeout", "bandwidth_budget=2",
        "--phase-timeout", "exit_barrier=25", "--phase-timeout", "settle=2"]  # fmt: skip
# Start-up (torch imports) plus the phases a healthy run walks through, on a loaded machine.
HEALTHY_DEADLINE = 150.0


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
    import tempfile
    from pathlib import Path

    base = Path(tempfile.gettempdir()) / f"{lab.tag}-reports"
    return base / host.name


def assert_reports(runs):
    for run in runs:
        doc = run.node_report()
        assert doc["kind"] == "check"
        assert doc["timeouts"]["reach"] == WAIT


def names(findings, **where):
    return [f for f in findings if all(f.get(k) == v for k, v in where.items())]


def test_healthy_two_nodes(lab):
    lab = lab(2)
    runs = start_all(lab, 2)
    lab.wait(runs, HEALTHY_DEADLINE)
    for run in runs:
        assert run.rc == 0, run.stderr[-3000:]
        assert run.elapsed < HEALTHY_DEADLINE
    assert_reports(runs)
    cluster = runs[0].cluster_report()
    assert cluster["verdict"] == "healthy"
    assert cluster["exit_code"] == 0
    assert cluster["hang"] is None
    assert [r["state"] for r in cluster["ranks"]] == ["ok", "ok"]
    assert cluster["cluster"]["world_size"] == 2
    assert {n["name"] for n in cluster["cluster"]["nodes"]} == {"node0", "node1"}
    assert cluster["bandwidth"]["rows"], "the bandwidth sweep left no table"
    assert cluster["bandwidth"]["tcp_wire_gbps"]["node1"] > 0
    assert cluster["mnist"]["params_identical"] is True
    assert "Verdict: healthy" in runs[0].stdout
