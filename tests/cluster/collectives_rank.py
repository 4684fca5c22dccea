"""One rank of the collectives harness test: ``python collectives_rank.py OUT_JSON``.

Joins the test's TCPStore (contract env) with gloo, runs every descriptor's exact check (clean
and with this rank's contribution corrupted) and two bandwidth sweeps, and writes what it saw.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

from nccldoctor.cluster.worker.collectives import (
    ALLGATHER,
    COLLECTIVES,
    Comm,
    check_correctness,
    sweep_bandwidth,
)
from nccldoctor.facts.serde import to_dict

rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
store = dist.TCPStore(
    os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), timeout=timedelta(seconds=20)
)
dist.init_process_group(
    "gloo",
    store=dist.PrefixStore("collectives-test", store),
    rank=rank,
    world_size=n,
    timeout=timedelta(seconds=20),
)
comm = Comm(rank, n, torch.device("cpu"))
out: dict = {"clean": {}, "corrupt": {}}
for name, coll in COLLECTIVES.items():
    dtypes, counts = ["float32", "int64", "bfloat16", "uint8"], [1, 5, 1000]
    out["clean"][name] = check_correctness(coll, comm, dtypes, counts, corrupt=False)
    # Broadcast only carries rank 0's data, so that is the rank whose corruption must show.
    bad = rank == (0 if name == "broadcast" else n - 1)
    out["corrupt"][name] = check_correctness(coll, comm, ["int32"], [64], corrupt=bad)
sweep = sweep_bandwidth(ALLGATHER, comm, [4 * n, 1024 * n, 65536 * n], "float32", 5.0)
out["allgather_sweep"] = sweep.rows
# A budget far too small for 64 MiB: the sweep must stop early, on every rank at the same size.
tight = sweep_bandwidth(COLLECTIVES["allreduce"], comm, [4, 4096, 1 << 20, 1 << 26], "float32", 0.3)
out["tight"] = {"rows": tight.rows, "not_run": tight.not_run}
dist.destroy_process_group()
with open(sys.argv[1], "w") as f:
    json.dump(to_dict(out), f)
