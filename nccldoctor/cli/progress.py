"""Live progress of `check` and `watch` on a terminal: what is in progress on one line at the
foot of the terminal (rich's live display, redrawn in place), everything else printed above it.

`check`: the phase in progress with its time and deadline, and on the master the nodes joined so
far; each finished phase is printed once with its time. The messages are the agent's own: a
phase starts with ``"<phase> ..."`` and ends with ``"<phase> <status> (<seconds> s) <detail>"``
(``NodeAgent.phase`` in cluster/agent/node.py); a :class:`Joined` event is the master's join
window; anything else is printed as it is.

`watch`: the job as the watcher sees it (:class:`JobStatus`, once a second): running or quiet,
how long it has run, its ranks, and how long it has gone without progress of the ``--hang-after``
it may. The job's own output passes through byte for byte above the line (:meth:`through`).

Where the console is not a terminal, or with ``--json``, there is no line: every message is a
plain line as it comes (for `watch`, a line when the job's state changes), so nothing is lost in
a pipe or a log file.
"""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, BinaryIO

from rich.console import Console
from rich.text import Text

from nccldoctor.cluster.agent.rendezvous import Joined

if TYPE_CHECKING:  # watch's own module is not loaded for `check`
    from nccldoctor.watch.supervisor import JobStatus

_STARTED = " ..."
_CLEAR = "\r\x1b[2K"  # to the start of the line, and erase it (ECMA-48 CR, EL 2)
_REFRESH_S = 0.25


class LiveLine(abc.ABC):
    """One line at the foot of the terminal; use as a context manager around the run.

    One lock orders everything that reaches the terminal: the redraws (a thread of ours, four a
    second, instead of rich's own), the messages printed above, and the raw bytes of a job.
    """

    def __init__(self, console: Console, live: bool | None = None) -> None:
        self._console = console
        self._live_wanted = console.is_terminal if live is None else live
        self._live: Any = None
        self._lock = threading.Lock()
        self._partial = False  # the job's last bytes on the terminal ended inside a line
        self._drawn: str | None = None  # the text refresh() last drew
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def __enter__(self) -> LiveLine:
        if self._live_wanted:
            from rich.live import Live

            self._live = Live(
                get_renderable=self._render,
                console=self._console,
                auto_refresh=False,  # redrawn under our lock, never in the middle of a job's bytes
                transient=True,  # the line goes when the run ends; what was printed stays
                redirect_stdout=False,  # a job's output is passed through as bytes, by through()
                redirect_stderr=False,
            )
            self._live.start()
            self._ticker = threading.Thread(target=self._tick, name="nccldoctor-live", daemon=True)
            self._ticker.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._live is None:
            return
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2)
        with self._lock:
            self._end_partial()
            self._live.stop()
            self._live = None

    def print(self, message: str) -> None:
        """``message`` on a line of its own, above the live line."""
        with self._lock:
            if self._live is not None:
                self._end_partial()
                self._live.refresh()  # rich draws its last line under a print: make it today's
            self._console.print(message)

    def through(self, sink: BinaryIO) -> Callable[[bytes], None]:
        """A writer of a job's raw bytes to ``sink``: on the terminal the live line is erased
        before them and drawn again under them once they end a line; elsewhere they pass as
        they are."""
        clears = self._live is not None and sink.isatty()

        def write(data: bytes) -> None:
            with self._lock:
                if clears and self._live is not None and not self._partial:
                    self._console.file.write(_CLEAR)
                    self._console.file.flush()
                sink.write(data)
                sink.flush()
                if clears and self._live is not None and data:
                    self._partial = not data.endswith(b"\n")
                    if not self._partial:
                        self._live.refresh()

        return write

    @abc.abstractmethod
    def line(self) -> Text:
        """The live line's text (empty: nothing in progress)."""

    def refresh(self) -> None:
        """Draw the line now if its text changed (the ticker asks four times a second)."""
        with self._lock:
            if self._live is None or self._partial:
                return
            text = self.line().plain
            if text != self._drawn:  # watch's line changes once a second: no redraw between
                self._drawn = text
                self._live.refresh()

    def _render(self) -> Text:
        # One row, never wrapped: a wrapped line would make rich erase a row of the job's output
        # above it on the next redraw.
        text = self.line()
        text.truncate(max(1, self._console.width - 1), overflow="ellipsis")
        text.no_wrap = True
        return text

    def _tick(self) -> None:
        while not self._stop.wait(_REFRESH_S):
            self.refresh()

    def _end_partial(self) -> None:
        """Keep a job's unfinished line: the next line starts below it."""
        if self._partial:
            self._console.file.write("\n")
            self._partial = False


class Progress(LiveLine):
    """`check`'s progress callback: the agent's messages and the master's join events."""

    def __init__(
        self,
        console: Console,
        deadline: Callable[[str], float | None] = lambda phase: None,
        live: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(console, live)
        self._deadline, self._clock = deadline, clock
        self._phase: tuple[str, float] | None = None
        self._joined: Joined | None = None

    def __call__(self, message: str | Joined) -> None:
        if self._live is None:
            self.print(message_text(message))
            return
        if isinstance(message, Joined):
            self._joined = message
        elif message.endswith(_STARTED) and " " not in message[: -len(_STARTED)]:
            self._phase, self._joined = (message[: -len(_STARTED)], self._clock()), None
        else:
            if self._phase and message.startswith(f"{self._phase[0]} "):
                self._phase, self._joined = None, None
            self.print(message)  # above the live line, once
        self.refresh()

    def line(self) -> Text:
        """The live line: "rendezvous … 3.2 s of 60 s · nodes 1/2 joined"."""
        if self._phase is None:
            return Text("")
        name, started = self._phase
        text = f"{name} … {self._clock() - started:.1f} s"
        deadline = self._deadline(name)
        text += f" of {deadline:g} s" if deadline else ""
        if self._joined is not None:
            text += f" · {self._joined}"
        return Text(text, style="bold")


def message_text(message: str | Joined) -> str:
    """An agent's message as a line of its own (the terminal without a live line, the log)."""
    return f"rendezvous: {message}" if isinstance(message, Joined) else message


class JobProgress(LiveLine):
    """`watch`'s view of the job: :meth:`status` once a second from the supervisor."""

    def __init__(self, console: Console, live: bool | None = None) -> None:
        super().__init__(console, live)
        self._status: JobStatus | None = None

    def status(self, status: JobStatus) -> None:
        before, self._status = self._status, status
        if self._live is not None:
            self.refresh()
        elif before is None or (before.phase, before.ranks) != (status.phase, status.ranks):
            self.print(f"nccldoctor: {job_line(status)}")

    def line(self) -> Text:
        """The live line: "job running 42 s · 2 ranks · no progress for 9 s of 120 s"."""
        return Text(job_line(self._status) if self._status else "", style="bold")


def job_line(status: JobStatus) -> str:
    """What the watcher sees of the job, in one line."""
    parts = [f"job {status.phase} {status.elapsed_s:.0f} s"]
    if status.ranks:
        parts.append(f"{status.ranks} rank{'s' if status.ranks != 1 else ''}")
    if status.idle_s >= 2:  # the watcher looks once a second: less is no news
        parts.append(f"no progress for {status.idle_s:.0f} s of {status.hang_after_s:g} s")
    return " · ".join(parts)
