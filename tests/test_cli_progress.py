"""Live progress: on a terminal the phase in progress with its time and deadline on one line,
each finished phase once; in a pipe plain lines, none lost."""

from __future__ import annotations

import io

from rich.console import Console

from nccldoctor.cli.progress import Progress
from nccldoctor.cluster.timeouts import Timeouts

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
