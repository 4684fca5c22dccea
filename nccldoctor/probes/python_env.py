"""Where Python packages live under a probe's root, found without importing them.

On the live machine (root ``/``) that is this interpreter's ``sys.path``; under a fixture root it
is the usual site-packages folders inside the tree. Importing torch to ask its version costs
seconds and may initialise CUDA, so torch and the NCCL wheels are read from their files.
"""

from __future__ import annotations

import importlib.machinery
import re
import sys
from pathlib import Path

# Where distributions and images put Python packages (Debian/Ubuntu, RHEL, venvs, conda).
_SITE_GLOBS = (
    "usr/lib/python3*/site-packages",
    "usr/lib/python3*/dist-packages",
    "usr/lib/python3/dist-packages",
    "usr/local/lib/python3*/site-packages",
    "usr/local/lib/python3*/dist-packages",
    "usr/lib64/python3*/site-packages",
    "opt/conda/lib/python3*/site-packages",
)


def is_live(root: Path) -> bool:
    """True when ``root`` is this machine's ``/`` (so this interpreter's view applies)."""
    try:
        return Path(root).resolve() == Path("/")
    except OSError:
        return False


def search_path(root: Path) -> list[str]:
    """The folders to look for Python packages in, for the machine at ``root``."""
    if is_live(root):
        return [p for p in sys.path if p and Path(p).is_dir()]
    found: list[str] = []
    for pattern in _SITE_GLOBS:
        found.extend(str(p) for p in sorted(Path(root).glob(pattern)) if p.is_dir())
    return found


def package_dir(root: Path, name: str) -> Path | None:
    """The folder of top-level package ``name`` (its ``__init__.py``'s parent), not imported."""
    try:
        spec = importlib.machinery.PathFinder.find_spec(name, search_path(root))
    except (ImportError, ValueError, OSError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def dist_version(root: Path, name: str) -> str | None:
    """The installed version of distribution ``name`` (as ``pip list`` shows it)."""
    values = dist_metadata(root, name).get("Version")
    return values[0] if values else None


def dist_metadata(root: Path, name: str) -> dict[str, list[str]]:
    """The header fields of distribution ``name``'s METADATA (``Requires-Dist`` repeats).

    Read directly from ``<name>-<version>.dist-info`` (PEP 427/491 name escaping), first match
    on the search path wins as for imports; importlib.metadata would cost more than the probes.
    """
    escaped = re.sub(r"[-_.]+", "_", name).lower()
    for folder in search_path(root):
        for info in sorted(Path(folder).glob("*.dist-info")):
            if re.sub(r"[-_.]+", "_", info.name.split("-", 1)[0]).lower() != escaped:
                continue
            try:
                text = (info / "METADATA").read_text(errors="replace")
            except OSError:
                continue
            return _headers(text)
    return {}


def _headers(text: str) -> dict[str, list[str]]:
    fields: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the body (long description) starts after the first blank line
        key, sep, value = line.partition(":")
        if sep and not line[0].isspace():
            fields.setdefault(key.strip(), []).append(value.strip())
    return fields


def site_dirs(root: Path) -> list[Path]:
    """The site-packages style folders of :func:`search_path` (where ``nvidia/*`` wheels land)."""
    return [
        Path(p) for p in search_path(root) if Path(p).name in ("site-packages", "dist-packages")
    ]
