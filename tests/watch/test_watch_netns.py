"""`nccldoctor watch` on two hosts in network namespaces: one torchrun node each, gloo.

The watchers meet through their store on the first host (`--master`), so each node's report
holds both ranks and names the one that is behind, with its step.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

EXAMPLE_JOB = Path(__file__).parent / "example_job.py"
WATCH_PORT, JOB_PORT = "29470", "29471"
DEADLINE = 150.0


def start_job(lab, fault: str | None):
    master = lab.hosts[0].address
    runs = []
    for i, host in enumerate(lab.hosts):
        job = [
            sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(i),
            "--nproc-per-node", "1", "--master-addr", master, "--master-port", JOB_PORT,
            str(EXAMPLE_JOB),
        ]  # fmt: skip
        args = ["--hang-after", "8", "--master", master, "--port", WATCH_PORT, "--", *job]
        env = {"GLOO_SOCKET_IFNAME": "eth0", "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
        if fault:
            env["EXAMPLE_FAULT"] = fault
        runs.append(lab.start(host, args, lab.reports / host.name, env=env, command="watch"))
    lab.wait(runs, timeout=DEADLINE)
    return runs, [json.loads((run.run_dir / "report.json").read_text()) for run in runs]


def test_rank_stalled_on_one_node_is_named_on_every_node(lab):
    runs, reports = start_job(lab(2), "stall:1:3")
    for run, report in zip(runs, reports, strict=True):
        assert run.rc == 3, run.stderr
        assert run.elapsed < DEADLINE
        assert sorted(r["rank"] for r in report["ranks"]) == [0, 1]  # both nodes' ranks
        finding = next(f for f in report["findings"] if f["id"] == "watch.hang")
        assert finding["rank"] == 1 and finding["node"] == "node1"
        assert "step=3" in report["watch"]["verdict"]


def test_rank_raising_on_one_node_passes_the_exit_code_through(lab):
    runs, reports = start_job(lab(2), "raise:1:2")
    failing = runs[1]
    assert failing.rc == 1, failing.stderr
    assert reports[1]["watch"]["exit_code"] == 1
    finding = next(f for f in reports[1]["findings"] if f["id"] == "watch.rank-failed")
    assert finding["rank"] == 1
    assert "example failure on rank 1 at step 2" in finding["title"]
    assert runs[0].rc != 0  # the other node's torchrun fails too, and its report says so
    assert reports[0]["watch"]["exit_code"] == runs[0].rc
