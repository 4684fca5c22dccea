"""PyTorch Flight Recorder dumps: read them safely and match them across ranks as torchfrtrace does.

A dump (``_dump_fr_trace()``, the ``TORCH_FR_DUMP_TEMP_FILE`` files, or the JSON form of
``_dump_fr_trace_json()``) is untrusted input from a ticket: ``frload.py`` reads it without
running code and within bounds, or says why not. Dumps are gated on their keys, never on their
version string.

The analysis mirrors torchfrtrace (``torch/distributed/flight_recorder/components/builder.py``
and ``utils.py``): entries are grouped by process group (its name plus its rank set), buffers
that wrapped are aligned, collectives are matched by ``collective_seq_id`` and point-to-point
ops by their order on each (sender, receiver) pair with their ``p2p_seq_id``; what it finds is
described in docs/flight-recorder.md. Memory: dumps are folded in one at a time; per process
group only one row per sequence number remains (the op signatures seen there, and which ranks
showed each as a bit mask), never every rank's entries at once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# the ticket's sniff, re-exported: the reader and the ticket recognise a dump by one test
from nccldoctor.forensics.dumphead import looks_like_dump as looks_like_dump
from nccldoctor.forensics.frload import load_dump, read_dump
from nccldoctor.forensics.frreading import (
    STACK_FRAMES,
    Divergence,
    DumpRead,
    FlightRecorderReading,
    GroupReading,
    RankTail,
    tail_of,
)
from nccldoctor.forensics.frsigs import Sig, bits, mismatch_kind, op_type, payload_texts, side_of
from nccldoctor.limits import MAX_DUMP_SIGNATURE_BYTES, MAX_SIGNATURE_BYTES

# torchfrtrace's file name rule (loader.py): the rank is the number the name ends with.
_RANK_IN_NAME = re.compile(r"(\d+)(?:\.json|\.pkl|\.pickle)?$")
# The divergences kept per process group; later ones are counted (torchfrtrace's mismatch_cap).
MISMATCH_CAP = 10
# Ranks are bits of a mask: a file name claiming rank 10**9 must not cost 125 MB.
MAX_RANK = 1 << 20


def load_flight_recorder(data: bytes) -> tuple[list[dict] | None, str | None]:
    """The entries of one dump, reduced to what a rank's hang evidence shows; (None, why not)."""
    loaded = load_dump(data)
    if loaded.document is None:
        return None, f"unreadable flight recorder dump: {loaded.error}"
    keep = ("record_id", "collective_seq_id", "p2p_seq_id", "profiling_name", "state",
            "input_sizes", "time_created_ns", "duration_ms", "timeout_ms", "process_group")  # fmt: skip
    entries = loaded.document["entries"]
    return [{k: e[k] for k in keep if k in e} for e in entries if isinstance(e, dict)], None


def rank_of(name: str) -> int | None:
    """The rank a dump file's name gives (``nccl_trace_rank_3``, ``fr_trace_rank_3.json``)."""
    m = _RANK_IN_NAME.search(Path(name).name)
    return int(m[1]) if m else None


class _Group:
    def __init__(self, name: str, desc: str, ranks: frozenset[int] | None) -> None:
        self.name, self.desc, self.ranks = name, desc, ranks
        self.slots: dict[int, dict[Sig, int]] = {}  # seq -> signature -> bit mask of ranks
        self.seen: set[int] = set()  # ranks whose dump holds this group
        self.floor = 0  # seqs below it fell out of some member's buffer
        self.tails: dict[int, RankTail] = {}
        # p2p: (src, dst) -> side ("send" from src's dump, "recv" from dst's) -> signatures
        self.p2p: dict[tuple[int, int], dict[str, list[tuple[int, Sig]]]] = {}
        self.wrapped: set[int] = set()


