"""Live progress: on a terminal the phase in progress with its time and deadline on one line
(on the master the nodes joined so far), each finished phase once; `watch`'s line of the job
with its output passing above it; in a pipe plain lines, none lost."""

from __future__ import annotations

import io
import os
import re
import select
import subprocess
import time
from pathlib import Path

import pytest
from rich.console import Console

from nccldoctor.cli.progress import JobProgress, Progress
from nccldoctor.cluster.agent.rendezvous import Joined
from nccldoctor.cluster.timeouts import Timeouts
from nccldoctor.lab.start import free_port_pair, start_check
from nccldoctor.watch.supervisor import JobStatus
from tests.terminal import end, open_pty, read_pty, screen

# What NodeAgent.phase says (cluster/agent/node.py), as a run of two phases says it.
MESSAGES = [
    "reach ...",
    "reach ok (0.2 s) 198.18.0.1:29400",
    "rendezvous ...",
    "rendezvous ok (1.4 s) 2 nodes",
    "node report: out/check-node1.json",
]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_terminal_shows_the_phase_in_progress_and_each_finished_phase_once() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, color_system=None)
    clock = Clock()
    with Progress(console, Timeouts().agent_phase, clock=clock) as progress:
        progress(MESSAGES[0])
        clock.now += 3.25
        assert progress.line().plain == "reach … 3.2 s of 30 s"
        progress(MESSAGES[1])
        assert progress.line().plain == ""  # nothing in progress between phases
        progress(MESSAGES[2])
        assert progress.line().plain == "rendezvous … 0.0 s of 60 s"
        for message in MESSAGES[3:]:
            progress(message)
    text = out.getvalue()
    for message in (MESSAGES[1], MESSAGES[3], MESSAGES[4]):
        assert text.count(message) == 1
    assert "reach ...\n" not in text  # a start is the live line, not a printed line


def test_a_pipe_gets_every_message_as_a_plain_line() -> None:
    out = io.StringIO()
    console = Console(file=out, width=100)  # not a terminal
    with Progress(console, Timeouts().agent_phase) as progress:
        for message in MESSAGES:
            progress(message)
    assert out.getvalue().splitlines() == MESSAGES
    assert "\x1b" not in out.getvalue()


def test_json_output_is_plain_lines_even_on_a_terminal() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, color_system=None)
    with Progress(console, live=False) as progress:
        for message in MESSAGES:
            progress(message)
    assert out.getvalue().splitlines() == MESSAGES


def test_every_agent_phase_but_preflight_has_a_deadline() -> None:
    timeouts = Timeouts()
    assert timeouts.agent_phase("workers") == timeouts.workers_total()
    assert timeouts.agent_phase("tcp") == timeouts.tcp_total
    assert timeouts.agent_phase("preflight") is None


def test_the_masters_line_counts_the_nodes_joined_during_rendezvous() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, color_system=None)
    clock = Clock()
    with Progress(console, Timeouts().agent_phase, clock=clock) as progress:
        progress("rendezvous ...")
        progress(Joined(1, 2))
        clock.now += 1.5
        assert progress.line().plain == "rendezvous … 1.5 s of 60 s · nodes 1/2 joined"
        progress(Joined(2, 2))
        assert progress.line().plain.endswith("· nodes 2/2 joined")
        progress("rendezvous ok (1.5 s) 2 node(s), world size 2")
        assert progress.line().plain == ""
        progress("bootstrap ...")
        assert "joined" not in progress.line().plain  # the count was rendezvous's
    assert "joined" not in out.getvalue().split("rendezvous ok")[-1]


def test_without_a_node_count_the_line_says_how_many_came_so_far() -> None:
    console = Console(file=io.StringIO(), force_terminal=True, width=100, color_system=None)
    with Progress(console, Timeouts().agent_phase, clock=Clock()) as progress:
        progress("rendezvous ...")
        progress(Joined(3, None))
        assert progress.line().plain.endswith("· nodes 3 joined")


def test_a_pipe_gets_the_join_events_as_plain_lines() -> None:
    out = io.StringIO()
    with Progress(Console(file=out, width=100), Timeouts().agent_phase) as progress:
        for message in ("rendezvous ...", Joined(1, 2), Joined(2, 2), "rendezvous ok (1.4 s) 2"):
            progress(message)
    assert out.getvalue().splitlines() == [
        "rendezvous ...",
        "rendezvous: nodes 1/2 joined",
        "rendezvous: nodes 2/2 joined",
        "rendezvous ok (1.4 s) 2",
    ]


