"""`nccldoctor check` with node agents on loopback (no root needed): Ctrl-C still writes reports."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccldoctor.cli.app import app
from nccldoctor.lab.start import check_argv, check_env, free_port_pair, start_check
from nccldoctor.redact import SEAL_KEY
from tests.closed_pipe import run_reader_leaves
from tests.cluster.netns import run_folder

pytestmark = [pytest.mark.slow]
# The bandwidth sweep and the TCP turn only need to happen (a row, a rate), not to be precise.
BUDGETS = ["--backend", "gloo", "--timeout", "30", "--phase-timeout", "bandwidth_budget=0.5",
           "--phase-timeout", "tcp_probe=0.5"]  # fmt: skip


def start(
    i: int, port: int, out: Path, fault: str | None = None, nodes: list[str] = ("--nodes", "2")
) -> subprocess.Popen:
    args = ["--master", "127.0.0.1", *nodes, "--node-rank", str(i), "--port", str(port), *BUDGETS]
    return start_check(args, out=out, node_name=f"n{i}", env=os.environ,
                       extra_env={"NCCLDOCTOR_FAULT": fault} if fault else None,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def wait_all(procs: list[subprocess.Popen], timeout_s: float = 180) -> None:
    """Every node's run to its end; one still going after ``timeout_s`` is killed."""
    try:
        for proc in procs:
            proc.communicate(timeout=timeout_s)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()


def test_ctrl_c_on_a_node_still_writes_every_report(tmp_path):
    port = free_port_pair()
    master = start(0, port, tmp_path / "n0")
    node = start(1, port, tmp_path / "n1", fault="hang:ddp:rank=1")
    events = tmp_path / "n1" / "n1" / "latest" / "rank1" / "events.jsonl"
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and not (
            events.exists() and '"phase": "ddp", "status": "start"' in events.read_text()
        ):
            time.sleep(0.3)
        node.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        _, node_err = node.communicate(timeout=30)
        assert time.monotonic() - interrupted < 15
        master.communicate(timeout=120)
    finally:
        for proc in (master, node):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
    assert node.returncode == 3, node_err[-2000:]
    report = json.loads((run_folder(tmp_path / "n1", "n1") / "check-n1.json").read_text())
    assert report["completed"] is False and report["run"]["aborted"] == "interrupted by SIGINT"
    assert report["phases"][-1]["status"] == "running" or any(
        p["phase"] == "workers" and p["status"] == "fail" for p in report["phases"]
    )
    assert master.returncode in (1, 3)
    cluster = json.loads((run_folder(tmp_path / "n0", "n0") / "check-cluster.json").read_text())
    assert cluster["run"]["nodes_reported"] == 2  # n1 published its report before it left


def test_without_a_node_count_the_master_closes_the_join_window_after_a_quiet_time(tmp_path):
    port = free_port_pair()
    settle = ["--phase-timeout", "settle=3"]
    procs = [start(i, port, tmp_path / f"n{i}", nodes=settle) for i in range(2)]
    wait_all(procs)
    assert [p.returncode for p in procs] in ([0, 0], [1, 1])
    cluster = json.loads((run_folder(tmp_path / "n0", "n0") / "check-cluster.json").read_text())
    assert cluster["cluster"]["world_size"] == 2 and cluster["cluster"]["missing_nodes"] == []
    assert [r["state"] for r in cluster["ranks"]] == ["ok", "ok"]


def test_report_merge_of_the_node_files_is_the_masters_cluster_report(tmp_path):
    """The one merge: `nccldoctor report merge` of every node's report file judges the cluster as
    the master did. Apart: the ``report.merged`` finding (only a merge of files says where its
    reports came from) and ``created`` (when each was written). The headline and verdict are
    compared too: the marker is info when no node is missing, so it changes neither."""
    port = free_port_pair()
    procs = [start(i, port, tmp_path / f"n{i}") for i in range(2)]
    wait_all(procs)
    files = [str(run_folder(tmp_path / f"n{i}", f"n{i}") / f"check-n{i}.json") for i in range(2)]
    merged = CliRunner().invoke(app, ["report", "merge", *files, "--json"])
    master = json.loads((run_folder(tmp_path / "n0", "n0") / "check-cluster.json").read_text())
    assert master.pop(SEAL_KEY)  # the file's seal (write_report's), not the document's
    assert merged.exit_code == master["exit_code"], merged.output
    doc = json.loads(merged.stdout)
    marker = doc["findings"].pop()
    assert marker["id"] == "report.merged" and marker["severity"] == "info"
    assert marker["evidence"] == [f"n{i}: {path}" for i, path in enumerate(files)]
    assert {**doc, "created": None} == {**master, "created": None}
    assert [n["report_path"] for n in master["cluster"]["nodes"]] == files