class Analysis:
    """Fold dumps in one at a time (``add``), then read the result (``reading``)."""

    def __init__(self) -> None:
        self.dumps: list[DumpRead] = []
        self._groups: dict[tuple[str, str, frozenset[int] | None], _Group] = {}
        self._ranks: set[int] = set()

    def add_file(self, path: Path, rank: int | None = None) -> DumpRead:
        try:
            data = read_dump(path)
        except OSError as exc:
            read = DumpRead(str(path), rank, error=f"unreadable: {exc.strerror or exc}")
            self.dumps.append(read)
            return read
        return self.add(data, str(path), rank if rank is not None else rank_of(str(path)))

    def add(self, data: bytes, source: str, rank: int | None) -> DumpRead:
        loaded = load_dump(data)
        read = DumpRead(source, rank, error=loaded.error, refused=loaded.refused)
        self.dumps.append(read)
        doc = loaded.document
        if doc is None:
            return read
        version = doc.get("version")
        read.version = str(version) if version is not None else None
        read.entries = len(doc["entries"])
        if rank is None or not 0 <= rank < MAX_RANK:
            read.error = "read in part: the file name does not say which rank wrote it"
            return read
        if rank in self._ranks:
            read.error = f"ignored: a second dump of rank {rank}"
            return read
        self._ranks.add(rank)
        read.skipped, over = self._fold(rank, doc)
        if over:
            read.error = (
                f"read in part: its entries' sizes and dtypes print to over "
                f"{MAX_DUMP_SIGNATURE_BYTES >> 20} MiB (one value referenced over and over); "
                f"{read.skipped} of {read.entries} entries not matched"
            )
        elif read.skipped:
            read.error = (
                f"read in part: {read.skipped} of {read.entries} entries lack the keys the "
                "matching needs (process_group, profiling_name, a sequence id)"
            )
        return read

    def _group_of(self, rank: int, pg: Any, config: dict[str, Any]) -> _Group:
        name, desc = (str(pg[0]), str(pg[1])) if isinstance(pg, (list, tuple)) else (str(pg), "")
        ranks = _members(name, desc, config)
        key = (name, desc, ranks)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group(name, desc, ranks)
        group.seen.add(rank)
        return group

    def _fold(self, rank: int, doc: dict[str, Any]) -> tuple[int, bool]:
        """Fold one rank's entries into the groups' rows; returns how many it had to skip, and
        whether it stopped at MAX_DUMP_SIGNATURE_BYTES (the rest are skipped too)."""
        config = doc.get("pg_config") if isinstance(doc.get("pg_config"), dict) else {}
        bit = 1 << rank
        groups: dict[Any, _Group] = {}
        pending: dict[_Group, tuple[int, Sig]] = {}
        first: dict[_Group, int] = {}
        last: dict[_Group, dict[str, Any]] = {}
        completed: dict[_Group, dict[str, Any]] = {}
        entries = doc["entries"]
        skipped = spent = 0
        wrapped = bool(entries) and _record_id(entries[0]) > 0
        get_group = groups.get
        for e in entries:
            if spent > MAX_DUMP_SIGNATURE_BYTES:
                skipped += 1
                continue
            try:
                pg = e["process_group"]
                group = get_group(pg) if pg.__class__ is tuple else None
                if group is None:
                    key = pg if isinstance(pg, str) else tuple(pg)
                    group = get_group(key)
                    if group is None:
                        group = groups[key] = self._group_of(rank, pg, config)
                p2p = e.get("is_p2p")
                seq = int(e["p2p_seq_id"] if p2p else e.get("collective_seq_id", e.get("seq_id")))
                state = e.get("state")
                sig = (
                    op_type(e["profiling_name"]),
                    repr((e.get("input_sizes"), e.get("output_sizes"),
                          e.get("input_dtypes"), e.get("output_dtypes"))),
                    str(state),
                )  # fmt: skip
                spent += len(sig[1])  # each entry's repr is work: a shared value repeats it
                if len(sig[1]) > MAX_SIGNATURE_BYTES:
                    raise ValueError(sig[0])
            except (KeyError, TypeError, ValueError, IndexError, AttributeError):
                skipped += 1
                continue
            last[group] = e
            if state == "completed":
                completed[group] = e
            if p2p:
                try:
                    self._fold_p2p(group, e, seq, sig)
                except ValueError:  # a peer that is no number
                    skipped += 1
                continue
            if group not in first:
                first[group] = seq
            cur = pending.get(group)
            if cur is not None and cur[0] == seq:  # one more op of a coalesced collective
                pending[group] = (seq, cur[1] + sig)
                continue
            if cur is not None:
                _put(group, cur, bit)
            pending[group] = (seq, sig)
        for group, cur in pending.items():
            _put(group, cur, bit)
        status = doc.get("pg_status") if isinstance(doc.get("pg_status"), dict) else {}
        for group in set(groups.values()):
            if wrapped:
                group.wrapped.add(rank)
                group.floor = max(group.floor, first.get(group, 0))
            group.tails[rank] = tail_of(
                rank, entries, last.get(group), completed.get(group), status
            )
        return skipped, spent > MAX_DUMP_SIGNATURE_BYTES

    def _fold_p2p(self, group: _Group, e: dict[str, Any], seq: int, sig: Sig) -> None:
        """Send ``a->b`` / recv ``b<-a`` in group ranks: ProcessGroupNCCL::send and ::recv name
        them ``c10::str("nccl:recv ", rank_, "<-", srcRank)`` (torch/csrc/distributed/c10d/
        ProcessGroupNCCL.cpp), see docs/flight-recorder.md#reading."""
        meta = str(e.get("profiling_name")).split(" ", 1)
        if len(meta) != 2:
            return
        sizes_in, sizes_out, dtypes = payload_texts(sig[1])
        dt_in, _, dt_out = dtypes.partition("->")
        if sig[0] == "send" and "->" in meta[1]:
            src, dst = (int(x) for x in meta[1].split("->"))
            side, sizes, dtype = "send", sizes_in, dt_in
        elif sig[0] == "recv" and "<-" in meta[1]:
            dst, src = (int(x) for x in meta[1].split("<-"))
            side, sizes, dtype = "recv", sizes_out, dt_out
        else:
            return
        # a send's input and its receive's output must agree: only those are compared
        compare = ("p2p", repr((sizes, sizes, dtype, dtype)), "")
        group.p2p.setdefault((src, dst), {}).setdefault(side, []).append((seq, compare))

    def reading(self) -> FlightRecorderReading:
        groups = [self._judge(g) for g in self._groups.values()]
        groups.sort(key=lambda g: (g.name, g.desc, g.ranks or []))
        return FlightRecorderReading(self.dumps, groups)

    def _judge(self, g: _Group) -> GroupReading:
        members = set(g.ranks) if g.ranks is not None else set(g.seen)
        dumped = members & self._ranks
        no_dump = sorted(members - self._ranks)
        # a wrapped member that has no entry of this group tells nothing about it
        judged = dumped - {r for r in g.wrapped if g.tails.get(r, RankTail(r)).last_seq is None}
        mask_all = sum(1 << r for r in judged)
        divergences: list[Divergence] = []
        more = matched = 0
        seqs = sorted(s for s in g.slots if s >= g.floor)
        missing_found = False
        for seq in seqs:
            row = g.slots[seq]
            seen = 0
            for m in row.values():
                seen |= m
            missing = bits(mask_all & ~seen)
            diverged = None
            if missing and not missing_found:
                missing_found = True  # later rows pair up wrongly, as torchfrtrace notes
                diverged = _divergence("missing", seq, False, row, missing, g)
            elif len(row) > 1:
                kind = mismatch_kind(row)
                if kind:
                    diverged = _divergence(kind, seq, False, row, [], g)
            if diverged is None:
                matched += not missing
            elif len(divergences) < MISMATCH_CAP:
                divergences.append(diverged)
            else:
                more += 1
        for (src, dst), sides in sorted(g.p2p.items()):
            d = _judge_p2p(g, src, dst, sides, dumped)
            if d is None:
                continue
            if len(divergences) < MISMATCH_CAP:
                divergences.append(d)
            else:
                more += 1
        return GroupReading(
            name=g.name,
            desc=g.desc,
            ranks=sorted(g.ranks) if g.ranks is not None else None,
            dumped=sorted(dumped),
            no_dump=no_dump,
            first_seq=seqs[0] if seqs else None,
            last_seq=seqs[-1] if seqs else None,
            matched=matched,
            divergences=divergences,
            more=more,
        )


