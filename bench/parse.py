"""Parser throughput and memory against `grep -c NCCL` on the same corpus, in the same run.

Writes 64 rank files (default about 1 GiB in all) of realistic NCCL_DEBUG=TRACE output: init,
bootstrap, IB and transport lines, the tuning table, then mostly collective-trace lines
(``AllReduce: opCount …``) with ``NCCL CALL`` lines and rank 0's per-call algorithm lines. Rank
files are what ``NCCL_DEBUG_FILE=nccl.%h.%p.log`` writes, so they hold no application output.
The second corpus is what most tickets carry instead: one node's captured stdout per file (the
same lines of 16 ranks, interleaved), a third of it the application's own lines (training steps,
warnings), every line behind torchrun's ``[rankN]:`` prefix. On each corpus it times
``nccldoctor explain --json`` and ``grep -c NCCL`` over the files, and samples the parser's peak
memory (resident set of the whole process tree) in a run of its own. Wall and CPU time
are both printed: on a shared machine the CPU-time ratio is the one that does not depend on the
other tenants.

    python bench/parse.py                 # 1 GiB
    python bench/parse.py --size 256M     # smaller
    python bench/parse.py --size 256M --size 1G   # both, one after the other
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import psutil

from nccldoctor.ncclog.lines import NATIVE

RANKS = 64
RANKS_PER_NODE = 8
TARGET_RATIO = 0.30
STDOUT_RANKS = 16
TARGET_RSS = 200 << 20
REPO = Path(__file__).resolve().parent.parent
FUNCS = ("AllReduce", "AllReduce", "AllReduce", "AllGather", "ReduceScatter", "Broadcast")


def _init_lines(rank: int, host: str, pid: int, nranks: int) -> list[str]:
    p = f"{host}:{pid}:{pid} [{rank % RANKS_PER_NODE}] NCCL INFO "
    t = f"{host}:{pid}:{pid + 17} [{rank % RANKS_PER_NODE}] NCCL INFO "
    dev = rank % RANKS_PER_NODE
    comm = f"0x55{rank:04x}c2a0"
    lines = [
        p + f"Bootstrap: Using ib0:198.18.0.{rank // RANKS_PER_NODE + 2}<0>",
        p + "cudaDriverVersion 12040",
        p + "NCCL version 2.21.5+cuda12.4",
        p + "NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
        p + "NCCL_IB_HCA set to mlx5",
        p
        + "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB [RO]; OOB ib0:198.18.0.2<0>",
        p + "Using network IB",
        p + f"ncclCommInitRank comm {comm} rank {rank} nranks {nranks} cudaDev {dev} nvmlDev {dev} "
        f"busId {dev + 1}8000 commId 0x9f3c1b2ad4e5f601 - Init START",
        p
        + f"comm {comm} rank {rank} nRanks {nranks} nNodes {nranks // RANKS_PER_NODE} localRanks 8 localRank {dev} MNNVL 0",
    ]
    for hca in range(4):
        lines.append(p + f"NET/IB : GPU Direct RDMA Enabled for HCA {hca} 'mlx5_{hca}'")
    nxt, prv = (rank + 1) % nranks, (rank - 1) % nranks
    for ch in range(16):
        if rank % RANKS_PER_NODE == RANKS_PER_NODE - 1:
            lines.append(
                t
                + f"Channel {ch:02d}/0 : {rank}[{dev}] -> {nxt}[0] [send] via NET/IB/{ch % 4}/GDRDMA"
            )
        else:
            lines.append(
                t + f"Channel {ch:02d}/0 : {rank}[{dev}] -> {nxt}[{dev + 1}] via P2P/CUMEM/read"
            )
        lines.append(
            t + f"Channel {ch:02d}/0 : {prv}[{(dev - 1) % 8}] -> {rank}[{dev}] via P2P/CUMEM/read"
        )
    lines += [
        p + "Connected all rings",
        p + f"Trees [0] -1/-1/-1->{rank}->{prv} [1] {nxt}/-1/-1->{rank}->-1",
        p + "Connected all trees",
        p
        + "16 coll channels, 16 collnet channels, 0 nvls channels, 16 p2p channels, 2 p2p channels per peer",
        p + f"ncclCommInitRank comm {comm} rank {rank} nranks {nranks} cudaDev {dev} nvmlDev {dev} "
        f"busId {dev + 1}8000 commId 0x9f3c1b2ad4e5f601 - Init COMPLETE",
    ]
    return lines


def write_rank(args: tuple[str, int, int, int]) -> int:
    """One rank's NCCL_DEBUG_FILE: init, then ``ops`` collectives (the same number on every rank)."""
    path, rank, ops, nranks = args
    host = f"node-{rank // RANKS_PER_NODE:02d}"
    pid = 40000 + rank
    dev = rank % RANKS_PER_NODE
    comm = f"0x55{rank:04x}c2a0"
    p = f"{host}:{pid}:{pid} [{dev}] NCCL INFO "
    call = f"{host}:{pid}:{pid} NCCL CALL "
    written = 0
    op = 0
    with open(path, "w") as out:
        text = "\n".join(_init_lines(rank, host, pid, nranks)) + "\n"
        out.write(text)
        written += len(text)
        while op < ops:
            batch = []
            for _ in range(min(2000, ops - op)):
                func = FUNCS[op % len(FUNCS)]
                count = 1 << (10 + op % 14)
                if op % 3 == 0:
                    batch.append(
                        f"{call}nccl{func}(0x7f1c40000000,0x7f1c48000000,{count},7,0,0,{comm},0x55d1d000)"
                    )
                batch.append(
                    f"{p}{func}: opCount {op:x} sendbuff 0x7f1c40000000 recvbuff 0x7f1c48000000 "
                    f"count {count} datatype 7 op 0 root 0 comm {comm} [nranks={nranks}] stream 0x55d1d000"
                )
                if rank == 0:
                    algo = "RING proto SIMPLE" if count >= 65536 else "TREE proto LL"
                    batch.append(
                        f"{p}{func}: {count * 4} Bytes -> Algo {algo} channel{{Lo..Hi}}={{0..15}}"
                    )
                op += 1
            text = "\n".join(batch) + "\n"
            out.write(text)
            written += len(text)
    return written


