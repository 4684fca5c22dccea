"""Which algorithm and protocol NCCL uses per message size: from its log, or from its own model.

NCCL ≥ 2.20 logs the choice per call on rank 0 with ``NCCL_DEBUG_SUBSYS=TUNING`` (docs/nccl-log-formats.md#per-call-algorithm); when
it does not, the printed latency/bandwidth table (docs/nccl-log-formats.md#tuning-table) still lets us redo its choice. The cost
is ``ncclTopoGetAlgoTime`` (src/graph/tuning.cc, v2.21–v2.30): ``time = lat + bytes / (1000 ×
bw)`` µs, with the table's bandwidth scaled by ``treeCorrectionFactor`` for Tree AllReduce below
512 MiB, and Ring/Simple AllReduce latency ×1.4 across nodes once each rank's share per channel
reaches 64 bytes (×1.9 on GPUs older than sm80, which the log does not tell us: we assume sm80+).
A tuner plugin may override the model; the summary says when one was loaded.
"""

from __future__ import annotations

from typing import Any

from nccldoctor.ncclog.records import CommRank, TuningTable

# src/graph/tuning.cc treeCorrectionFactor[protocol][log2(bytes/64)] (LL, LL128, Simple)
_TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
)  # fmt: skip
_PROTO_INDEX = {"LL": 0, "LL128": 1, "Simple": 2}
SIZES = [1 << k for k in range(0, 35)]  # 1 B … 16 GiB: the sizes the model is evaluated at


def algo_time(
    func: str, algo: str, proto: str, lat: float, bw: float, nbytes: int, topo: dict[str, int]
) -> float | None:
    """NCCL's estimated time in µs for one call, or None when the pair is disabled (bw 0)."""
    if bw <= 0:
        return None
    log_size = (nbytes >> 6).bit_length() - 1
    if algo == "Tree" and func == "AllReduce" and 0 <= log_size < 23:
        bw *= _TREE_CORRECTION[_PROTO_INDEX.get(proto, 2)][log_size]
    per_channel = nbytes // max(1, topo.get("channels", 1) * topo.get("nranks", 1))
    if (
        algo == "Ring"
        and proto == "Simple"
        and func == "AllReduce"
        and topo.get("nnodes", 1) > 1
        and per_channel >= 64
    ):
        lat *= 1.4
    return lat + nbytes / (1000 * bw)


def best(
    cells: dict[tuple[str, str], tuple[float, float]], func: str, nbytes: int, topo: dict[str, int]
) -> tuple[str, str] | None:
    """The (algorithm, protocol) with the least estimated time; ties go to the table's order."""
    choice, least = None, float("inf")
    for (algo, proto), (lat, bw) in cells.items():
        t = algo_time(func, algo, proto, lat, bw, nbytes, topo)
        if t is not None and t < least:
            choice, least = (algo, proto), t
    return choice


def model_ranges(table: TuningTable, topo: dict[str, int]) -> list[dict[str, Any]]:
    """Size ranges per function where the model picks one (algorithm, protocol)."""
    out: list[dict[str, Any]] = []
    for func, cells in table.rows.items():
        current, start = None, 0
        for size in SIZES:
            pick = best(cells, func, size, topo)
            if pick == current:
                continue
            if current is not None:
                out.append(_range(func, current, start, size - 1, "tuning-model"))
                start = size
            current = pick
        if current is not None:
            out.append(_range(func, current, start, None, "tuning-model"))
    return out


def log_ranges(algo_log: dict[tuple[str, str, str], list[int]]) -> list[dict[str, Any]]:
    """Ranges as logged: per (function, algorithm, protocol) the smallest and largest size seen."""
    rows = [
        _range(func if func != "?" else None, (algo, proto), lo, hi, "log", calls=n)
        for (func, algo, proto), (lo, hi, n) in algo_log.items()
    ]
    return sorted(rows, key=lambda r: (r["collective"] or "", r["min_bytes"]))


def _range(
    func: str | None,
    pick: tuple[str, str],
    lo: int,
    hi: int | None,
    source: str,
    calls: int | None = None,
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "collective": func,
        "algorithm": pick[0],
        "protocol": pick[1],
        "min_bytes": lo,
        "max_bytes": hi,
        "source": source,
    }
    if calls is not None:
        row["calls"] = calls
    return row


def algorithms(comm: CommRank, topo: dict[str, int]) -> list[dict[str, Any]]:
    """Logged choices where NCCL printed them; the model's for the functions it did not."""
    logged = log_ranges(comm.algo_log)
    seen = {r["collective"] for r in logged}
    modelled = [r for r in model_ranges(comm.tuning, topo) if r["collective"] not in seen]
    return logged + modelled
