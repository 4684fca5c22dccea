"""Benchmark: the Flight Recorder analysis of 1024 ranks' dumps of 2000 entries each against
``pickle.load`` of the same files, in the same run (target: at most 3x), and its memory; and what
the loader's bounds cost: the analysis against itself with the scan of each pickle skipped
(frload.scan, pickscan.py), alternated and repeated, the least CPU seconds of each compared
(target: at most 5%; the wall clock of a shared machine moves by more than that).

The dumps are made from a genuine one's shape (tests/fixtures/flightrec/gloo/skip, entries with
their Python frames): a world group of all ranks and a tensor-parallel group of 8 per rank, three
TP allreduces then one world allreduce per step; rank 517 skips the last world allreduce, which
the analysis must name. Every rank's buffer has wrapped (record ids start past 0). Memory is the
peak RSS growth of each measurement in its own child process: the analysis folds one dump at a
time, so it must stay far below what loading every rank's entries at once costs.

    python bench/fr.py            # BENCH_FR_RANKS=128 for a quick run, BENCH_FR_REPEAT=5
"""

from __future__ import annotations

import copy
import gc
import multiprocessing as mp
import os
import pickle
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checks import run_checks
from nccldoctor.forensics import frload, pickscan
from nccldoctor.forensics.flightrec import analyse
from nccldoctor.limits import MAX_DUMP_DEPTH, MAX_DUMP_OBJECTS, MAX_DUMP_TEXT_BYTES

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests/fixtures/flightrec/gloo/skip/pickle/nccl_trace_rank_0"
RANKS = int(os.environ.get("BENCH_FR_RANKS", "1024"))
ENTRIES, TP, CULPRIT = 2000, 8, 517 % RANKS
RATIO_LIMIT = 3.0
BOUNDS_LIMIT = 1.05  # the analysis with the scan over the analysis without it
REPEAT = int(os.environ.get("BENCH_FR_REPEAT", "5"))
FIRST_RECORD = 50_000  # the buffers wrapped long ago


def make_dump(template: dict, rank: int) -> bytes:
    """One rank's dump of ENTRIES entries in the real entry's shape."""
    real = template["entries"][-1]
    tp = rank // TP
    tp_ranks = list(range(tp * TP, tp * TP + TP))
    doc = {k: v for k, v in template.items() if k != "entries"}
    doc["pg_config"] = {
        "0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(RANKS)))},
        str(1 + tp): {"name": str(1 + tp), "desc": "tp", "ranks": str(tp_ranks)},
    }
    entries = []
    steps = ENTRIES // 4
    for i in range(ENTRIES):
        step, slot = divmod(i, 4)
        world = slot == 3
        if world and rank == CULPRIT and step == steps - 1:
            continue  # the culprit skips the last world allreduce
        e = copy.copy(real)
        # torch's pickler shares strings between entries, not the frames' lists and dicts
        e["frames"] = [dict(f) for f in real["frames"]]
        e["record_id"] = FIRST_RECORD + i
        e["op_id"] = e["collective_seq_id"] = 1000 + (step if world else step * 3 + slot)
        e["process_group"] = ("0", "default_pg") if world else (str(1 + tp), "tp")
        e["pg_id"] = 0 if world else 1
        e["time_created_ns"] = real["time_created_ns"] + i * 1000
        e["input_sizes"] = e["output_sizes"] = [[1 << 20]] if world else [[4096]]
        entries.append(e)
    doc["entries"] = entries
    return pickle.dumps(doc, protocol=pickle.HIGHEST_PROTOCOL)


def _rss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _baseline(paths: list[Path], out) -> None:
    gc.disable()  # as torchfrtrace's loader does
    before, t0 = _rss_kb(), time.perf_counter()
    loaded = []
    for p in paths:
        with open(p, "rb") as f:
            loaded.append(pickle.load(f))
    out.send((time.perf_counter() - t0, _rss_kb() - before, sum(len(d["entries"]) for d in loaded)))


