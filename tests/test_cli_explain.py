"""`nccldoctor explain`: the answer first, findings, JSON keys, exit codes, inputs."""

from __future__ import annotations

import gzip
import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nccldoctor.cli.app import app
from tests.closed_pipe import PIPE_BYTES, run_reader_leaves

runner = CliRunner()
LOGS = Path(__file__).parent / "fixtures" / "logs"
KEYS = {
    "nccl_version": (str, type(None)),
    "cuda_version": (str, type(None)),
    "nranks": (int, type(None)),
    "nodes": (int, type(None)),
    "network": (str, type(None)),
    "interfaces": list,
    "gdrdma": (bool, type(None)),
    "transports": list,
    "channels": (int, type(None)),
    "algorithms": list,
    "init_complete": (bool, type(None)),
    "findings": list,
    "nccl": dict,
}


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test in its own folder, so that a file written there is this test's."""
    monkeypatch.chdir(tmp_path)


def test_healthy_answer_comes_first():
    result = runner.invoke(app, ["explain", str(LOGS / "v2.21-ib-gdr-2node")])
    assert result.exit_code == 0, result.output
    first = result.stdout.splitlines()[0]
    assert first.startswith(
        "✓ Healthy: Collectives of 2 ranks on 2 nodes: NET/IB via mlx5_0:1 with GPUDirect RDMA"
    )
    assert len(first) <= 162  # read in one glance: the mark, a space and 160 characters
    assert "No issues found!" in result.stdout


def test_the_first_line_is_the_verdict_its_cause_and_no_source_path():
    result = runner.invoke(app, ["explain", str(LOGS / "v2.30-init-hang")])
    first = result.stdout.splitlines()[0]
    assert first == "✗ Problems found: 2 of 4 ranks never reached Init COMPLETE (ranks 1, 3)"


def test_hang_fails_with_the_fix():
    result = runner.invoke(app, ["explain", str(LOGS / "v2.30-init-hang")])
    assert result.exit_code == 1
    assert "2 of 4 ranks never reached Init COMPLETE (ranks 1, 3)" in result.stdout
    assert "Fix:" in result.stdout


def test_json_document():
    result = runner.invoke(app, ["explain", "--json", str(LOGS / "v2.26-nvlink-1node")])
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["kind"] == "explain"
    for key, kind in KEYS.items():
        assert isinstance(doc[key], kind), key
    for algo in doc["algorithms"]:
        assert set(algo) >= {
            "collective",
            "algorithm",
            "protocol",
            "min_bytes",
            "max_bytes",
            "source",
        }
        assert algo["source"] in ("log", "tuning-model")
    for finding in doc["findings"]:
        assert set(finding) >= {"id", "category", "severity", "title", "evidence", "fix"}
    assert doc["nccl"]["nranks"] == doc["nranks"] == 4


def test_missing_file_is_a_usage_error(tmp_path):
    result = runner.invoke(app, ["explain", str(tmp_path / "nope.log")])
    assert result.exit_code == 2
    assert "no such file" in result.output


def test_stdin_gzip_and_glob(tmp_path):
    text = (LOGS / "v2.32-diverge" / "torchrun.log").read_bytes()
    result = runner.invoke(app, ["explain", "--json", "-"], input=text)
    assert result.exit_code == 1
    assert json.loads(result.stdout)["nranks"] == 4
    (tmp_path / "run.log.gz").write_bytes(gzip.compress(text))
    result = runner.invoke(app, ["explain", "--json", str(tmp_path / "*.gz")])
    assert result.exit_code == 1
    assert any(
        f["id"] == "logs.collective-divergence" for f in json.loads(result.stdout)["findings"]
    )


def test_html_report(tmp_path):
    page = tmp_path / "explain.html"
    result = runner.invoke(app, ["explain", "--html", str(page), str(LOGS / "v2.18-socket-2node")])
    assert result.exit_code == 0, result.output
    html = page.read_text()
    assert "<html" in html.lower() and "NET/Socket via eth0" in html
    assert result.stdout.splitlines()[-1] == f"Page: {page}"


