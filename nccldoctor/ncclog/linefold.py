"""One line at a time into the parse result: the parser's innermost fold.

An NCCL line is split into its envelope and folded through the kinds table into its process's
record (a WARN through the WARN kinds and the signature catalogue); a line seen before is folded
from the memo, a run of it once (a repeating kind's fold takes a count); a line that is not
NCCL's is matched against the catalogue, joined to the line before when a terminal's wrap cut
it, and against ``TEXT_KINDS``. :class:`~nccldoctor.ncclog.parser.SourceParser` decides which
lines get here.
"""

from __future__ import annotations

import re
from collections import Counter

from nccldoctor.limits import MAX_DIGITS, MAX_PROCESSES
from nccldoctor.ncclog.envelope import clean, parse_line
from nccldoctor.ncclog.folds import version
from nccldoctor.ncclog.kinds import TEXT_KINDS, match_kind, warned
from nccldoctor.ncclog.records import MAX_SAMPLES, LogSet, ProcessLog, Warn
from nccldoctor.ncclog.signals import Identify, record

# What a log's lines left out, as the logs.truncated finding names it
LONG_NUMBER = f"lines with a number of more than {MAX_DIGITS} digits"
MANY_PROCESSES = f"lines of processes past the first {MAX_PROCESSES:,}"
MEMO_LIMIT = 4096  # lines remembered, each with its fold
WRAP_MIN = 80  # terminals wrap at their width: a shorter line was not cut by a wrap
_DIGITS = re.compile(rb"\d+")


def text_of(raw: bytes) -> str:
    """A line as text: UTF-8 (errors replaced), without its CR or what pasting put around it."""
    return clean(raw.decode("utf-8", "replace").rstrip("\r"))


def _version(text: str) -> tuple[str, str | None] | None:
    """The NCCL and CUDA versions of a bare ``NCCL version …`` line (≤2.21 rank 0's printf)."""
    found = match_kind(text[text.find("NCCL version ") :])
    if found is None or found[0].fold is not version:
        return None
    m = found[1]
    return m["version"] + (m["suffix"] or ""), m["cuda"]


