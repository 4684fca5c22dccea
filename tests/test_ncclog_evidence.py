"""Facts from whatever survives: each headline fact comes from the best
evidence a cut log still holds, and says which. Logs from tests/fixtures/real/ (source URLs in
their expect.toml)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nccldoctor.ncclog import explain_logs, parse_source

REAL = Path(__file__).parent / "fixtures" / "real"

CASES = {
    # 2.5.7: NET/IB's device list and P2P ring lines, nothing else of the network
    "nccl-378-v2.5.7-roce-mpirun": {
        "network": ("IB", "NET/IB : Using"),
        "interfaces": (["mlx5_2:1"], "NET/IB : Using"),
    },
    # only transport lines, the last one cut mid-way ("via NET/Sock")
    "nccl-tests-166-socket-shm-channels": {
        "network": ("Socket", "channel lines"),
        "nranks": (16, "channel lines"),
    },
    # only "Init timings" lines: printed right after Init COMPLETE
    "nccl-534-init-timings-8-ranks": {
        "nranks": (8, "Init / nRanks / [nranks=N]"),
        "init_complete": (True, "Init START / COMPLETE"),
    },
    # no NCCL line with a size: DeepSpeed's world_size
    "nccl-520-deepspeed-slurm-world-size": {"nranks": (128, "world size")},
}


@pytest.mark.parametrize("slug", CASES)
def test_fact_and_its_source(slug: str) -> None:
    extra = explain_logs(parse_source(str(REAL / slug / "log.txt")))
    for fact, (value, source) in CASES[slug].items():
        assert extra[fact] == value, fact
        assert extra["nccl"]["fact_sources"][fact] == source, fact
