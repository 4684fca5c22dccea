"""Benchmark: a 64-node check report with full logs stays < 3 MB and renders its page in at
most 10× the time `json.load` takes to read the same file.

Builds a realistic document (64 nodes, one rank each, the last LINES_PER_RANK lines of every rank's
NCCL INFO log of about 2000 lines, far more than the tail a check keeps, 4 channels of per-peer connections, the full
phase list, a 24-size bandwidth sweep, 30 findings), writes it with ``write_report``, then times
what ``nccldoctor report RUN.json -o report.html`` does of its own (read, redact the secret
names again, upgrade, HTML: ``read_document`` + ``render_document_html``) against ``json.load``
of the same file, in the same run, and prints the machine's load average beside the ratio.

    python bench/report.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nccldoctor.model import CATEGORIES, Finding, Severity
from nccldoctor.report import Report, write_report
from nccldoctor.report.load import read_document
from nccldoctor.views.html import render_document_html
from tests.report.builders import (
    CREATED,
    bandwidth_section,
    cluster_section,
    mnist_section,
    nccl_section,
    node_facts,
    phases_section,
)

ROOT = Path(__file__).resolve().parents[1]
NODES, GPUS, LOG_LINES = 64, 1, 2000
LINES_PER_RANK = 200  # a stress size for the page: a check keeps only the last few lines
SIZE_LIMIT = 3 * 2**20
RATIO_LIMIT = 10.0  # read + HTML against json.load of the same file


def rank_log(host: str, rank: int, nranks: int) -> list[str]:
    """About LOG_LINES lines of NCCL 2.26 INFO output for one rank (docs/nccl-log-formats.md)."""
    p = f"{host}:{40000 + rank}:{40100 + rank} [{rank % GPUS}] NCCL INFO "
    lines = [
        f"{p}Bootstrap: Using eth0:198.18.0.{rank // GPUS + 1}<0>",
        f"{p}NCCL version 2.26.2+cuda12.4",
        f"{p}NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB eth0:198.18.0.{rank // GPUS + 1}<0>",
        f"{p}Using network IB",
        f"{p}comm 0x55d1c2a0 rank {rank} nRanks {nranks} nNodes {NODES} localRanks {GPUS} localRank {rank % GPUS} MNNVL 0",
    ]
    for channel in range(4):
        peer = (rank + 1) % nranks
        via = "NET/IB/0/GDRDMA" if rank // GPUS != peer // GPUS else "P2P/CUMEM/read"
        lines.append(
            f"{p}Channel {channel:02d}/0 : {rank}[{rank % GPUS}] -> {peer}[{peer % GPUS}] via {via}"
        )
    lines += [
        f"{p}   AllReduce |    10.4/   3.2 |    18.6/  26.7 |    46.2/  62.5 |" for _ in range(8)
    ]
    lines += [
        f"{p}Connected all rings, use ring PXN 0 GDR 1",
        f"{p}ncclCommInitRankConfig comm 0x55d1c2a0 rank {rank} nranks {nranks} cudaDev {rank % GPUS} "
        f"nvmlDev {rank % GPUS} busId 18000 commId 0x9f3c1b2ad4e5f601 - Init COMPLETE",
    ]
    op = 0
    while len(lines) < LOG_LINES:
        op += 1
        lines.append(
            f"{p}AllReduce: opCount {op:x} sendbuff 0x7f1c40000000 recvbuff 0x7f1c40000000 "
            f"count {2 ** (op % 24)} datatype 7 op 0 root 0 comm 0x55d1c2a0 [nranks={nranks}] stream 0x55d1d000"
        )
        if rank % 16 == 5 and op % 700 == 0:
            lines.append(
                f"{host}:{40000 + rank}:{40100 + rank} [0] transport/net_ib.cc:1 NCCL WARN NET/IB : Got completion with error 12"
            )
    return lines


def build_report() -> Report:
    names = [f"gpu-node-{i:02d}" for i in range(NODES)]
    nranks = NODES * GPUS
    ranks = [
        {
            "rank": r,
            "node": names[r // GPUS],
            "local_rank": r % GPUS,
            "phase_reached": "destroy",
            "exit_code": 0,
            "last_nccl_lines": rank_log(names[r // GPUS], r, nranks)[-LINES_PER_RANK:],
            "stacks": None,
            "flight_recorder": None,
            "log_path": f"/var/tmp/nccldoctor/{names[r // GPUS]}/rank{r}/nccl.log",
        }
        for r in range(nranks)
    ]
    nccl = nccl_section(nranks, GPUS)
    nccl["connections"] = [
        {**c, "channel": ch} for ch in range(4) for c in nccl["connections"] if c["channel"] == 0
    ]
    findings = [
        Finding(
            id=f"bench.finding-{i}",
            category=CATEGORIES[i % len(CATEGORIES)],
            severity=list(Severity)[i % 4],
            area="run",
            title=f"finding {i} on {names[i % NODES]}",
            evidence=[f"evidence line {j}" for j in range(5)],
            fix="export NCCL_SOCKET_IFNAME=eth0",
            node=names[i % NODES],
        )
        for i in range(30)
    ]
    bandwidth = bandwidth_section(nranks, 40.0)
    bandwidth["rows"] = bandwidth_section(nranks, 40.0)["rows"] * 3 + bandwidth["rows"][:3]
    bandwidth["tcp_wire_Gbitps"] = {n: 11.5 for n in names}
    return Report(
        kind="check",
        nodes=[node_facts(n, f"198.18.0.{i + 1}/24", GPUS) for i, n in enumerate(names)],
        findings=findings,
        command=["nccldoctor", "check", "--master", "198.18.0.1", "--nodes", str(NODES)],
        created=CREATED,
        extra={
            "nccl": nccl,
            "phases": phases_section(names, GPUS),
            "bandwidth": bandwidth,
            "cluster": cluster_section(names, GPUS),
            "ranks": ranks,
            "hang": None,
            "mnist": mnist_section(),
        },
    )


def _run_cli(path: Path) -> None:
    """`nccldoctor report RUN.json -o report.html` as a user runs it (exit 1: its findings fail)."""
    command = [
        sys.executable,
        "-m",
        "nccldoctor",
        "report",
        str(path),
        "-o",
        str(path.with_suffix(".html")),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(command, capture_output=True, cwd=ROOT, env=env, timeout=60)
    if out.returncode not in (0, 1):
        raise RuntimeError(out.stderr.decode(errors="replace")[-2000:])


def interleaved(rounds: int, *works) -> list[float]:
    """The best time of each of ``works``, run in turn within each round, so that a load that
    comes and goes on a shared machine falls on all of them alike."""
    best = [float("inf")] * len(works)
    for _ in range(rounds):
        for index, work in enumerate(works):
            start = time.perf_counter()
            work()
            best[index] = min(best[index], time.perf_counter() - start)
    return best


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="nccldoctor-bench-") as tmp:
        path = write_report(build_report(), Path(tmp) / "run.json")
        size = path.stat().st_size
        html_size = len(render_document_html(read_document(path)).encode())

        def baseline() -> None:
            with path.open(encoding="utf-8") as f:
                json.load(f)

        (cli_s,) = interleaved(3, lambda: _run_cli(path))
        json_s, load_s, render_s = interleaved(
            9,
            baseline,
            lambda: read_document(path),
            lambda: render_document_html(read_document(path)),
        )
    print(
        f"ranks {NODES * GPUS}, nodes {NODES}, log lines kept per rank {LINES_PER_RANK} of {LOG_LINES}"
    )
    print(
        f"report JSON: {size / 2**20:.2f} MiB ({size} bytes; limit 3 MiB); HTML page: {html_size / 2**20:.2f} MiB (limit 3 MiB)"
    )
    print(
        f"json.load: {json_s * 1e3:.1f} ms; read_document: {load_s * 1e3:.1f} ms; read + HTML: {render_s * 1e3:.1f} ms"
    )
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"ratio read+HTML / json.load: {render_s / json_s:.1f}x (limit {RATIO_LIMIT:g}x); "
        f"load average {load} on {os.cpu_count()} CPUs"
    )
    print(f"whole command with interpreter start and imports: {cli_s * 1e3:.0f} ms (not limited)")
    ok = size < SIZE_LIMIT and html_size < SIZE_LIMIT and render_s / json_s <= RATIO_LIMIT
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
