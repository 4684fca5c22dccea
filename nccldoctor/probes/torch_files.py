"""torch's view of CUDA and NCCL, read from its installed files: importing torch costs seconds.

``torch/version.py`` holds ``__version__`` and ``cuda`` (None for CPU builds). The NCCL a CUDA
build uses is either a copy in ``torch/lib`` (older wheels) or the ``nvidia-nccl-cu1x`` wheel the
torch distribution requires (current wheels load it through their rpath).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from nccldoctor.facts.gpu import TorchCuda
from nccldoctor.probes.libnccl import loadable_here, nccl_version
from nccldoctor.probes.python_env import dist_metadata, dist_version, package_dir


def read_torch(root: Path) -> TorchCuda:
    """What the torch installed under ``root`` was built with; ``installed=False`` if none."""
    torch_dir = package_dir(root, "torch")
    if torch_dir is None:
        return TorchCuda()
    values = _assignments(torch_dir / "version.py")
    view = TorchCuda(installed=True, version=_str(values.get("__version__")))
    view.cuda_build = _str(values.get("cuda"))
    if view.cuda_build:
        view.nccl_version, view.nccl_source = _torch_nccl(root, torch_dir)
    return view


def _assignments(path: Path) -> dict[str, object]:
    """Module-level ``name = literal`` (and ``name: T = literal``) values of a Python file."""
    try:
        tree = ast.parse(path.read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return {}
    values: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        try:
            literal = ast.literal_eval(value)
        except ValueError:
            continue
        for target in targets:
            if isinstance(target, ast.Name):
                values[target.id] = literal
    return values


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _torch_nccl(root: Path, torch_dir: Path) -> tuple[str | None, str | None]:
    """torch's NCCL version and where it was read from: its own copy, else its NCCL wheel."""
    bundled = sorted((torch_dir / "lib").glob("libnccl.so*"))
    if bundled and loadable_here(root):
        try:
            return nccl_version(bundled[0]), str(bundled[0])
        except OSError:
            pass
    for requirement in dist_metadata(root, "torch").get("Requires-Dist", []):
        name = re.match(r"[A-Za-z0-9._-]*", requirement).group(0)
        if name.startswith("nvidia-nccl"):
            version = dist_version(root, name)
            if version:
                return version, f"{name} {version}"
    return None, None