APP_LINES = (
    "Epoch {e}:  {p:2d}%|#####     | {s}/20000 [12:01<12:30, 13.4it/s, loss={l:.4f}, lr=3e-4]",
    "{{'loss': {l:.4f}, 'grad_norm': 0.8{s}, 'learning_rate': 2.9e-05, 'epoch': {e}.{p:02d}}}",
    "/opt/conda/lib/python3.10/site-packages/torch/utils/checkpoint.py:464: UserWarning: "
    "torch.utils.checkpoint: please pass in use_reentrant=True or use_reentrant=False explicitly.",
)


def write_stdout(args: tuple[str, int, int, int]) -> int:
    """One node's captured stdout: ``ranks`` ranks' lines round-robin, after every two NCCL
    lines one application line, each line behind torchrun's ``[rankN]:``."""
    path, first, ranks, ops = args
    written = 0
    with open(path, "w") as out:
        streams = []
        for r in range(first, first + ranks):
            rank_file = f"{path}.{r}.tmp"
            write_rank((rank_file, r, ops, STDOUT_RANKS))
            streams.append(open(rank_file))  # noqa: SIM115 - closed below
        step = 0
        batch: list[str] = []
        live = list(range(len(streams)))
        while live:
            for i in list(live):
                line = streams[i].readline()
                if not line:
                    live.remove(i)
                    continue
                batch.append(f"[rank{first + i}]:{line}")
                step += 1
                if step % 2 == 0:
                    app = APP_LINES[step % len(APP_LINES)]
                    text = app.format(
                        e=step // 99991, p=step % 100, s=step % 20000, l=1 / (1 + step)
                    )
                    batch.append(f"[rank{first + i}]:{text}\n")
            if len(batch) > 4096:
                text = "".join(batch)
                out.write(text)
                written += len(text)
                batch = []
        text = "".join(batch)
        out.write(text)
        written += len(text)
        for stream in streams:
            stream.close()
            os.unlink(stream.name)
    return written


def make_stdout_corpus(folder: Path, total: int) -> list[Path]:
    """Two nodes' stdout, 8 ranks each, of a 16-rank job."""
    per_node = RANKS_PER_NODE
    nodes = STDOUT_RANKS // per_node
    paths = [folder / f"stdout.node-{n:02d}.log" for n in range(nodes)]
    per_op = 229 * 3 // 2 + 8  # a collective's lines, half an application line, the prefix
    ops = int(total / STDOUT_RANKS / per_op)
    with ProcessPoolExecutor() as pool:
        list(
            pool.map(
                write_stdout, [(str(p), n * per_node, per_node, ops) for n, p in enumerate(paths)]
            )
        )
    return paths


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("IB")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def make_corpus(folder: Path, total: int) -> list[Path]:
    paths = [folder / f"nccl.node-{r // RANKS_PER_NODE:02d}.{40000 + r}.log" for r in range(RANKS)]
    per_op = 229  # bytes per collective on a rank: one COLL line (196) and a third of a CALL line
    ops = int(total / RANKS / per_op)
    with ProcessPoolExecutor() as pool:
        list(pool.map(write_rank, [(str(p), r, ops, RANKS) for r, p in enumerate(paths)]))
    return paths


