"""nccl-tests output (``all_reduce_perf`` and the other ``*_perf``), text and ``-J`` JSON, as data.

Every era's format is in the formats page (docs/nccl-tests-formats.md#nccl-tests); each line kind is one
row of ``_LINES`` (a regex and what it fills), the table by its own header: the column names of
the ``#  size count type ...`` line say where each row's numbers are, so the old ``error``
column, ``-C`` (``cputime``), ``-I 1`` (``i_min`` ...) and ``-S`` (a trailing timestamp) need no
code of their own. Output as people paste it is read too: lines whose ``#`` the tracker ate,
behind an indented or quoted MPI prefix, and rows without any header, whose layout their own
cells give (``_Table.from_row``). It judges nothing: the rules are ``checks/nccl_tests.py``.

Bad input never raises: a row cut short is counted in ``cut_rows``, an unreadable JSON document
becomes a run with ``error`` set.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from nccldoctor import jsondoc
from nccldoctor.limits import MAX_TEST_ROWS

# MPI launchers prefix each line with the rank and stream (``[1,0]<stdout>:``); pasted into a
# thread it may be indented or quoted (``>``)
_MPI_PREFIX = re.compile(r"^[\s>]*\[\d+,\d+\]<std\w+>:")
# The cells a row starts with, every era (src/common.cu test_typenames and test_opnames; v1
# "char"/"int"; "none" for the collectives without a reduction): a row without its header is
# known by them, and where its root and halves are by how many cells follow
_TYPES = frozenset(
    {"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double",
     "bfloat16", "f8e4m3", "f8e5m2", "char", "int"}
)  # fmt: skip
_OPS = frozenset({"sum", "prod", "max", "min", "avg", "mulsum", "none"})
# One measured cell: a number as getFloatStr prints it (%f, or %e when wide), N/A (-c 0), or the
# old max-delta column's %5.0le ("3e-08")
_CELL = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|N/A")
# What is left of a cell the paste cut: a prefix of one of the above
_CELL_CUT = re.compile(r"[-+]?[\d.]*(?:[eE][-+]?\d*)?|N/?A?")
# -S appends the time each row was measured (writeTimestamp: "%Y-%m-%d %H:%M:%S")
_STAMP = re.compile(r"\d{4}-\d\d-\d\d")
# the header cell names of each era mapped to one vocabulary (util.cu writeResultHeader;
# v2.0-2.12 each test's print_header; v1 "bytes N ... res")
_COLUMN = {
    "size": "size",
    "bytes": "size",
    "count": "count",
    "N": "count",
    "type": "type",
    "redop": "redop",
    "op": "redop",
    "root": "root",
    "time": "time_us",
    "cputime": "time_us",
    "algbw": "algbw_GBps",
    "busbw": "busbw_GBps",
    "#wrong": "wrong",
    "error": "wrong",
    "res": "wrong",
}


@dataclass
class Half:
    """One side (out-of-place or in-place) of a table row."""

    time_us: float | None = None
    algbw_GBps: float | None = None
    busbw_GBps: float | None = None
    wrong: float | None = None  # None: validation off ("N/A"); old eras print a max delta


@dataclass
class Row:
    size: int
    count: int | None
    type: str | None
    redop: str | None
    root: str | None
    out_of_place: Half | None
    in_place: Half | None


@dataclass
class Device:
    rank: int
    host: str
    device: int
    pid: int | None
    name: str


@dataclass
class PerfRun:
    """One ``*_perf`` run: its header, table, footer and failure lines."""

    source: str
    test: str | None = None  # all_reduce_perf ... (2.14+ print it; otherwise the file name)
    version: str | None = None  # nccl-tests' own version (2.17+)
    nccl_version: str | None = None
    settings: dict[str, str] = field(default_factory=dict)  # the "# nThread ..." line
    devices: list[Device] = field(default_factory=list)
    wrong_column: str | None = None  # "#wrong" counts elements; "error"/"res" is a max delta
    rows: list[Row] = field(default_factory=list)
    cut_rows: int = 0  # lines under the header that were not a whole row
    out_of_bounds: int | None = None
    avg_busbw_GBps: float | None = None
    failures: list[str] = field(default_factory=list)  # Test NCCL/CUDA failure, Test timeout
    network: str | None = None  # "Socket", "IB": NCCL INFO lines inside the output say it
    concluded: bool = False  # the footer was reached
    error: str | None = None  # why the file could not be read (JSON only)

    @property
    def peak_busbw_GBps(self) -> float | None:
        values = [
            h.busbw_GBps
            for r in self.rows
            for h in (r.out_of_place, r.in_place)
            if h is not None and h.busbw_GBps is not None
        ]
        return max(values) if values else None

    @property
    def hosts(self) -> list[str]:
        return sorted({d.host for d in self.devices})

    def wrong_rows(self) -> list[tuple[Row, str, float]]:
        """Rows whose ``#wrong`` count is not zero (the old max-delta column is no count)."""
        if self.wrong_column not in ("#wrong", None):
            return []
        found = []
        for row in self.rows:
            for side, half in (("out-of-place", row.out_of_place), ("in-place", row.in_place)):
                if half is not None and half.wrong:
                    found.append((row, side, half.wrong))
        return found

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["peak_busbw_GBps"] = self.peak_busbw_GBps
        data["hosts"] = self.hosts
        return data


