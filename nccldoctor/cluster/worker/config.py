"""What the node agent tells a worker process: the config JSON (docs/design.md#records).

The agent writes one file per rank (``WorkerConfig(...).write(path)``); the worker reads it with
``WorkerConfig.read(path)``. Unknown keys are refused and bad values raise ``ValueError`` naming
the key, so a mismatch between agent and worker shows up as a clear error, not a silent default.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nccldoctor.jsondoc import parse

BACKENDS = ("gloo", "nccl")
# The dtypes a worker knows how to fill and check exactly (collectives.EXACT_INTEGER_LIMIT).
DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8")
# 4 B … 64 MiB in ×4 steps, as nccl-tests sweeps; the bandwidth budget trims the tail.
DEFAULT_BANDWIDTH_SIZES = tuple(4**k for k in range(1, 14))


@dataclass
class WorkerTimeouts:
    """Seconds each worker phase may take (bandwidth_budget bounds the whole size sweep)."""

    init: float = 60.0
    barrier: float = 30.0
    collective: float = 30.0
    bandwidth_budget: float = 10.0
    ddp: float = 60.0
    destroy: float = 10.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"timeouts.{f.name} must be a number, got {value!r}")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"timeouts.{f.name} must be > 0 seconds, got {value!r}")
            setattr(self, f.name, float(value))


@dataclass
class WorkerConfig:
    run_id: str
    backend: str
    rank_dir: str
    timeouts: WorkerTimeouts = field(default_factory=WorkerTimeouts)
    bandwidth_sizes: list[int] = field(default_factory=lambda: list(DEFAULT_BANDWIDTH_SIZES))
    dtypes: list[str] = field(
        default_factory=lambda: ["float32", "float64", "int32", "int64", "bfloat16"]
    )
    mnist_root: str | None = None
    ddp_steps: int = 5
    batch_size: int = 64
    lr: float = 0.01
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.timeouts, dict):
            self.timeouts = WorkerTimeouts(**_known(WorkerTimeouts, self.timeouts, "timeouts"))
        if not isinstance(self.run_id, str) or not self.run_id or "/" in self.run_id:
            raise ValueError(f"run_id must be a non-empty string without '/', got {self.run_id!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if not isinstance(self.rank_dir, str) or not self.rank_dir:
            raise ValueError(f"rank_dir must be a path, got {self.rank_dir!r}")
        if not all(_is_int(s) and s > 0 for s in self.bandwidth_sizes):
            raise ValueError(
                f"bandwidth_sizes must be positive byte counts: {self.bandwidth_sizes}"
            )
        self.bandwidth_sizes = sorted(set(self.bandwidth_sizes))
        unknown = [d for d in self.dtypes if d not in DTYPES]
        if unknown:
            raise ValueError(f"dtypes {unknown} unknown; known: {', '.join(DTYPES)}")
        for name in ("ddp_steps", "batch_size"):
            if not _is_int(getattr(self, name)) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {getattr(self, name)!r}")
        if not _is_int(self.seed):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) or self.lr <= 0:
            raise ValueError(f"lr must be a positive number, got {self.lr!r}")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> WorkerConfig:
        data = parse(text)  # within the JSON readers' bounds: nesting is a ValueError too
        if not isinstance(data, dict):
            raise ValueError("worker config must be a JSON object")
        try:
            return cls(**_known(cls, data, "worker config"))
        except TypeError as exc:  # a required key is missing
            raise ValueError(f"worker config: {exc}") from exc

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(self.to_json() + "\n", encoding="utf-8")
        return path

    @classmethod
    def read(cls, path: str | Path) -> WorkerConfig:
        return cls.from_json(Path(path).read_text(encoding="utf-8"))


def _known(cls: type, data: dict[str, Any], what: str) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{what}: unknown keys {unknown}")
    return data


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
