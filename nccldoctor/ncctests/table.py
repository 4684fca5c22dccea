"""The shape of nccl-tests' table: the column layout a header line announces (each era's cell
names mapped to one vocabulary, so the old ``error`` column, ``-C``, ``-I 1`` and ``-S`` need no
code of their own) or a headerless row's own cells imply, and whether a line is a row of it, one
the paste cut too. The cells and names are nccl-tests' own (src/common.cu, src/util.cu)."""

from __future__ import annotations

import re

from nccldoctor.ncctests.records import Half, Row

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

# The header and units lines, also without their '#' (a paste outside a Markdown fence)
_HEADER = re.compile(r"#?\s*(?:size|bytes)\s+(?:count|N)\s")
# The units line under the header: an excerpt that starts there has today's layout
# (util.cu writeResultHeader without -C, -I or -S).
_UNITS = re.compile(r"#?\s*\(B\)\s+\(elements\)")
_TODAY = "# size count type redop root time algbw busbw #wrong time algbw busbw #wrong"
_TODAY_HALF = ["time", "algbw", "busbw", "#wrong"]
_PER_ITERATION = ["i_min", "i_max", "i_p99", "i_cv%"]


def number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value else None  # "nan" is no value


def starts_row(tokens: list[str]) -> bool:
    """A row's first cells: its size and count, then a type (cut, if it is the last token)."""
    if not (tokens and tokens[0].isdigit()):
        return False
    if len(tokens) > 1 and not tokens[1].isdigit():
        return False
    if len(tokens) > 2:
        last = len(tokens) == 3
        return tokens[2] in _TYPES or (last and any(t.startswith(tokens[2]) for t in _TYPES))
    return True


class Table:
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
    def from_row(cls, tokens: list[str]) -> Table | None:
        """The layout of a whole row met without a header: size, count and type, a reduction
        when the next cell names one, a root when one cell more than whole halves follows, and
        two halves of four cells (eight with -I's per-iteration columns)."""
        if not starts_row(tokens) or len(tokens) < 4:
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
            values = {n: number(c) for n, c in zip(names, cells, strict=True) if n}
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


def header_table(line: str, after_table: bool) -> Table | None:
    """The layout a header line announces; a units line met before any header is today's
    (an excerpt that starts there)."""
    if _HEADER.match(line):
        return Table(line)
    if not after_table and _UNITS.match(line):
        return Table(_TODAY)
    return None