def test_a_reader_that_left_costs_the_output_not_the_reports_or_the_verdict(tmp_path):
    """`nccldoctor check | head -1` where head has gone when the verdict is printed: no
    traceback, the report and the page written, the exit code the report's."""
    args = ["--master", "127.0.0.1", "--nodes", "1", "--port", str(free_port_pair()), *BUDGETS]
    out = tmp_path / "n0"
    run = run_reader_leaves(check_argv(out, args), check_env(os.environ, "n0"),
                            tmp_path / "stderr", read_bytes=0, timeout_s=180)  # fmt: skip
    assert "Traceback" not in run.stderr and "Exception" not in run.stderr, run.stderr
    path = run_folder(out, "n0") / "check-cluster.json"  # the master's, with the cluster's verdict
    report = json.loads(path.read_text())
    assert run.returncode == report["exit_code"], run.stderr
    assert path.with_suffix(".html").read_text().startswith("<!doctype html>")


def report_of(proc: subprocess.Popen, stdout: str) -> tuple[Path, dict]:
    """The report a check printed it wrote (its last ``Report:`` line), and its document."""
    (path,) = [
        line[len("Report: ") :] for line in stdout.splitlines() if line.startswith("Report: ")
    ]
    return Path(path), json.loads(Path(path).read_text())


def test_a_rerun_after_a_hang_reads_nothing_of_the_hung_run(tmp_path):
    """The user's loop in one folder: a run whose rank hangs in destroy, then the same command
    without the fault. The rerun's verdict is its own (it once said "never finished destroy",
    from the first run's events), and nothing of the first run is in its report."""
    one = ["--nodes", "1", "--phase-timeout", "destroy=3"]
    hung = start(0, free_port_pair(), tmp_path, fault="hang:destroy:rank=0", nodes=one)
    hung_out = hung.communicate(timeout=180)[0]
    first_path, first = report_of(hung, hung_out)
    assert first["hang"] and "destroy" in first["hang"]["verdict"], first["hang"]
    healthy = start(0, free_port_pair(), tmp_path, nodes=one)
    second_path, second = report_of(healthy, healthy.communicate(timeout=180)[0])
    assert healthy.returncode == second["exit_code"] and second["hang"] is None
    assert [(r["state"], r["phase_reached"]) for r in second["ranks"]] == [("ok", "destroy")]
    assert first_path.parent != second_path.parent == run_folder(tmp_path, "n0")
    assert first_path.parent.name not in json.dumps(second)
    assert second["run"]["run_id"] != first["run"]["run_id"]
    started = min(p["started"] for p in second["phases"])
    assert started > max(p["ended"] or 0 for p in first["phases"])  # one run's timeline
    events = (second_path.parent / "rank0" / "events.jsonl").read_text()
    assert events.count('"phase": "destroy", "status": "start"') == 1
    assert (second_path.parent / "agent.log").read_text().count("preflight ...") == 1


def test_two_checks_on_different_ports_share_one_folder_at_once(tmp_path):
    """Two checks of one node name at the same time in one --out (nodes sharing an NFS folder,
    or two ports on one machine): each run writes and reads back its own folder only."""
    ports = [free_port_pair()]
    while (port := free_port_pair()) in (ports[0], ports[0] + 1, ports[0] - 1):
        pass
    ports.append(port)
    procs = [start(0, p, tmp_path, nodes=["--nodes", "1"]) for p in ports]
    outputs = [proc.communicate(timeout=240)[0] for proc in procs]
    reports = [report_of(proc, out) for proc, out in zip(procs, outputs, strict=True)]
    folders = {path.parent for path, _ in reports}
    assert len(folders) == 2 and {f.parent for f in folders} == {tmp_path / "n0"}
    for (path, doc), proc, port in zip(reports, procs, ports, strict=True):
        assert proc.returncode == doc["exit_code"] and doc["hang"] is None, path
        assert [r["state"] for r in doc["ranks"]] == ["ok"]
        assert f"--port {port} " in " ".join(doc["command"]) + " "
        worker = json.loads((path.parent / "rank0" / "config.json").read_text())
        assert worker["run_id"] == doc["run"]["run_id"]  # its own rank, not the other run's


def test_a_disk_that_fills_up_during_the_run_costs_the_file_not_the_verdict(tmp_path):
    """The run's folder was writable at the start; the disk is full by its report. The verdict
    is still printed, the line that says why above it, and the check exits 3, without a
    traceback and without a report path that holds nothing."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    out = tmp_path / "small"
    out.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(out)], check=True)
    proc = start(0, free_port_pair(), out, nodes=["--nodes", "1"])
    try:
        events = out / "n0" / "latest" / "rank0" / "events.jsonl"
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and not (events.exists() and events.stat().st_size):
            time.sleep(0.2)
        with contextlib.suppress(OSError), open(out / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 65536)
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        subprocess.run(["umount", "-l", str(out)], check=True)
    assert proc.returncode == 3, stderr[-2000:]
    assert "Traceback" not in stdout + stderr and "Report: " not in stdout
    assert "cluster report: cannot write " in stderr and "No space left on device" in stderr
    assert "nccldoctor: the report could not be written to " in stderr
    assert "Cluster run" in stdout  # the verdict itself was shown
