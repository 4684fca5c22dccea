"""MNIST for the DDP step: the IDX files when they are there and sound, synthetic data otherwise.

Reads the IDX format (http://yann.lecun.com/exdb/mnist/: big-endian magic 2051 for images with
dims n×28×28, 2049 for labels with dim n), raw or gzip-compressed, in torchvision's layout
``<root>/MNIST/raw/train-images-idx3-ubyte[.gz]`` or directly under ``<root>``. No torchvision.
A file that is missing is simply not used; one that is garbled is reported (``reason``) and the
run falls back to synthetic data, so the DDP step still runs and the report says why.
"""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nccldoctor.facts.ranks import Checksum

if TYPE_CHECKING:
    import torch

IMAGES_MAGIC = 2051
LABELS_MAGIC = 2049
ROWS = COLS = 28
PIXELS = ROWS * COLS
CLASSES = 10
IMAGES_FILE = "train-images-idx3-ubyte"
LABELS_FILE = "train-labels-idx1-ubyte"
# Where MNIST usually sits when no root is given (torchvision's examples use ./data).
USUAL_ROOTS = ("data", "~/data", "/data", "/datasets")
# The usual normalisation of MNIST pixels (mean, std of the training set).
MEAN, STD = 0.1307, 0.3081


class IdxError(ValueError):
    """An IDX file exists but is not a well-formed MNIST file."""


@dataclass
class MnistData:
    images: torch.Tensor  # float32 (N, 784), normalised
    labels: torch.Tensor  # int64 (N,)
    source: str  # "real" | "synthetic"
    path: str | None  # the images file read, when real
    reason: str | None  # why synthetic data was used, when it was


def find_idx_files(root: Path) -> tuple[Path, Path] | None:
    """(images, labels) under ``root`` in either layout, raw preferred over .gz; None if absent."""
    for folder in (root / "MNIST" / "raw", root):
        for suffix in ("", ".gz"):
            images, labels = folder / (IMAGES_FILE + suffix), folder / (LABELS_FILE + suffix)
            if images.is_file() and labels.is_file():
                return images, labels
    return None


def read_idx(path: Path, magic: int, dims: int) -> tuple[tuple[int, ...], bytes]:
    """(shape, payload) of an IDX file of unsigned bytes; IdxError when it is not one."""
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as stream:
            data = stream.read()
    except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
        raise IdxError(f"{path}: cannot read: {exc}") from exc
    header = 4 + 4 * dims
    if len(data) < header:
        raise IdxError(f"{path}: {len(data)} bytes, shorter than the IDX header")
    (found,) = struct.unpack(">i", data[:4])
    if found != magic:
        raise IdxError(f"{path}: magic number {found}, expected {magic}")
    shape = struct.unpack(f">{dims}i", data[4:header])
    expected = 1
    for dim in shape:
        expected *= dim
    if expected != len(data) - header:
        raise IdxError(f"{path}: dims {shape} need {expected} bytes, file has {len(data) - header}")
    return shape, data[header:]


def load_idx(images_path: Path, labels_path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    shape, pixels = read_idx(images_path, IMAGES_MAGIC, 3)
    if shape[1:] != (ROWS, COLS) or shape[0] == 0:
        raise IdxError(f"{images_path}: images are {shape}, expected N×{ROWS}×{COLS}")
    (count,), labels = read_idx(labels_path, LABELS_MAGIC, 1)
    if count != shape[0]:
        raise IdxError(f"{labels_path}: {count} labels for {shape[0]} images")
    label_tensor = torch.frombuffer(bytearray(labels), dtype=torch.uint8).to(torch.int64)
    if int(label_tensor.max()) >= CLASSES:
        raise IdxError(f"{labels_path}: label {int(label_tensor.max())} is not a digit")
    image_tensor = torch.frombuffer(bytearray(pixels), dtype=torch.uint8).reshape(count, PIXELS)
    return (image_tensor.to(torch.float32) / 255 - MEAN) / STD, label_tensor


def synthetic(samples: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """MNIST-shaped data with labels a linear model can learn (so the loss visibly drops)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(samples, PIXELS, generator=generator)
    teacher = torch.randn(PIXELS, CLASSES, generator=generator)
    labels = (images @ teacher).argmax(dim=1)
    return (images - MEAN) / STD, labels


def load_mnist(root: str | None, samples: int, seed: int) -> MnistData:
    """Real MNIST from ``root`` (or a usual location when None), else synthetic with the reason."""
    roots = [Path(root)] if root else [Path(r).expanduser() for r in USUAL_ROOTS]
    found = next((f for f in map(find_idx_files, roots) if f is not None), None)
    if found is None:
        where = root if root else ", ".join(USUAL_ROOTS)
        reason = f"no MNIST IDX files ({IMAGES_FILE}[.gz], {LABELS_FILE}[.gz]) under {where}"
    else:
        try:
            images, labels = load_idx(*found)
            return MnistData(images, labels, "real", str(found[0]), None)
        except IdxError as exc:
            reason = str(exc)
    images, labels = synthetic(samples, seed)
    return MnistData(images, labels, "synthetic", None, reason)


@dataclass
class TrainResult:
    model: torch.nn.Module  # the local replica (DDP's module)
    steps: int
    loss_before: float  # loss on this rank's first batch before any step
    loss_after: float  # loss on the same batch after the last step


def train_ddp(
    data: MnistData,
    *,
    rank: int,
    world_size: int,
    device: torch.device,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
) -> TrainResult:
    """The user's job in small: Linear(784, 10), SGD, DistributedSampler, DDP, ``steps`` steps.

    The sampler pads rather than drops, so every rank takes exactly ``steps`` steps and no rank
    waits in an allreduce the others never start.
    """
    import torch
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    torch.manual_seed(seed)
    model = torch.nn.Linear(PIXELS, CLASSES).to(device)
    ddp = DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None
    )
    dataset = TensorDataset(data.images, data.labels)
    sampler = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed
    )
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    first: tuple[torch.Tensor, torch.Tensor] | None = None
    loss_before = float("nan")
    done, epoch = 0, 0
    while done < steps:
        sampler.set_epoch(epoch)
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            if first is None:
                first = (images, labels)
                with torch.no_grad():
                    loss_before = float(loss_fn(model(images), labels))
            optimizer.zero_grad()
            loss_fn(ddp(images), labels).backward()
            optimizer.step()
            done += 1
            if done == steps:
                break
        if first is None:  # an empty dataset would otherwise loop here forever
            raise RuntimeError(f"DistributedSampler gave rank {rank} no batch")
        epoch += 1
    with torch.no_grad():
        loss_after = float(loss_fn(model(first[0]), first[1]))
    return TrainResult(model, steps, loss_before, loss_after)


def param_checksum(model: torch.nn.Module, rank: int) -> Checksum:
    """float64 sum and sha256 of the parameters' bytes on ``rank``: replicas must agree bit for
    bit."""
    import hashlib

    import torch

    digest = hashlib.sha256()
    total = 0.0
    for param in model.parameters():
        local = param.detach().cpu().contiguous()
        total += float(local.to(torch.float64).sum())
        digest.update(bytes(local.view(torch.uint8).flatten().tolist()))
    return Checksum(rank, total, digest.hexdigest())