def analyse(paths: Iterable[Path]) -> FlightRecorderReading:
    """Every dump among ``paths``, read one at a time, matched across ranks."""
    analysis = Analysis()
    for path in paths:
        analysis.add_file(path)
    return analysis.reading()


def _record_id(e: Any) -> int:
    try:
        return int(e["record_id"])
    except (KeyError, TypeError, ValueError):
        return 0


def _members(name: str, desc: str, config: dict[str, Any]) -> frozenset[int] | None:
    """A process group's global ranks from the dump's ``pg_config``: by name, else by its
    description; a gloo dump of torch 2.13 names its one group '' while its entries say '0'."""
    entry = config.get(name)
    if not isinstance(entry, dict):
        by_desc = [c for c in config.values() if isinstance(c, dict) and c.get("desc") == desc]
        if len(by_desc) == 1:
            entry = by_desc[0]
        elif len(config) == 1:
            entry = next(iter(config.values()))
    if not isinstance(entry, dict):
        return None
    ranks = entry.get("ranks")
    # a string '[0, 1]' in every version seen; parsed as numbers, never evaluated
    values = re.findall(r"-?\d+", ranks) if isinstance(ranks, str) else ranks
    try:
        return frozenset(int(r) for r in values)
    except (TypeError, ValueError):
        return None


