"""Unit tests of the worker's parts: bus factors, exact values, config, fault specs, IDX reader."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import torch

from nccldoctor.cluster.worker import collectives, mnist
from nccldoctor.cluster.worker.collectives import ALLGATHER, ALLREDUCE, BROADCAST, value_modulus
from nccldoctor.cluster.worker.config import DEFAULT_BANDWIDTH_SIZES, WorkerConfig
from nccldoctor.cluster.worker.faults import Fault, FaultPlan, FaultSpecError, parse_faults
from tests.cluster.idx import idx_bytes, write_mnist


@pytest.mark.parametrize(
    ("coll", "factors"),
    [
        (ALLREDUCE, {1: 0.0, 2: 1.0, 8: 1.75}),  # 2(n-1)/n
        (ALLGATHER, {1: 0.0, 2: 0.5, 8: 0.875}),  # (n-1)/n
        (BROADCAST, {1: 1.0, 2: 1.0, 8: 1.0}),  # 1
    ],
)
def test_bus_factor_follows_nccl_tests_performance_md(coll, factors):
    assert {n: coll.bus_factor(n) for n in factors} == factors


def test_size_bytes_counts_all_ranks_for_allgather_only():
    assert ALLREDUCE.size_bytes(count=256, itemsize=4, n=8) == 1024
    assert ALLGATHER.size_bytes(count=256, itemsize=4, n=8) == 8192
    assert ALLGATHER.input_count(8192, itemsize=4, n=8) == 256
    assert ALLGATHER.input_count(16, itemsize=4, n=8) == 0  # too small to give each rank one


@pytest.mark.parametrize("dtype", list(collectives.EXACT_INTEGER_LIMIT))
@pytest.mark.parametrize("n", [1, 2, 3, 8, 64])
def test_sum_of_rank_values_is_exact_in_every_dtype(dtype, n):
    if value_modulus(dtype, n) is None:
        pytest.skip(f"{dtype} is refused for {n} ranks (tested below)")
    count = 600
    exact = sum(collectives._int_values(r, n, count, dtype, "cpu") for r in range(n))
    # Adding in the dtype itself, in rank order and reversed, lands on the exact integer sum.
    for order in (range(n), reversed(range(n))):
        total = torch.zeros(count, dtype=collectives.torch_dtype(dtype))
        for rank in order:
            total += collectives.rank_values(rank, n, count, dtype, "cpu")
        assert torch.equal(total.to(torch.int64), exact)
    assert torch.equal(ALLREDUCE.expected(n, count, dtype, "cpu").to(torch.int64), exact)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
def test_tiled_values_are_the_formula_everywhere(dtype):
    # 1000 is not a multiple of any period (m = 251, 128, 63 for 2 ranks): the cut tail counts.
    n, count = 2, 1000
    for rank in range(n):
        formula = collectives._int_values(rank, n, count, dtype, "cpu")
        assert torch.equal(
            collectives.rank_values(rank, n, count, dtype, "cpu"),
            formula.to(collectives.torch_dtype(dtype)),
        )
    assert ALLREDUCE.expected(n, count, dtype, "cpu").shape == (count,)


def test_values_depend_on_the_rank_and_unsafe_dtypes_are_refused():
    assert not torch.equal(
        collectives.rank_values(0, 4, 10, "float32", "cpu"),
        collectives.rank_values(1, 4, 10, "float32", "cpu"),
    )
    assert value_modulus("bfloat16", 256) == 1
    assert value_modulus("bfloat16", 257) is None
    assert value_modulus("int8", 200) is None


def test_prediction_fits_latency_plus_bandwidth():
    assert collectives.predict_seconds([(4, 1e-3)], 16) == pytest.approx(4e-3)
    # Flat small sizes (latency-bound): the next size is predicted flat, not 4x.
    assert collectives.predict_seconds([(4, 1e-3), (16, 1e-3)], 64) == pytest.approx(1e-3)
    assert collectives.predict_seconds([(1000, 2.0), (2000, 3.0)], 4000) == pytest.approx(5.0)


def test_unsupported_dtype_errors_are_told_apart_from_real_failures():
    nccl = TypeError("Input tensor data type is not supported for NCCL process group: Float8")
    assert collectives.unsupported_reason(nccl).startswith("Input tensor data type")
    assert collectives.unsupported_reason(RuntimeError("Invalid scalar type")) is not None
    timeout = RuntimeError("Timed out waiting 5000ms for recv operation to complete")
    assert collectives.unsupported_reason(timeout) is None


def test_config_round_trips_and_has_the_contract_defaults(tmp_path):
    config = WorkerConfig(
        run_id="r1",
        backend="nccl",
        rank_dir=str(tmp_path),
        timeouts={"init": 5, "barrier": 2},
        mnist_root="/m",
    )
    again = WorkerConfig.read(config.write(tmp_path / "c.json"))
    assert again == config
    assert again.timeouts.init == 5.0 and again.timeouts.collective == 30.0
    assert DEFAULT_BANDWIDTH_SIZES[0] == 4 and DEFAULT_BANDWIDTH_SIZES[-1] == 64 << 20
    assert (config.ddp_steps, config.batch_size, config.lr, config.seed) == (5, 64, 0.01, 0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"backend": "mpi"}, "backend"),
        ({"timeouts": {"barrier": 0}}, "timeouts.barrier"),
        ({"timeouts": {"barier": 1}}, "unknown keys"),
        ({"dtypes": ["float8"]}, "dtypes"),
        ({"bandwidth_sizes": [4, -1]}, "bandwidth_sizes"),
        ({"ddp_steps": 0}, "ddp_steps"),
        ({"extra": 1}, "unknown keys"),
        ({"run_id": None}, "run_id"),
    ],
)
def test_config_refuses_bad_values_naming_the_key(change, message):
    data = {"run_id": "r", "backend": "gloo", "rank_dir": "/tmp/x", **change}
    with pytest.raises(ValueError, match=message):
        WorkerConfig.from_json(__import__("json").dumps(data))


def test_config_missing_required_key_is_a_value_error():
    with pytest.raises(ValueError, match="rank_dir"):
        WorkerConfig.from_json('{"run_id": "r", "backend": "gloo"}')
    with pytest.raises(ValueError, match="nested more than"):
        WorkerConfig.from_json("[" * 100_000)
    with pytest.raises(ValueError, match="must be a JSON object"):
        WorkerConfig.from_json("[]")


def test_fault_specs_parse_strictly():
    assert parse_faults("hang:barrier:rank=1,crash:ddp:rank=0") == [
        Fault("hang", "barrier", 1),
        Fault("crash", "ddp", 0),
    ]
    assert parse_faults("hang:allreduce:rank=2") == [Fault("hang", "allreduce_correctness", 2)]
    for bad in ("hang", "sleep:barrier:rank=1", "hang:train:rank=1", "hang:barrier:rank=x",
                "hang:barrier:1", "wrong:init:rank=0", "hang:barrier:rank=1,"):  # fmt: skip
        with pytest.raises(FaultSpecError):
            parse_faults(bad)


def test_fault_plan_is_inert_unless_set_and_only_for_its_rank():
    FaultPlan.from_env({}, 0).enter_phase("barrier")
    plan = FaultPlan.from_env(
        {"NCCLDOCTOR_FAULT": "crash:barrier:rank=1,wrong:bandwidth:rank=0"}, 0
    )
    plan.enter_phase("barrier")  # rank 1's crash is not ours
    assert plan.corrupts("bandwidth") and not plan.corrupts("checksum")
    with pytest.raises(RuntimeError, match="injected crash in phase barrier"):
        FaultPlan.from_env({"NCCLDOCTOR_FAULT": "crash:barrier:rank=1"}, 1).enter_phase("barrier")


@pytest.mark.parametrize("layout", ["torchvision", "flat"])
@pytest.mark.parametrize("gz", [False, True])
def test_real_idx_files_are_read_in_both_layouts(tmp_path, layout, gz):
    folder = tmp_path / "MNIST" / "raw" if layout == "torchvision" else tmp_path
    images_path = write_mnist(folder, samples=50, gz=gz)
    data = mnist.load_mnist(str(tmp_path), samples=999, seed=0)
    assert (data.source, data.path, data.reason) == ("real", str(images_path), None)
    assert data.images.shape == (50, 784) and data.labels.shape == (50,)
    raw = images_path.read_bytes()
    first_pixel = (gzip.decompress(raw) if gz else raw)[16]
    assert data.images[0, 0].item() == pytest.approx((first_pixel / 255 - mnist.MEAN) / mnist.STD)


def _garble(folder: Path, name: str, data: bytes) -> None:
    (folder / name).write_bytes(data)


@pytest.mark.parametrize(
    ("images", "labels", "reason"),
    [
        (idx_bytes(2049, (2, 28, 28), bytes(1568)), None, "magic number 2049, expected 2051"),
        (idx_bytes(2051, (2, 28, 28), bytes(100)), None, "need 1568 bytes, file has 100"),
        (idx_bytes(2051, (2, 14, 14), bytes(392)), None, "expected N×28×28"),
        (b"\x00\x00", None, "shorter than the IDX header"),
        (None, idx_bytes(2049, (3,), bytes(3)), "3 labels for 2 images"),
        (None, idx_bytes(2049, (2,), b"\x01\x0c"), "label 12 is not a digit"),
        (b"\x1f\x8bnot really gzip", None, "cannot read"),
    ],
)
def test_garbled_idx_falls_back_to_synthetic_with_the_reason(tmp_path, images, labels, reason):
    good_images = idx_bytes(2051, (2, 28, 28), bytes(1568))
    good_labels = idx_bytes(2049, (2,), b"\x01\x02")
    gz = images is not None and images.startswith(b"\x1f\x8b")
    suffix = ".gz" if gz else ""
    _garble(tmp_path, f"train-images-idx3-ubyte{suffix}", images or good_images)
    _garble(tmp_path, f"train-labels-idx1-ubyte{suffix}", labels or good_labels)
    data = mnist.load_mnist(str(tmp_path), samples=128, seed=0)
    assert data.source == "synthetic" and data.path is None
    assert reason in data.reason
    assert data.images.shape == (128, 784)


def test_missing_mnist_says_where_it_looked_and_synthetic_is_deterministic(tmp_path):
    data = mnist.load_mnist(str(tmp_path), samples=64, seed=3)
    assert data.source == "synthetic" and str(tmp_path) in data.reason
    again = mnist.load_mnist(str(tmp_path), samples=64, seed=3)
    assert torch.equal(data.images, again.images) and torch.equal(data.labels, again.labels)
    assert len(set(data.labels.tolist())) > 1


@pytest.mark.parametrize(("user", "expected"), [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_a_rank_sleeps_its_idle_openmp_threads_unless_the_user_chose(tmp_path, user, expected):
    from nccldoctor.cluster.agent import launcher
    from nccldoctor.cluster.timeouts import Timeouts

    spec = launcher.WorkerSpec(
        run_id="r", backend="gloo", master="127.0.0.1", port=29400, node_rank=0, rank_offset=0,
        local_world=1, world_size=1, interface=None, timeouts=Timeouts(), mnist_root=None,
        node="n0", out=tmp_path,
    )  # fmt: skip
    base = {"PATH": "/usr/bin"} if user is None else {"PATH": "/usr/bin", "OMP_WAIT_POLICY": user}
    assert launcher.worker_env(spec, 0, 0, base)["OMP_WAIT_POLICY"] == expected
    assert "OMP_WAIT_POLICY" not in base or base["OMP_WAIT_POLICY"] == user  # a copy changed


def test_preloading_torch_freezes_its_objects_and_turns_the_collector_back_on():
    """docs/design.md#import-gc: torch's objects out of every later collection's walk."""
    import subprocess
    import sys

    script = (
        "import gc\nfrom nccldoctor.cluster.torchstart import preload_torch\n"
        "before = gc.get_freeze_count()\npreload_torch()\n"
        "print(before, gc.get_freeze_count(), gc.isenabled())"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()  # fmt: skip
    before, frozen, enabled = int(out[0]), int(out[1]), out[2]
    assert before == 0 and frozen > 100_000 and enabled == "True"