# ---- text -------------------------------------------------------------------------------------


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value else None  # "nan" is no value


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
    run.avg_busbw_GBps = _number(m["bw"])
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
# The header and units lines, also without their '#' (a paste outside a Markdown fence)
_HEADER = re.compile(r"#?\s*(?:size|bytes)\s+(?:count|N)\s")
# The units line under the header: an excerpt that starts there has today's layout
# (util.cu writeResultHeader without -C, -I or -S).
_UNITS = re.compile(r"#?\s*\(B\)\s+\(elements\)")
_TODAY = "# size count type redop root time algbw busbw #wrong time algbw busbw #wrong"
_TODAY_HALF = ["time", "algbw", "busbw", "#wrong"]
_PER_ITERATION = ["i_min", "i_max", "i_p99", "i_cv%"]


def _starts_row(tokens: list[str]) -> bool:
    """A row's first cells: its size and count, then a type (cut, if it is the last token)."""
    if not (tokens and tokens[0].isdigit()):
        return False
    if len(tokens) > 1 and not tokens[1].isdigit():
        return False
    if len(tokens) > 2:
        last = len(tokens) == 3
        return tokens[2] in _TYPES or (last and any(t.startswith(tokens[2]) for t in _TYPES))
    return True


class _Table:
    """The column layout the header line announced, or a headerless row's cells imply."""

    def __init__(self, header: str) -> None:
        names = header.lstrip("#").split()
        self.prefix: list[str] = []
        self.halves: list[list[str | None]] = [[], []]
        side = -1
        for name in names:
            key = _COLUMN.get(name)
            if key in ("time_us",):
                side += 1
            if side < 0:
                self.prefix.append(key or name)
            elif side < 2:
                self.halves[side].append(key if key in Half.__dataclass_fields__ else None)
        self.wrong = next((n for n in names if _COLUMN.get(n) == "wrong"), None)
        self.width = len(self.prefix) + len(self.halves[0]) + len(self.halves[1])

    @classmethod
    def from_row(cls, tokens: list[str]) -> _Table | None:
        """The layout of a whole row met without a header: size, count and type, a reduction
        when the next cell names one, a root when one cell more than whole halves follows, and
        two halves of four cells (eight with -I's per-iteration columns)."""
        if not _starts_row(tokens) or len(tokens) < 4:
            return None
        prefix = ["size", "count", "type"] + (["redop"] if tokens[3] in _OPS else [])
        cells = tokens[len(prefix) :]
        if len(cells) >= 2 and _STAMP.fullmatch(cells[-2]):
            cells = cells[:-2]
        if not cells or not all(_CELL.fullmatch(c) for c in cells):
            return None
        if len(cells) % 4 == 1:
            prefix.append("root")
            cells = cells[1:]
        side = {8: _TODAY_HALF, 16: _TODAY_HALF + _PER_ITERATION}.get(len(cells))
        if side is None:
            return None
        # the old max-delta column prints %5.0le ("0e+00"), today's count an integer (%6g)
        delta = any("e" in c for c in (cells[3], cells[3 + len(side) // 2]))
        wrong = "error" if delta else "#wrong"
        names = [*prefix, *(n.replace("#wrong", wrong) for n in side + side)]
        return cls("# " + " ".join(names))

    def shaped(self, tokens: list[str]) -> bool:
        """Whether ``tokens`` are this table's row as far as they go (a row the paste cut too):
        numbers where numbers belong, a type and a reduction where those do."""
        for i, token in enumerate(tokens):
            last = i == len(tokens) - 1
            column = self.prefix[i] if i < len(self.prefix) else None
            if column in ("size", "count"):
                ok = token.isdigit()
            elif column == "type":
                ok = token in _TYPES or (last and any(t.startswith(token) for t in _TYPES))
            elif column == "redop":
                ok = token in _OPS or (last and any(o.startswith(token) for o in _OPS))
            else:
                ok = bool((_CELL_CUT if last else _CELL).fullmatch(token))
            if not ok:
                return i >= self.width  # past the measured cells: -S's timestamp
        return True

    def row(self, tokens: list[str]) -> Row | None:
        if len(tokens) < self.width or not self.shaped(tokens[: self.width]):
            return None
        if any(not _CELL.fullmatch(c) for c in tokens[len(self.prefix) : self.width]):
            return None  # a measured cell the paste cut ("3e")
        head = dict(zip(self.prefix, tokens, strict=False))
        size = head.get("size", "")
        if not size.isdigit():
            return None
        at = len(self.prefix)
        halves: list[Half | None] = []
        for names in self.halves:
            cells = tokens[at : at + len(names)]
            at += len(names)
            values = {n: _number(c) for n, c in zip(names, cells, strict=True) if n}
            halves.append(Half(**values) if names and any(c != "" for c in cells) else None)
        count = head.get("count", "")
        return Row(
            int(size),
            int(count) if count.isdigit() else None,
            head.get("type"),
            head.get("redop"),
            head.get("root"),
            halves[0],
            halves[1],
        )


def _row_table(
    tokens: list[str], table: _Table | None, run: PerfRun | None
) -> tuple[_Table, bool] | None:
    """The layout a line shaped like a row belongs to, and whether it starts another run: the
    table so far when the line fits it (after that run's footer, a run of its own), else the
    layout of its own cells (a second table when the run so far has rows)."""
    if table is not None and table.shaped(tokens):
        return table, run is None or run.concluded
    inferred = _Table.from_row(tokens)
    if inferred is None:
        return None
    return inferred, run is None or bool(run.rows or run.concluded)


def parse_text(lines: Iterable[str], source: str) -> list[PerfRun]:
    """Every run in ``lines``: a run's opening lines (its version, test name, settings), a header
    or rows after another run's rows or footer start the next one."""
    runs: list[PerfRun] = []
    run: PerfRun | None = None
    table: _Table | None = None
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
        found = _row_table(tokens, table, run) if _starts_row(tokens) else None
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
        header = _HEADER.match(stripped) or (table is None and _UNITS.match(stripped))
        if header:
            if run is None or run.rows or run.concluded:
                run = PerfRun(source)
                runs.append(run)
            table = _Table(stripped if header.re is _HEADER else _TODAY)
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


# ---- -J JSON ----------------------------------------------------------------------------------


def is_json_document(data: Any) -> bool:
    """The top-level keys of nccl-tests' ``-J`` file (util.cu jsonOutputInit and the footer)."""
    return isinstance(data, dict) and "results" in data and ("config" in data or "args" in data)


def parse_json(text: str, source: str) -> PerfRun:
    """The run in a ``-J`` document; ``error`` says why when it is not one."""
    run = PerfRun(source)
    data, run.error = jsondoc.load(
        text, is_json_document, "nccl-tests' -J output", ": nccl-tests stopped while writing it?"
    )
    if data is None:
        return run
    args = data.get("args")
    if isinstance(args, list) and args and isinstance(args[0], str):
        run.test = args[0].rsplit("/", 1)[-1]
    version = data.get("nccl_version")
    if isinstance(version, int) and version > 0:
        # NCCL_VERSION_CODE: major*10000 + minor*100 + patch from 2.9 on
        run.nccl_version = f"{version // 10000}.{version // 100 % 100}.{version % 100}"
    config = data.get("config")
    if isinstance(config, dict):
        run.settings = {str(k): str(v) for k, v in config.items() if not isinstance(v, list)}
        for d in jsondoc.as_list(config.get("devices")):
            if isinstance(d, dict) and isinstance(d.get("rank"), int):
                run.devices.append(
                    Device(
                        d["rank"],
                        str(d.get("hostname", "?")),
                        jsondoc.as_int(d.get("device")),
                        jsondoc.as_int(d.get("pid")),
                        str(d.get("device_info", "")),
                    )
                )
    run.wrong_column = "#wrong"
    for entry in jsondoc.as_list(data.get("results")):
        if not isinstance(entry, dict) or not isinstance(entry.get("size"), int):
            run.cut_rows += 1
            continue
        run.rows.append(
            Row(
                entry["size"],
                jsondoc.as_int(entry.get("count")),
                _str(entry.get("type")),
                _str(entry.get("redop")),
                _str(entry.get("root")),
                _half(entry.get("out_of_place")),
                _half(entry.get("in_place")),
            )
        )
    oob = data.get("out_of_bounds")
    if isinstance(oob, dict) and isinstance(oob.get("count"), int):
        run.out_of_bounds = oob["count"]
    avg = data.get("average_bus_bandwidth")
    if isinstance(avg, dict):
        run.avg_busbw_GBps = _json_number(avg.get("bandwidth"))
        run.concluded = True
    for error in jsondoc.as_list(data.get("errors")):
        if isinstance(error, str) and error:
            run.failures.append(error)
    return run


def _str(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) else None


def _json_number(value: Any) -> float | None:
    # jsonDouble writes NaN as the string "nan"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _half(value: Any) -> Half | None:
    if not isinstance(value, dict):
        return None
    return Half(
        _json_number(value.get("time", value.get("cpu_time"))),
        _json_number(value.get("alg_bw")),
        _json_number(value.get("bus_bw")),
        _json_number(value.get("nwrong")),
    )


# ---- what the rules read ----------------------------------------------------------------------


@dataclass
class PerfReading:
    """The subject of the ``nccl_tests`` rules: the runs, and what else the ticket says of the
    network they ran on."""

    runs: list[PerfRun]
    log_network: str | None = None  # "Socket", "IB" ...: NCCL's log lines in the same ticket
    link_GBps: dict[str, float] = field(default_factory=dict)  # host -> its NICs, GB/s


def link_GBps(ib_rates: Iterable[str], nic_mbps: Iterable[int]) -> float | None:
    """What a node's NICs carry together, in GB/s (nccl-tests' unit): its active InfiniBand/RoCE
    ports (``rate`` "200 Gb/sec (4X HDR)") when it has any, NCCL uses them all; otherwise its
    Ethernet links (``speed`` in Mb/s)."""
    ib = [float(m[1]) for r in ib_rates if (m := re.match(r"\s*([\d.]+)\s*Gb/sec", r))]
    if ib:
        return sum(ib) / 8
    eth = [s for s in nic_mbps if s and s > 0]
    return sum(eth) / 8000 if eth else None