def _put(group: _Group, cur: tuple[int, Sig], bit: int) -> None:
    seq, sig = cur
    row = group.slots.get(seq)
    if row is None:
        row = group.slots[seq] = {}
    row[sig] = row.get(sig, 0) | bit


def _divergence(
    kind: str, seq: int, p2p: bool, row: dict[Sig, int], missing: list[int], g: _Group
) -> Divergence:
    sides = sorted((side_of(sig, bits(m)) for sig, m in row.items()), key=lambda s: -len(s.ranks))
    if kind == "missing":
        culprits = [g.tails[r] for r in missing if r in g.tails]
        culprits += [RankTail(r) for r in missing if r not in g.tails]
    else:
        # the minority side is the likely culprit (torchfrtrace assumes the first rank is right)
        culprits = [g.tails[r] for s in sides[1:] for r in s.ranks if r in g.tails]
    return Divergence(kind, seq, p2p, sides[0].op, sides, missing, culprits[:STACK_FRAMES])


def _judge_p2p(
    g: _Group, src: int, dst: int, sides: dict[str, list[tuple[int, Sig]]], dumped: set[int]
) -> Divergence | None:
    """Sends ``src->dst`` against the receives at ``dst``, in order. Only buffers that never
    wrapped hold a pair's whole history, so only those are judged."""
    order = sorted(g.ranks) if g.ranks is not None else sorted(g.seen)
    if min(src, dst) < 0 or max(src, dst) >= len(order):
        return None
    gsrc, gdst = order[src], order[dst]
    if not {gsrc, gdst} <= dumped or {gsrc, gdst} & g.wrapped:
        return None
    sends, recvs = sides.get("send", []), sides.get("recv", [])
    for i in range(max(len(sends), len(recvs))):
        s = sends[i] if i < len(sends) else None
        r = recvs[i] if i < len(recvs) else None
        if s is not None and r is not None and s[1] == r[1]:
            continue
        row: dict[Sig, int] = {}
        for item, who, name in ((s, gsrc, f"send {src}->{dst}"), (r, gdst, f"recv {dst}<-{src}")):
            if item is not None:
                key = (name, *item[1][1:])
                row[key] = row.get(key, 0) | (1 << who)
        missing = [gdst] if r is None else [gsrc] if s is None else []
        seq = (s or r)[0]  # type: ignore[index]
        kind = "missing" if missing else "size"
        return _divergence(kind, seq, True, row, missing, g)
    return None
