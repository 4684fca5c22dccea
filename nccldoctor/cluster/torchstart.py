"""How a process of the check starts torch: its imports paid before the phases that time their
work, the cyclic collector off while they run (docs/design.md#import-gc), and OpenMP's idle
threads asleep (docs/design.md#omp-wait). The agent, a launcher's other processes and each
worker all start this way."""

from __future__ import annotations

import gc
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager


def preload_torch() -> None:
    """Import what the phases use before the first one starts.

    An import holds the GIL for seconds (torch itself; torch._dynamo, which the optimizer
    imports lazily on first construction), starving the heartbeat thread; paid here, the
    phases keep their heartbeats and their deadlines measure the work, not the imports.
    """
    with uncollected_imports():
        import torch._dynamo
        import torch.distributed
        import torch.nn.parallel
        import torch.utils.data  # noqa: F401


# libgomp reads this once, when torch loads it; unset, a thread that finished its part of an op
# spins for a while before it sleeps, on the cores the node's other ranks and gloo's threads need
# (docs/design.md#omp-wait).
QUIET_OMP = {"OMP_WAIT_POLICY": "PASSIVE"}


def quiet_omp(env: MutableMapping[str, str]) -> None:
    """OpenMP's threads sleep when idle in a rank made from ``env``, unless the user chose."""
    for name, value in QUIET_OMP.items():
        env.setdefault(name, value)


@contextmanager
def uncollected_imports() -> Iterator[None]:
    """The cyclic collector off while torch is imported, and what was made by then frozen.

    The imports make about half a million objects that stay alive to the end; every full
    collection they set off walks all of them again, a third of torch._dynamo's import
    (docs/design.md#import-gc). Frozen, the phases' collections and a forked worker's
    ``gc.collect`` skip them as well (the child then copies none of their pages).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
