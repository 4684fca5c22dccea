"""Live progress of `check` and `watch` on a terminal: the phase in progress on one line (its
time and deadline), every finished phase printed once above it with its time.

Where stderr is not a terminal, or with ``--json``, every message is a plain line on stderr as
it comes, so nothing is lost in a pipe or a log file. The messages are the agent's own: a phase
starts with ``"<phase> ..."`` and ends with ``"<phase> <status> (<seconds> s) <detail>"``
(``NodeAgent.phase`` in cluster/agent/node.py); anything else is printed as it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.text import Text

_STARTED = " ..."


class Progress:
    """A progress callback; use as a context manager around the run."""

    def __init__(
        self,
        console: Console,
        deadline: Callable[[str], float | None] = lambda phase: None,
        live: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._console = console
        self._deadline = deadline
        self._clock = clock
        self._live_wanted = console.is_terminal if live is None else live
        self._live: Any = None
        self._phase: tuple[str, float] | None = None

    def __enter__(self) -> Progress:
        if self._live_wanted:
            from rich.live import Live

            self._live = Live(
                get_renderable=self.line,
                console=self._console,
                refresh_per_second=4,
                transient=True,  # the line goes when the run ends; the finished phases stay
            )
            self._live.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def __call__(self, message: str) -> None:
        if self._live is None:
            self._console.print(message)
            return
        if message.endswith(_STARTED) and " " not in message[: -len(_STARTED)]:
            self._phase = (message[: -len(_STARTED)], self._clock())
        else:
            if self._phase and message.startswith(f"{self._phase[0]} "):
                self._phase = None
            self._console.print(message)  # above the live line, once
        self._live.refresh()

    def line(self) -> Text:
        """The live line: "rendezvous … 3.2 s of 60 s"."""
        if self._phase is None:
            return Text("")
        name, started = self._phase
        text = f"{name} … {self._clock() - started:.1f} s"
        deadline = self._deadline(name)
        return Text(text + (f" of {deadline:g} s" if deadline else ""), style="bold")
