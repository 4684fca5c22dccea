"""nccl-tests' text output as runs: each line kind but the table is one row of ``_LINES`` (a
regex from its format string and what it fills); the table's rows are read by the layout its
header announced or the rows' own cells imply (``table.py``). Output as people paste it is read
too: lines whose ``#`` the tracker ate, behind an indented or quoted MPI prefix, and rows
without any header.

Bad input never raises: a row cut short is counted in ``cut_rows``."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from nccldoctor.limits import MAX_TEST_ROWS
from nccldoctor.ncctests.records import Device, PerfRun
from nccldoctor.ncctests.table import Table, header_table, number, starts_row

# MPI launchers prefix each line with the rank and stream (``[1,0]<stdout>:``); pasted into a
# thread it may be indented or quoted (``>``)
_MPI_PREFIX = re.compile(r"^[\s>]*\[\d+,\d+\]<std\w+>:")


def _settings(run: PerfRun, m: re.Match[str]) -> None:
    # "nThread 1 nGpus 2 minBytes 8 ... step: 2(factor) warmup iters: 5" as key/value pairs
    pairs = re.findall(r"([A-Za-z][\w ]*?):?\s+(-?\d+(?:\(\w+\))?)", m.group("rest"))
    run.settings = {k.strip(): v for k, v in pairs}


def _device(run: PerfRun, m: re.Match[str]) -> None:
    run.devices.append(
        Device(
            int(m["rank"]),
            m["host"],
            int(m["dev"]),
            int(m["pid"]) if m["pid"] else None,
            m["name"].strip(),
        )
    )


def _oob(run: PerfRun, m: re.Match[str]) -> None:
    run.out_of_bounds = int(m["n"])


def _avg(run: PerfRun, m: re.Match[str]) -> None:
    run.avg_busbw_GBps = number(m["bw"])
    run.concluded = True


def _set(attr: str, group: str) -> Callable[[PerfRun, re.Match[str]], None]:
    def fill(run: PerfRun, m: re.Match[str]) -> None:
        setattr(run, attr, m[group])

    return fill


def _failure(run: PerfRun, m: re.Match[str]) -> None:
    run.failures.append(m.string.strip())


# The line kinds, each from its format string (nccl-tests src/util.cu, src/common.cu,
# src/common.h; v1.0.0 and v2.0.0 src/common.cu for the old header and device lines), and
# whether the kind opens a run (a second run's opening lines start a new one).
_LINES: tuple[tuple[re.Pattern[str], Callable[[PerfRun, re.Match[str]], None], bool], ...] = (
    (re.compile(r"#?\s*nThreads?:? (?P<rest>.*nGpus.*)"), _settings, True),
    (
        re.compile(
            r"#?\s*\bRank\s+(?P<rank>\d+)(?:\s+Group\s+\d+)?(?:\s+Pid\s+(?P<pid>\d+))?\s+on\s+"
            r"(?P<host>\S+)\s+device\s+(?P<dev>\d+)\s+\[[^\]]*\]\s*(?P<name>.*)"
        ),
        _device,
        False,
    ),
    (re.compile(r"#?\s*Out of bounds values\s*:\s*(?P<n>\d+)"), _oob, False),
    (re.compile(r"#?\s*Avg bus bandwidth\s*:\s*(?P<bw>\S+)"), _avg, False),
    (re.compile(r"# Collective test starting: (?P<t>\S+)"), _set("test", "t"), True),
    (re.compile(r"# nccl-tests version (?P<v>\S+)"), _set("version", "v"), True),
    (re.compile(r"^NCCL version (?P<v>[\d.]+)"), _set("nccl_version", "v"), False),
    # NCCL's own lines between the rows (init.cc "Using network %s"; before 2.12 only the
    # transport's "NET/Socket : Using" / "NET/IB : Using")
    (
        re.compile(r"NCCL INFO (?:Using network |NET/)(?P<n>IB|Socket)\b"),
        _set("network", "n"),
        False,
    ),
    (
        re.compile(r"\S: Test (?:NCCL|CUDA) failure |\S: Test timeout \(|^NCCL failure "),
        _failure,
        False,
    ),
)
_PREFILTER = (
    "Using network",
    "NET/",
    "nThread",
    "Rank",
    "Out of bounds",
    "Avg bus",
    "Collective test",
    "nccl-tests ver",
    "NCCL version",
    "failure",
    "Test timeout",
)


def _row_table(
    tokens: list[str], table: Table | None, run: PerfRun | None
) -> tuple[Table, bool] | None:
    """The layout a line shaped like a row belongs to, and whether it starts another run: the
    table so far when the line fits it (after that run's footer, a run of its own), else the
    layout of its own cells (a second table when the run so far has rows)."""
    if table is not None and table.shaped(tokens):
        return table, run is None or run.concluded
    inferred = Table.from_row(tokens)
    if inferred is None:
        return None
    return inferred, run is None or bool(run.rows or run.concluded)


def parse_text(lines: Iterable[str], source: str) -> list[PerfRun]:
    """Every run in ``lines``: a run's opening lines (its version, test name, settings), a header
    or rows after another run's rows or footer start the next one."""
    runs: list[PerfRun] = []
    run: PerfRun | None = None
    table: Table | None = None
    for raw in lines:
        line = _MPI_PREFIX.sub("", raw.rstrip("\r\n"))
        stripped = line.strip().lstrip(">").lstrip()  # a line quoted in a thread
        tokens = stripped.split()
        if not tokens:
            continue
        if run is not None and len(run.rows) >= MAX_TEST_ROWS and tokens[0].isdigit():
            run.error = (
                f"more than {MAX_TEST_ROWS} rows: the rest not read"  # each is a row of every view
            )
            continue
        # a row starts with its size and count; NCCL's own lines (host:pid:tid ...) may start
        # with a digit, but never with two numbers
        found = _row_table(tokens, table, run) if starts_row(tokens) else None
        if found is not None:
            table, fresh = found
            if run is None or fresh:
                run = PerfRun(source)
                runs.append(run)
            run.wrong_column = table.wrong
            row = table.row(tokens)
            if row is None:
                run.cut_rows += 1
            else:
                run.rows.append(row)
            continue
        announced = header_table(stripped, table is not None)
        if announced is not None:
            if run is None or run.rows or run.concluded:
                run = PerfRun(source)
                runs.append(run)
            table = announced
            run.wrong_column = table.wrong
            continue
        if not any(p in line for p in _PREFILTER):
            continue
        for pattern, fill, opens in _LINES:
            m = pattern.search(line)
            if m is None:
                continue
            if run is None or (opens and (run.settings or run.rows or run.concluded)):
                run, table = PerfRun(source), None
                runs.append(run)
            fill(run, m)
            break
    return [r for r in runs if _holds_anything(r)]


def _holds_anything(run: PerfRun) -> bool:
    return bool(
        run.settings or run.rows or run.cut_rows or run.devices or run.failures
        or run.avg_busbw_GBps is not None or run.out_of_bounds is not None
    )  # fmt: skip