class LineFolder:
    """Folds lines into ``result``, the record of one source."""

    def __init__(self, name: str, identify: Identify | None = None) -> None:
        self.result = LogSet(sources=[name])
        self._identify = identify
        self._memo: dict[bytes, tuple] = {}  # repeated line -> (key, kind, match, envelope, text)
        # lines of the memo met since the last line parsed, folded once a block (or before the
        # next line parsed): their kinds' folds take a count, so one fold stands for many lines
        self._repeated: Counter[bytes] = Counter()
        self._repeated_last: dict[str, str] = {}  # ... and of each process the last of them
        self._wrapped: str | None = None  # a long line no signature matched: maybe wrapped

    def _process(self, key: str, host: str, pid: int) -> ProcessLog | None:
        """The record of ``key``; None past MAX_PROCESSES (each costs a record's memory)."""
        proc = self.result.processes.get(key)
        if proc is None:
            if len(self.result.processes) >= MAX_PROCESSES:
                return None
            proc = self.result.processes[key] = ProcessLog(key, host, pid, self.result.sources[:1])
        self.result.last_key = key
        return proc

    def _fold_repeated(self) -> None:
        """Fold each line seen before once for all its repeats (a repeating kind's fold counts
        them), and set each process's last line; forget them."""
        processes, repeated, last = self.result.processes, self._repeated, self._repeated_last
        for raw, times in repeated.items():
            key, kind, match, env, _ = self._memo[raw]
            kind.fold(processes[key], match, env, times)
        for key, text in last.items():
            processes[key].last_line = text
        self.result.nccl_lines += sum(repeated.values())
        repeated.clear()
        last.clear()

    def _parse(self, raw: bytes) -> None:
        """One line that is not a counted one (a line seen before is folded from the memo)."""
        hit = self._memo.get(raw)
        if hit is None:
            if raw:
                self.line(raw)
            return
        key, kind, match, env, text = hit
        proc = self.result.processes[key]
        kind.fold(proc, match, env)
        proc.last_line = text
        self.result.nccl_lines += 1

    def _bare_version(self, text: str) -> None:
        result = self.result
        said = _version(text)
        if said is None:
            return
        if result.last_key is None:  # its process is in the stretch before (continue_with)
            result.unclaimed_version = result.unclaimed_version or said
        else:
            result.processes[result.last_key].claim_version(*said)
        if len(result.bare_versions) < MAX_SAMPLES:
            text = text.strip()
            if text not in result.bare_versions:
                result.bare_versions.append(text)

    def _other(self, text: str) -> None:
        """A line that is not NCCL's: the facts of TEXT_KINDS (PyTorch's world size, its
        watchdog's sequence numbers, its word that init failed)."""
        for kind in TEXT_KINDS:
            if any(needle in text for needle in kind.needles):
                m = kind.pattern.search(text)
                if m is not None:
                    kind.fold(self.result, m, text)

    def line(self, raw: bytes, counted: bool = False) -> None:
        """Parse one line (``counted``: already in the line accounting); one that holds a number
        Python will not read (ValueError: over MAX_DIGITS digits) is left out, and counted."""
        try:
            self._line(raw, counted)
        except ValueError:
            if max(map(len, _DIGITS.findall(raw)), default=0) <= MAX_DIGITS:
                raise
            self._leave_out(LONG_NUMBER)

    def _leave_out(self, why: str) -> None:
        self.result.left_out[why] = self.result.left_out.get(why, 0) + 1

    def _line(self, raw: bytes, counted: bool) -> None:
        result = self.result
        text = text_of(raw)
        env = parse_line(text)
        if env is None:
            if "NCCL version " in text:
                self._bare_version(text)
            elif counted or " NCCL " in text:
                result.garbled_lines += 1
            elif raw:  # as the lines only counted in bulk are: a Markdown fence is a line too
                result.other_lines += 1
                self._other(text)
            if self._identify and text.strip():  # whose line: known in a one-process file only
                wrapped, self._wrapped = self._wrapped, None
                # a terminal's hard wrap cuts a long line in two: try it joined to the one before
                hit = record(result.signatures, self._identify, text, None) or (
                    wrapped is not None
                    and record(result.signatures, self._identify, wrapped + text, None)
                )
                if not hit and len(text) >= WRAP_MIN:
                    self._wrapped = text
                last = text.find("Last error:")
                if last >= 0:  # PyTorch quotes NCCL's last WARN there: the cause, matched too
                    record(result.signatures, self._identify, text[last + 11 :].strip(), None, text)
            return
        if not counted:
            result.nccl_lines += 1
        head = env.head
        proc = self._process(head.key, head.host, head.pid)
        if proc is None:
            self._leave_out(MANY_PROCESSES)
            return
        proc.last_line = text
        if env.level in ("WARN", "ATTN"):
            proc.add_warn(Warn(head.file, head.line, head.func, env.msg, text, level=env.level))
            warned(proc, env)
            if self._identify:
                record(result.signatures, self._identify, env.msg, head.key, text)
            return
        if env.level == "CALL":
            result.call_lines += 1
            return
        if env.level == "DIAG":
            if len(proc.diagnostics) < MAX_SAMPLES * 8:
                proc.diagnostics.append(env.msg)
            return
        found = match_kind(env.msg)
        if found is None:
            result.unknown_lines += 1
            if len(result.unknown_samples) < MAX_SAMPLES:
                result.unknown_samples.append(text[:300])
            return
        kind, m = found
        kind.fold(proc, m, env)
        if kind.repeats:
            if len(self._memo) >= MEMO_LIMIT:
                self._memo.clear()
            self._memo[raw] = (head.key, kind, m, env, text)
