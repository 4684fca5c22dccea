"""What torch prints on its own stays off the user's terminal: its C++ warnings with their
backtraces and Python's import warnings go to the node's log, nccldoctor's lines stay. And no
control sequence from outside (a log line, a file name, a peer, a report) reaches it."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.text import Text

from nccldoctor.cli.cleanterm import CleanConsole, clean
from nccldoctor.cli.progress import Progress
from nccldoctor.cluster.diagnosis.verdict import rank_findings
from nccldoctor.facts.ranks import OutcomeState, RankOutcome
from nccldoctor.forensics.stacks import without_cpp_frames

REPO = Path(__file__).resolve().parents[1]

# A real TCPStore client on a closed port: torch's C++ logging writes the retry warning and
# its backtrace to file descriptor 2 (torch/csrc/distributed/c10d/TCPStore.cpp, the retry loop).
_SCRIPT = """
import sys, warnings
from datetime import timedelta
from pathlib import Path
from nccldoctor.cli.console import divert_stderr, stderr
divert_stderr(Path(sys.argv[1]))
warnings.warn("Failed to initialize NumPy: _ARRAY_API not found", UserWarning)
from torch.distributed import TCPStore
try:
    TCPStore("127.0.0.1", 1, is_master=False, timeout=timedelta(seconds=1))
except Exception as exc:
    stderr.print(f"reach: could not connect to the store: {exc}")
