"""What torch prints on its own stays off the user's terminal: its C++ warnings with their
backtraces and Python's import warnings go to the node's log, nccldoctor's lines stay."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