def test_no_page_is_written_unless_asked(tmp_path):
    """explain reads a ticket: it leaves no file behind unless --html asks for the page."""
    result = runner.invoke(app, ["explain", str(LOGS / "v2.18-socket-2node")])
    assert result.exit_code == 0, result.output
    assert list(tmp_path.iterdir()) == [] and "Page:" not in result.output
    result = runner.invoke(app, ["explain", "--json", str(LOGS / "v2.18-socket-2node")])
    json.loads(result.stdout)
    assert list(tmp_path.iterdir()) == [] and "Page:" not in result.stderr


def test_json_with_a_page_keeps_stdout_json_and_names_the_page_last(tmp_path):
    logs = str(LOGS / "v2.18-socket-2node")
    result = runner.invoke(app, ["explain", "--json", "--html", "page.html", logs])
    json.loads(result.stdout)  # the page's path went to stderr
    assert result.stderr.splitlines()[-1] == "Page: page.html"
    # readable by whoever may read the folder, as any file the user writes: it is for a ticket
    assert (tmp_path / "page.html").stat().st_mode & 0o044 == 0o044


def test_a_file_without_nccl_output_says_how_to_get_it(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("epoch 1 loss 0.5\nepoch 2 loss 0.4\n")
    result = runner.invoke(app, ["explain", "--json", str(log)])
    assert result.exit_code == 0
    (finding,) = json.loads(result.stdout)["findings"]
    assert finding["id"] == "logs.no-nccl-output" and "NCCL_DEBUG=INFO" in finding["fix"]


@pytest.mark.parametrize(
    ("args", "read_bytes"),
    [
        (["--json", "--html", "report.html"], 0),
        (["--html", "report.html"], 0),
        (["--json", "--html", "report.html"], 1),
    ],
    # gone before the first write (which then fails), or gone after a line, in the middle of it
    ids=["json-reader-gone", "terminal-reader-gone", "json-read-a-line"],
)
def test_a_reader_that_leaves_early_costs_the_output_not_the_verdict(tmp_path, args, read_bytes):
    """`nccldoctor explain LOGS | head -1`: no traceback, the page still written, the exit code
    the verdict's (0 for this healthy ticket), not the 1 of Python's or rich's default."""
    logs = str(LOGS / "v2.18-socket-2node")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    if read_bytes:  # the rest of the document is still to be written when the reader leaves
        document = runner.invoke(app, ["explain", logs, "--json", "--no-html"]).stdout
        assert len(document) > 2 * PIPE_BYTES
    run = run_reader_leaves([sys.executable, "-m", "nccldoctor", "explain", logs, *args],
                            env, tmp_path / "stderr", read_bytes=read_bytes)  # fmt: skip
    assert run.read.startswith(b"{\n") if read_bytes else run.read == b""
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and "Exception" not in run.stderr, run.stderr
    # with --json the page's path is on stderr, else on the stdout that went
    assert run.stderr.splitlines() == (["Page: report.html"] if "--json" in args else [])
    assert "nccldoctor explain report" in (tmp_path / "report.html").read_text()


def test_a_gloo_jobs_log_gets_no_nccl_advice(tmp_path):
    """A job that ran on gloo has no NCCL lines to ask for: neither the answer nor a fix says
    to set NCCL_DEBUG, and gloo's own line is the finding."""
    log = tmp_path / "train.log"
    log.write_text(
        "[W1204 10:00:00.1 ProcessGroupGloo.cpp:715] Warning: Unable to resolve hostname to a "
        "(local) address. Using the loopback address as fallback. Manually set the network "
        "interface to bind to with GLOO_SOCKET_IFNAME. (function operator())\nepoch 1 loss 0.5\n"
    )
    document = json.loads(runner.invoke(app, ["explain", "--json", str(log)]).stdout)
    assert document["headline"]["answer"].startswith("No NCCL output in these logs.")
    assert "no communicator" not in document["headline"]["answer"]
    ids = {f["id"]: f for f in document["findings"]}
    assert "torch.gloo-hostname-loopback" in ids
    assert ids["logs.no-nccl-output"]["severity"] == "info"
    assert not any("NCCL_DEBUG=INFO" in f.get("fix", "") for f in document["findings"])