def _analysis(paths: list[Path], out) -> None:
    before, t0, cpu0 = _rss_kb(), time.perf_counter(), time.process_time()
    reading = analyse(paths)
    found = run_checks("flightrec", reading)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    titles = [f.title for f in found if f.id == "flightrec.ranks-missing"]
    out.send((elapsed, _rss_kb() - before, titles, cpu))


def _analysis_unbounded(paths: list[Path], out) -> None:
    """The analysis as it was before the loader's bounds: no pickle is scanned."""
    frload.scan = lambda *_: None
    _analysis(paths, out)


def _scans(paths: list[Path], out) -> None:
    """The scan alone of every dump, as the loader runs it (CPU seconds)."""
    datas = [p.read_bytes() for p in paths]
    cpu0 = time.process_time()
    for data in datas:
        pickscan.scan(data, MAX_DUMP_OBJECTS, MAX_DUMP_TEXT_BYTES, MAX_DUMP_DEPTH)
    out.send((time.process_time() - cpu0,))


def measure(target, paths: list[Path]):
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(paths, send))
    proc.start()
    result = recv.recv()
    proc.join()
    return result


def main() -> int:
    template = pickle.loads(REAL.read_bytes())
    with tempfile.TemporaryDirectory(prefix="nccldoctor-bench-fr-") as tmp:
        t0 = time.perf_counter()
        paths = []
        for rank in range(RANKS):
            path = Path(tmp) / f"nccl_trace_rank_{rank}"
            path.write_bytes(make_dump(template, rank))
            paths.append(path)
        size = sum(p.stat().st_size for p in paths)
        print(f"made {RANKS} dumps x {ENTRIES} entries ({size / 2**20:.0f} MiB) "
              f"in {time.perf_counter() - t0:.1f} s")  # fmt: skip
        base_s, base_kb, entries = measure(_baseline, paths)
        walls, bounded, unbounded, scans = [], [], [], []
        for rep in range(REPEAT):  # alternated, either first in turn: the load falls on both
            if rep % 2:
                unbounded.append(measure(_analysis_unbounded, paths)[3])
            wall, fr_kb, titles, cpu = measure(_analysis, paths)
            walls.append(wall)
            bounded.append(cpu)
            if not rep % 2:
                unbounded.append(measure(_analysis_unbounded, paths)[3])
            scans.append(measure(_scans, paths)[0])
    fr_s = statistics.median(walls)
    # the least of each: the others' load only ever adds time (medians are printed beside)
    cpu_s, plain_s, scan_s = min(bounded), min(unbounded), min(scans)
    bounds = cpu_s / plain_s
    medians = statistics.median(bounded) / statistics.median(unbounded)
    ratio = fr_s / base_s
    print(f"pickle.load of every dump : {base_s:6.2f} s, RSS +{base_kb / 1024:7.0f} MiB "
          f"({entries} entries held at once)")  # fmt: skip
    print(f"analysis + flightrec rules: {fr_s:6.2f} s, RSS +{fr_kb / 1024:7.0f} MiB")
    print(f"ratio {ratio:.2f}x (limit {RATIO_LIMIT:.0f}x); memory {fr_kb / max(base_kb, 1):.3f}x")
    print(f"bounds: analysis {cpu_s:.2f} CPU s with the scan, {plain_s:.2f} without (least of "
          f"{REPEAT}, alternated): {bounds:.3f}x (limit {BOUNDS_LIMIT}x; medians {medians:.3f}x); "
          f"the scan alone {scan_s:.3f} s, {scan_s / cpu_s:.1%} of the analysis "
          f"({'C' if pickscan.NATIVE else 'Python'})")  # fmt: skip
    named = [t for t in titles if f"rank {CULPRIT} never joined" in t]
    print(named[0] if named else f"MISSED the culprit rank {CULPRIT}: {titles}")
    return 0 if named and ratio <= RATIO_LIMIT and fr_kb < base_kb and bounds <= BOUNDS_LIMIT else 1


if __name__ == "__main__":
    raise SystemExit(main())