def run_sampled(
    cmd: list[str], env: dict[str, str], sample: bool = True
) -> tuple[float, float, int, int]:
    """Wall time, CPU time (user+sys of the whole tree), peak summed RSS of the process tree,
    and peak RSS of its largest process (0, 0 unless ``sample``: walking the tree every 20 ms
    takes a few percent of a CPU from the run it measures, so timed runs are not sampled)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak_sum = peak_one = 0
    # stdout to a real file: GNU grep stops at the first match when it writes to /dev/null
    with tempfile.TemporaryFile() as sink:
        start = time.perf_counter()
        # its own working directory: the page explain writes lands there, not in the repository
        with tempfile.TemporaryDirectory() as cwd:
            proc = subprocess.Popen(cmd, env=env, stdout=sink, stderr=subprocess.PIPE, cwd=cwd)
            root = psutil.Process(proc.pid)
            while sample and proc.poll() is None:
                try:
                    tree = [root, *root.children(recursive=True)]
                    rss = [p.memory_info().rss for p in tree]
                    peak_sum, peak_one = max(peak_sum, sum(rss)), max(peak_one, max(rss))
                except psutil.Error:
                    pass
                time.sleep(0.02)
            proc.wait()
        wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in (0, 1):
        raise SystemExit(
            f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.read().decode()}"
        )  # type: ignore[union-attr]
    return wall, cpu, peak_sum, peak_one


CORPORA = {"rank files": make_corpus, "stdout, 16 ranks interleaved": make_stdout_corpus}


def bench(total: int, keep: bool, kind: str) -> bool:
    folder = Path(tempfile.mkdtemp(prefix="nccldoctor-bench-"))
    try:
        t0 = time.perf_counter()
        paths = CORPORA[kind](folder, total)
        os.sync()  # the kernel writing the corpus back must not run during the timed runs
        size = sum(p.stat().st_size for p in paths)
        print(
            f"corpus ({kind}): {len(paths)} files, {size / (1 << 20):.0f} MiB, "
            f"written in {time.perf_counter() - t0:.1f} s"
        )
        # bytecode cached, as `pip install` leaves it: a sandbox's PYTHONDONTWRITEBYTECODE would
        # have every timed run compile nccldoctor's modules again (~70 ms of each start)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        grep = [shutil.which("grep") or "grep", "-c", "NCCL", *map(str, paths)]
        explain = [sys.executable, "-m", "nccldoctor", "explain", "--json", str(folder)]
        run_sampled(grep, env, sample=False)  # both read from the page cache from here on
        run_sampled(explain, env, sample=False)  # ... and explain's bytecode is written
        greps = [run_sampled(grep, env, sample=False) for _ in range(3)]
        runs = [run_sampled(explain, env, sample=False) for _ in range(2)]
        _, _, peak_sum, peak_one = run_sampled(explain, env)
        grep_s, grep_cpu = min(r[0] for r in greps), min(r[1] for r in greps)
        parse_s, parse_cpu = min(r[0] for r in runs), min(r[1] for r in runs)
        ratio = grep_s / parse_s
        mib = size / (1 << 20)
        load = os.getloadavg()[0]
        print(
            f"grep -c NCCL:          {grep_s:7.2f} s wall {grep_cpu:7.3f} s CPU  {mib / grep_s:8.1f} MiB/s"
        )
        print(
            f"nccldoctor explain:    {parse_s:7.2f} s wall {parse_cpu:7.2f} s CPU  "
            f"{mib / parse_s:8.1f} MiB/s  ({os.cpu_count()} CPUs, load {load:.1f}, lines sorted "
            f"in {'C' if NATIVE else 'Python: built without a C compiler'})"
        )
        print(
            f"throughput ratio:      {ratio:.1%} of grep by wall time (target >= {TARGET_RATIO:.0%})"
        )
        if grep_cpu >= 0.02:  # below that the kernel's CPU accounting is too coarse to divide by
            print(f"                       {grep_cpu / parse_cpu:.1%} of grep by CPU time")
        print(f"parser per CPU second: {mib / parse_cpu:8.1f} MiB (start-up included)")
        print(
            f"peak RSS, whole tree:  {peak_sum / (1 << 20):.0f} MiB (target < {TARGET_RSS >> 20} MB)"
        )
        print(f"peak RSS, one process: {peak_one / (1 << 20):.0f} MiB")
        return ratio >= TARGET_RATIO and peak_sum < TARGET_RSS
    finally:
        if keep:
            print(f"corpus kept in {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", action="append", help="corpus size, e.g. 256M or 1G (repeatable)")
    ap.add_argument("--keep", action="store_true", help="keep the corpus folder")
    ap.add_argument("--corpus", action="append", choices=list(CORPORA), help="only this corpus")
    args = ap.parse_args()
    ok = True
    for size in args.size or ["1G"]:
        for kind in args.corpus or list(CORPORA):
            print(f"== {size}")
            ok &= bench(parse_size(size), args.keep, kind)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
