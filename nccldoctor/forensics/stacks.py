"""Read Python stack dumps (faulthandler's and py-spy's) into frames, innermost first; cut
torch's C++ backtraces out of text meant for a person."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# faulthandler: '  File "/x/train.py", line 42 in train'
_FAULTHANDLER_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_FAULTHANDLER_THREAD = re.compile(r"^(?P<current>Current thread|Thread) 0x[0-9a-f]+")
# py-spy dump: 'Thread 4242 (idle): "MainThread"', '    train (train.py:42)', then Locals.
_PYSPY_THREAD = re.compile(r'^Thread \d+ \((?P<state>[^)]*)\): "(?P<name>[^"]*)"')
_PYSPY_FRAME = re.compile(r"^    (?P<func>\S+) \((?P<file>[^:()]+):(?P<line>\d+)\)")
_PYSPY_LOCAL = re.compile(r"^\s{12}(?P<name>\w+): (?P<value>.*)$")

# c10::Error::what() is the message, then the C++ backtrace (c10/util/Exception.cpp,
# compute_what): "Exception raised from <func> at <file>:<line> (most recent call first):", one
# "frame #N: ..." line per frame, "<omitting python frames>" where Python's were. torch's C++
# warnings (TCPStore's retries) print the same block under their one line (docs/design.md#terminal).
_CPP_TRACE_START = re.compile(r"^\s*Exception raised from \S.* \(most recent call first\):\s*$")
_CPP_FRAME = re.compile(r"^\s*(frame #\d+: |<omitting python frames>\s*$)")

# Frames from these places are the machinery, not the user's program.
_LIBRARY_MARKERS = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ")
_COLLECTIVE_MARKERS = ("torch/distributed/", "torch/nn/parallel/distributed.py")


@dataclass
class Frame:
    file: str
    line: int
    func: str
    locals: dict[str, str] = field(default_factory=dict)

    @property
    def is_library(self) -> bool:
        return any(marker in self.file for marker in _LIBRARY_MARKERS)

    @property
    def in_collective(self) -> bool:
        return any(marker in self.file for marker in _COLLECTIVE_MARKERS)

    def describe(self) -> str:
        where = f"{self.file}:{self.line} in {self.func}"
        loop = {k: v for k, v in self.locals.items() if k in LOOP_VARIABLES}
        return where + (" (" + ", ".join(f"{k}={v}" for k, v in loop.items()) + ")" if loop else "")


LOOP_VARIABLES = ("epoch", "step", "it", "iteration", "batch_idx", "global_step", "i")


def main_thread_frames(dump: str) -> list[Frame]:
    """The frames of the main thread (innermost first) from either dump format."""
    if any(_PYSPY_THREAD.match(line) for line in dump.splitlines()):
        return _pyspy_main(dump)
    return _faulthandler_main(dump)


def _faulthandler_main(dump: str) -> list[Frame]:
    threads: list[list[Frame]] = []
    for line in dump.splitlines():
        if _FAULTHANDLER_THREAD.match(line):
            threads.append([])
        elif (m := _FAULTHANDLER_FRAME.match(line)) and threads:
            threads[-1].append(Frame(m["file"], int(m["line"]), m["func"]))
    # faulthandler lists the thread that took the signal first; the main thread is the one
    # whose outermost frame is the program's module level (runpy's, under `python -m`).
    for frames in threads:
        if frames and frames[-1].func in ("<module>", "_run_module_as_main"):
            return frames
    return threads[0] if threads else []


def _pyspy_main(dump: str) -> list[Frame]:
    frames: list[Frame] = []
    in_main = False
    for line in dump.splitlines():
        if m := _PYSPY_THREAD.match(line):
            in_main = m["name"] == "MainThread"
        elif in_main and (m := _PYSPY_FRAME.match(line)):
            frames.append(Frame(m["file"], int(m["line"]), m["func"]))
        elif in_main and frames and (m := _PYSPY_LOCAL.match(line)):
            frames[-1].locals[m["name"]] = m["value"].strip()
    return frames


# a Python traceback: '  File "/x/train.py", line 42, in train' (outermost first)
_TRACEBACK_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')


def traceback_frames(text: str) -> list[Frame]:
    """The frames of a formatted traceback, innermost first (like the dumps)."""
    frames = [
        Frame(m["file"], int(m["line"]), m["func"])
        for line in text.splitlines()
        if (m := _TRACEBACK_FRAME.match(line))
    ]
    return frames[::-1]


def user_frame(frames: list[Frame]) -> Frame | None:
    """The innermost frame of the user's own code."""
    return next((f for f in frames if not f.is_library), None)


def in_collective(frames: list[Frame]) -> bool:
    return any(f.in_collective for f in frames)


# "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:152] ": where in torch's
# build tree a C++ message was raised, which says nothing to the person reading it
_CPP_SOURCE = re.compile(r"\[[^\]\s]*\.(?:cc|cpp|cxx|cu|c|h|hpp):\d+\] ?")


def without_source_paths(text: str) -> str:
    """``text`` without the C++ source locations torch's messages carry."""
    return _CPP_SOURCE.sub("", text) if ":" in text else text


def without_cpp_frames(text: str) -> str:
    """``text`` without torch's C++ backtraces: each "Exception raised from ..." header and
    every "frame #N" line go; the messages around them stay."""
    kept = []
    for line in text.splitlines():
        if _CPP_TRACE_START.match(line) or _CPP_FRAME.match(line):
            continue
        kept.append(line)
    return "\n".join(kept)


def readable(text: str) -> str:
    """A message as a person reads it: without torch's C++ backtraces and source locations
    (the document and the HTML keep them)."""
    return without_source_paths(without_cpp_frames(text))
