"""One rank of a two-process gloo job that writes a genuine Flight Recorder dump (test helper).

``python flightrec_rank.py MODE OUT_DIR`` under RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, with
TORCH_FR_BUFFER_SIZE set. Every rank runs ``ALLREDUCES`` allreduces, then:
``skip``: rank 1 skips the next one; ``shape``: rank 1 sends it as [2, 2] instead of [4] (the
same bytes, so gloo runs it); ``dtype``: rank 1 sends int32 (same bytes again); ``ok``: all alike.
Each rank dumps with ``_dump_fr_trace()`` (pickle) and ``_dump_fr_trace_json()`` while the last
collective may still be pending, waits for its peer to have dumped, and leaves (the store's host last) with os._exit so
gloo's teardown of the pending op cannot abort it first.
"""

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace, _dump_fr_trace_json

mode, out = sys.argv[1], Path(sys.argv[2])
allreduces = int(os.environ.get("ALLREDUCES", "3"))
dist.init_process_group("gloo")
rank = dist.get_rank()
for _ in range(allreduces):
    dist.all_reduce(torch.ones(4))
odd = rank == 1
if mode == "skip" and odd:
    pass
elif mode == "shape" and odd:
    dist.all_reduce(torch.ones(2, 2), async_op=True)
elif mode == "dtype" and odd:
    dist.all_reduce(torch.ones(4, dtype=torch.int32), async_op=True)
else:
    dist.all_reduce(torch.ones(4), async_op=True)
(out / "pickle").mkdir(parents=True, exist_ok=True)
(out / "json").mkdir(parents=True, exist_ok=True)
(out / "pickle" / f"nccl_trace_rank_{rank}").write_bytes(_dump_fr_trace())
(out / "json" / f"nccl_trace_rank_{rank}.json").write_bytes(_dump_fr_trace_json())
store = dist.distributed_c10d._get_default_store()
store.set(f"dumped{rank}", "1")
store.wait([f"dumped{1 - rank}"])
# rank 0 serves the store: it leaves last, once rank 1 no longer needs it
store.set(f"leaving{rank}", "1")
if rank == 0:
    store.wait(["leaving1"])
sys.stdout.flush()
os._exit(0)
