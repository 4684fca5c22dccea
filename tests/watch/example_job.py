"""Test-only example job: what users' DDP scripts look like (MNIST-shaped data, Linear, SGD).

Launched by torchrun (or with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set) on gloo, or on NCCL
with EXAMPLE_BACKEND=nccl (rank r on GPU LOCAL_RANK modulo the GPUs here: with one GPU every rank
is on it, which NCCL refuses as a duplicate GPU unless EXAMPLE_HOST_PER_RANK=1 makes each rank a
host of its own to NCCL, NCCL_HOSTID, so that they talk over the network; scripts/gpu_verify.py).
Faults for the watch tests come from EXAMPLE_FAULT="stall:<rank>:<step>" or "raise:<rank>:<step>";
EXAMPLE_PG_TIMEOUT_S sets the process group's timeout, after which PyTorch's own watchdog ends a
stalled NCCL job (and dumps its Flight Recorder, which watch asks for).
"""

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    backend = os.environ.get("EXAMPLE_BACKEND", "gloo")
    device = torch.device("cpu")
    if backend == "nccl":
        if os.environ.get("EXAMPLE_HOST_PER_RANK") == "1":
            os.environ["NCCL_HOSTID"] = f"example-rank{os.environ['RANK']}"
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    timeout = os.environ.get("EXAMPLE_PG_TIMEOUT_S")
    dist.init_process_group(backend, timeout=timedelta(seconds=float(timeout)) if timeout else None)
    rank = dist.get_rank()
    fault_kind, fault_rank, fault_step = os.environ.get("EXAMPLE_FAULT", "none:-1:-1").split(":")
    torch.manual_seed(0)
    images = torch.rand(2048, 784)
    labels = torch.randint(0, 10, (2048,))
    data = TensorDataset(images, labels)
    loader = DataLoader(data, batch_size=64, sampler=DistributedSampler(data, drop_last=True))
    model = DistributedDataParallel(torch.nn.Linear(784, 10).to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = int(os.environ.get("EXAMPLE_STEPS", "8"))
    for step, (x, y) in enumerate(loader):
        if step >= steps:
            break
        if rank == int(fault_rank) and step == int(fault_step):
            if fault_kind == "stall":
                time.sleep(3600)  # a rank that falls behind before the allreduce
            if fault_kind == "raise":
                raise RuntimeError(f"example failure on rank {rank} at step {step}")
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()  # DDP's gradient allreduce
        optimizer.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
