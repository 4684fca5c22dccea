"""Tiny MNIST IDX files for tests, written byte by byte as the format says."""

from __future__ import annotations

import gzip
import random
import struct
from pathlib import Path


def idx_bytes(magic: int, dims: tuple[int, ...], payload: bytes) -> bytes:
    return struct.pack(f">i{len(dims)}i", magic, *dims) + payload


def write_mnist(folder: Path, samples: int, gz: bool, seed: int = 1) -> Path:
    """train-images/labels with ``samples`` random digits; returns the images path."""
    rng = random.Random(seed)
    pixels = bytes(rng.randrange(256) for _ in range(samples * 28 * 28))
    labels = bytes(rng.randrange(10) for _ in range(samples))
    folder.mkdir(parents=True, exist_ok=True)
    suffix = ".gz" if gz else ""
    images_path = folder / f"train-images-idx3-ubyte{suffix}"
    for path, data in (
        (images_path, idx_bytes(2051, (samples, 28, 28), pixels)),
        (folder / f"train-labels-idx1-ubyte{suffix}", idx_bytes(2049, (samples,), labels)),
    ):
        path.write_bytes(gzip.compress(data) if gz else data)
    return images_path