def test_a_jobs_bytes_pass_above_the_line_on_a_terminal() -> None:
    """The job's lines, an unfinished line and a message of ours, each on a row of its own on
    a real pseudo-terminal; the live line gone at the end."""
    master, slave = os.openpty()
    with open(os.dup(slave), "w") as tty, open(os.dup(slave), "wb", buffering=0) as sink:
        os.close(slave)
        console = Console(file=tty, force_terminal=True, width=80, color_system=None)
        with JobProgress(console) as shown:
            write = shown.through(sink)
            shown.status(JobStatus("running", 3.0, 0.0, 120.0, 2))
            write(b"step 1 loss 0.9\nstep 2 ")
            shown.refresh()  # the job's line is unfinished: no line is drawn into it
            write(b"loss 0.8\n")
            write(b"tqdm 50%")
            shown.print("nccldoctor: a message")
            shown.status(JobStatus("quiet", 70.0, 61.0, 120.0, 2))
            time.sleep(0.3)  # a redraw by the ticker
        tty.flush()
        data = b""
        while select.select([master], [], [], 0.2)[0]:
            data += os.read(master, 65536)
    os.close(master)
    assert b"job running 3 s \xc2\xb7 2 ranks" in data  # drawn while the job ran
    assert b"job quiet 70 s \xc2\xb7 2 ranks \xc2\xb7 no progress for 61 s of 120 s" in data
    assert screen(data, 80) == [
        "step 1 loss 0.9",
        "step 2 loss 0.8",
        "tqdm 50%",
        "nccldoctor: a message",
    ]


def test_a_jobs_bytes_on_a_pipe_are_the_jobs_alone() -> None:
    out, sink = io.StringIO(), io.BytesIO()
    with JobProgress(Console(file=out, width=80)) as shown:
        write = shown.through(sink)
        for status in (
            JobStatus("running", 0.0, 0.0, 120.0, 0),
            JobStatus("running", 1.0, 0.0, 120.0, 2),
            JobStatus("running", 2.0, 1.0, 120.0, 2),  # nothing new: no line
            JobStatus("quiet", 63.0, 61.0, 120.0, 2),
        ):
            shown.status(status)
            write(b"\xff raw " + str(status.elapsed_s).encode())
    assert sink.getvalue() == b"\xff raw 0.0\xff raw 1.0\xff raw 2.0\xff raw 63.0"
    assert out.getvalue().splitlines() == [
        "nccldoctor: job running 0 s",
        "nccldoctor: job running 1 s · 2 ranks",
        "nccldoctor: job quiet 63 s · 2 ranks · no progress for 61 s of 120 s",
    ]


@pytest.mark.slow
def test_a_check_on_a_terminal_shows_the_join_and_in_a_pipe_plain_lines(tmp_path: Path) -> None:
    """Two node agents on loopback: the master on a pseudo-terminal, the other node's output in
    a pipe, started once the master waits in rendezvous."""
    port = free_port_pair()

    def args(rank: int) -> list[str]:  # the line is the question here, not the rates
        return ["--master", "127.0.0.1", "--nodes", "2", "--node-rank", str(rank), "--port",
                str(port), "--backend", "gloo", "--timeout", "30", "--phase-timeout",
                "bandwidth_budget=1", "--phase-timeout", "tcp_probe=0.5", "--no-html"]  # fmt: skip

    master_tty, slave = open_pty(100)
    env = {**os.environ, "TERM": "xterm"}
    env.pop("NO_COLOR", None)
    master = start_check(args(0), out=tmp_path / "n0", node_name="n0", env=env,
                         stdin=slave, stdout=slave, stderr=slave)  # fmt: skip
    os.close(slave)
    node = None
    try:
        deadline = time.monotonic() + 240
        data = read_pty(master_tty, master, deadline, until=b"nodes 1/2 joined")
        time.sleep(1)  # the master's line counts one node for a while
        node = start_check(args(1), out=tmp_path / "n1", node_name="n1", env=os.environ,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        data += read_pty(master_tty, master, deadline)
        _, node_err = node.communicate(timeout=max(1, deadline - time.monotonic()))
    finally:
        for proc in (master, node):
            if proc is not None:
                end(proc)
        os.close(master_tty)
    assert master.returncode in (0, 1) and node.returncode in (0, 1), data[-3000:]
    text = data.decode(errors="replace")
    live = re.findall(r"rendezvous … [0-9.]+ s of [0-9.]+ s · nodes (\d)/2 joined", text)
    assert "1" in live and "2" in live  # the line counted the node as it came
    rows = screen(data, 100)
    # each finished phase once, the line itself gone (transient)
    for phase in ("preflight", "reach", "rendezvous", "workers"):
        assert len([r for r in rows if r.startswith(f"{phase} ") and " (" in r]) == 1, rows
    assert not [r for r in rows if " … " in r], rows
    assert (
        "rendezvous: nodes 2/2 joined"
        in (tmp_path / "n0" / "n0" / "latest" / "agent.log").read_text()
    )
    # the other node, in a pipe: plain lines, a start and an end per phase, no control codes
    assert "\x1b" not in node_err
    lines = node_err.splitlines()
    assert "rendezvous ..." in lines and any(ln.startswith("rendezvous ok (") for ln in lines)