"""


def test_torch_output_goes_to_the_log_and_nccldoctor_lines_to_the_terminal(tmp_path):
    log = tmp_path / "node0" / "agent.log"
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(log)], capture_output=True,
                          text=True, timeout=120, cwd=REPO)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "reach: could not connect to the store: The client socket has timed out after 1000ms "
        "while trying to connect to (127.0.0.1, 1)."
    ]
    logged = log.read_text()
    assert "UserWarning: Failed to initialize NumPy" in logged
    assert "TCPStore.cpp" in logged and "retrying" in logged


def test_cpp_frames_are_cut_and_the_message_kept():
    text = (
        "Traceback (most recent call last):\n"
        '  File "/x/rank.py", line 40, in init\n'
        "torch.distributed.DistNetworkError: The client socket has timed out after 1000ms while "
        "trying to connect to (198.18.7.1, 29400).\n"
        "Exception raised from throwTimeoutError at /__w/pytorch/pytorch/torch/csrc/distributed/"
        "c10d/socket.cpp:1030 (most recent call first):\n"
        "frame #0: c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char>) + 0x9d "
        "(0x7f8046979b8d in /usr/lib/python3.11/site-packages/torch/lib/libc10.so)\n"
        "frame #6: c10d::TCPStore::wait(std::vector<std::string> const&) + 0x2b (0x7f in x.so)\n"
        "<omitting python frames>\n"
        "frame #22: __libc_start_main + 0x85 (0x7fdab8445305 in /lib/x86_64-linux-gnu/libc.so.6)\n"
    )
    cut = without_cpp_frames(text)
    assert "frame #" not in cut and "Exception raised from" not in cut
    assert cut.splitlines()[-1].endswith("(198.18.7.1, 29400).")
    rank = RankOutcome(rank=0, node="node0", state=OutcomeState.FAILED, phase_reached="init", error=text, exit_code=1,
                       log_path="r0.log")  # fmt: skip
    (finding,) = rank_findings([rank])
    assert finding.title.endswith("trying to connect to (198.18.7.1, 29400).")
    assert "frame #" not in finding.title


# What a hostile log line, file name or peer can hold: a window title, the clipboard, a hidden
# link, a screen clear, the 8-bit forms of CSI and OSC, DCS, a bell, a backspace, NEL, DEL.
HOSTILE = (
    "\x1b]0;TITLE\x07 a \x1b]52;c;Q0xJUA==\x07 b \x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\"
    " c \x9b2J d \x9d0;T\x9c e \x1b[2J\x1b[31m f \x1bP+q\x1b\\ g \x1bc h\x08\x7f\x85 i\x1b"
)
# rich's own: SGR styling, and the live line's cursor hidden and shown, the line erased and the
# cursor moved up (with colour off and no live line there is none, and any ESC is injected)
_RICH = re.compile(r"\x1b\[[0-9;]*m|\x1b\[\?25[lh]|\r|\x1b\[2K|\x1b\[1A")


def _unsafe(text: str) -> list[str]:
    """The control characters in ``text`` other than newline, tab and rich's own sequences."""
    return re.findall(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", _RICH.sub("", text))


def test_clean_drops_every_sequence_and_keeps_the_text_newlines_and_tabs():
    assert clean(HOSTILE + "\n\tnext") == " a  b link c  d  e  f  g  h i\n\tnext"
    assert clean(clean(HOSTILE)) == clean(HOSTILE)
    # rich drops a BEL before the segment is cleaned: the title still goes, the text after stays
    assert clean("\x1b]0;TITLE got \x1b]0;T2") == " got "


def test_every_segment_is_cleaned_and_rich_styling_stays():
    out = io.StringIO()
    console = CleanConsole(file=out, force_terminal=True, color_system="standard", width=300)
    console.print(Text(HOSTILE, style="red"), Text(f"node{HOSTILE}"))
    assert "\x1b[31m" in out.getvalue() and not _unsafe(out.getvalue())


def test_progress_lines_from_peers_are_cleaned():
    out = io.StringIO()
    console = CleanConsole(
        file=out,
        force_terminal=True,
        color_system="standard",
        width=300,
        markup=False,
        highlight=False,
    )  # fmt: skip (as cli/console.py's)
    with Progress(console, live=True) as shown:
        shown("rendezvous ...")
        shown(f"node {HOSTILE} refused: bad token")
    assert " a  b link" in out.getvalue() and not _unsafe(out.getvalue())


def _run(args: list[str], **env: str) -> str:
    """stdout and stderr of ``nccldoctor args``, as the bytes a terminal would get."""
    env = {**os.environ, "COLUMNS": "300", **env}
    env.pop("NO_COLOR", None) if "FORCE_COLOR" in env else None
    proc = subprocess.run([sys.executable, "-m", "nccldoctor", *args], capture_output=True,
                          cwd=REPO, env=env, timeout=120)  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    return (proc.stdout + proc.stderr).decode("utf-8")


@pytest.mark.parametrize("colour", [{"NO_COLOR": "1"}, {"FORCE_COLOR": "1"}])
def test_explain_prints_no_sequence_from_a_log_line_or_an_attachment_name(tmp_path, colour):
    logs = tmp_path / "ticket"
    logs.mkdir()
    (logs / "rank0.log").write_text(
        "host:1:1 [0] NCCL INFO NCCL version 2.26.2+cuda12.4\n"
        f"host:1:1 [0] misc/socket.cc:1 NCCL WARN {HOSTILE} unhandled system error\n"
    )
    name = HOSTILE.replace("/", "")  # a file name holds anything but a slash
    (logs / f"crash{name}.log").write_bytes(b"\0" * 64)  # named by ticket.not-read
    out = _run(["explain", str(logs), "-v"], **colour)
    assert "unhandled system error" in out and "only NUL bytes" in out
    assert not _unsafe(out)
    if "NO_COLOR" in colour:
        assert "\x1b" not in out


@pytest.mark.invalid_reports  # the crafted report breaks the schema on purpose
def test_report_show_of_a_crafted_report_prints_no_sequence(tmp_path):
    from tests.report.hostile import hostile

    document = hostile().to_dict()
    document["findings"][0]["title"] = HOSTILE
    document["findings"][0]["evidence"].append(HOSTILE)
    document["nodes"][0]["hostname"] = HOSTILE
    document["area_status"]["network"] = HOSTILE
    document["headline"]["answer"] = HOSTILE
    document["load_notes"] = [HOSTILE]
    path = tmp_path / "run.json"
    path.write_text(json.dumps(document))
    for colour in ({"NO_COLOR": "1"}, {"FORCE_COLOR": "1"}):
        out = _run(["report", str(path), "-v"], **colour)
        assert " a  b link" in out and not _unsafe(out)


def test_cleaning_a_line_of_introducers_is_one_pass():
    """A hostile line of a million OSC or CSI introducers is cleaned in one pass, not one per
    introducer (each used to search the rest of the line for its terminator)."""
    for introducers in ("\x9d", "\x1b]", "\x1bP\x9b", "\x1b"):
        started = time.perf_counter()
        assert clean(introducers * 300_000 + "\nend") == "\nend"
        assert time.perf_counter() - started < 5
