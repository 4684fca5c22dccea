"""libnccl.so.2 on this node: where copies are, which version each is, and NCCL's own bootstrap.

Three places matter: the copy torch ships in ``torch/lib`` (older wheels), the
``nvidia-nccl-cu12`` wheel's ``nvidia/nccl/lib`` (what current torch wheels load), and system
copies that ``LD_PRELOAD``, ``LD_LIBRARY_PATH`` or the loader's cache may put first. Versions
come from the library itself (``ncclGetVersion``), which needs no GPU; see
docs/nccl-log-formats.md#without-gpu. ``ncclGetUniqueId`` runs NCCL's interface selection
(``bootstrapNetInit``), also without a GPU, but opens a listening socket and may hang on a broken
host, so it runs in a child process with a deadline.
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from nccldoctor.probes.python_env import package_dir, site_dirs
from nccldoctor.probes.sysfs import read_text, under

# Folders the dynamic loader searches by default or that CUDA/NCCL packages install into.
_SYSTEM_DIRS = (
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
    "/usr/local/nccl/lib",
    "/usr/local/cuda/lib64",
)

ORIGIN_TORCH = "torch"
ORIGIN_WHEEL = "nvidia wheel"  # nvidia-nccl-cu12, nvidia-cuda-runtime-cu12 ...
ORIGIN_SYSTEM = "system"
ORIGIN_PRELOAD = "LD_PRELOAD"
ORIGIN_LIBRARY_PATH = "LD_LIBRARY_PATH"


@dataclass(frozen=True)
class Candidate:
    path: Path  # as seen under the probe's root
    origin: str  # one of the ORIGIN_* labels


@dataclass
class BootstrapResult:
    """What ``ncclGetUniqueId`` did in a child process with ``NCCL_DEBUG=INFO``."""

    rc: int | None  # ncclResult_t; None when the call never returned (load failure, crash, timeout)
    output_lines: list[str] = field(default_factory=list)  # NCCL's stdout and stderr, in order
    unique_id_ok: bool = False
    error: str | None = None  # why there is no rc: "timed out after 10s", "exit -11" ...


def find_libnccl(root: Path, env: Mapping[str, str]) -> list[Candidate]:
    """Every libnccl found under ``root``, most specific origin first, one entry per file."""
    return find_libraries(root, env, "libnccl", "libnccl.so.2")


def find_libraries(root: Path, env: Mapping[str, str], stem: str, soname: str) -> list[Candidate]:
    """Every ``<stem>.so*`` under ``root`` in LD_PRELOAD, LD_LIBRARY_PATH, torch, the nvidia
    wheels and the system folders, in that order; ``soname`` first within a folder."""
    root = Path(root)
    library_path = [under(root, f) for f in env.get("LD_LIBRARY_PATH", "").split(":") if f]
    system = [under(root, f) for f in (*_SYSTEM_DIRS, *_ld_so_conf_dirs(root))]
    found: list[Candidate] = []
    for entry in env.get("LD_PRELOAD", "").replace(":", " ").split():
        if not Path(entry).name.startswith(f"{stem}."):
            continue
        # ld.so(8): a name without a slash is searched like any dependency; a missing file is
        # skipped with an error message, so it replaces nothing.
        options = (
            [under(root, entry)] if "/" in entry else [d / entry for d in library_path + system]
        )
        path = next((p for p in options if p.is_file()), None)
        if path is not None:
            found.append(Candidate(path, ORIGIN_PRELOAD))
    folders = [(d, ORIGIN_LIBRARY_PATH) for d in library_path]
    torch_dir = package_dir(root, "torch")
    if torch_dir is not None:
        folders.append((torch_dir / "lib", ORIGIN_TORCH))
    folders += [
        (d, ORIGIN_WHEEL) for site in site_dirs(root) for d in sorted(site.glob("nvidia/*/lib"))
    ]
    folders += [(d, ORIGIN_SYSTEM) for d in system]
    for folder, origin in folders:
        found.extend(Candidate(p, origin) for p in _libs_in(folder, stem, soname))
    return _unique(found)


def _libs_in(folder: Path, stem: str, soname: str) -> list[Path]:
    try:  # os.listdir: system lib folders hold thousands of files, pathlib's glob is slow there
        names = [n for n in os.listdir(folder) if n.startswith(f"{stem}.so")]
    except OSError:
        return []
    libs = [folder / n for n in sorted(names, key=lambda n: (n != soname, n))]
    return [p for p in libs if p.is_file()]


def _ld_so_conf_dirs(root: Path) -> list[str]:
    """Folders listed in /etc/ld.so.conf and the ld.so.conf.d/*.conf it includes (text files)."""
    folders: list[str] = []
    conf_files = ["/etc/ld.so.conf"]
    conf_files += [
        f"/etc/ld.so.conf.d/{p.name}"
        for p in sorted(under(root, "/etc/ld.so.conf.d").glob("*.conf"))
    ]
    for conf in conf_files:
        for line in (read_text(root, conf) or "").splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("/"):
                folders.append(line)
    return folders


def _unique(candidates: list[Candidate]) -> list[Candidate]:
    """Drop later entries naming a file already listed (symlinks libnccl.so -> libnccl.so.2)."""
    seen: set[Path] = set()
    unique: list[Candidate] = []
    for cand in candidates:
        try:
            real = cand.path.resolve()
        except OSError:
            real = cand.path
        if real not in seen:
            seen.add(real)
            unique.append(cand)
    return unique


def decode_version(code: int) -> str:
    """``ncclGetVersion``'s int as "2.21.5".

    nccl.h: ``NCCL_VERSION(X,Y,Z) (((X) <= 2 && (Y) <= 8) ? X*1000 + Y*100 + Z : X*10000 + Y*100 + Z)``
    """
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def version_in_name(path: Path, stem: str) -> str | None:
    """The version a library's real file name carries (``libnccl.so.2.21.5`` -> "2.21.5")."""
    try:
        name = path.resolve().name
    except OSError:
        name = path.name
    match = re.fullmatch(rf"{re.escape(stem)}\.so\.(\d+(?:\.\d+)+)", name)
    return match.group(1) if match and match.group(1).count(".") >= 2 else None


def nccl_version(path: str | Path) -> str:
    """The version the library at ``path`` reports; raises OSError when it cannot be loaded."""
    lib = ctypes.CDLL(str(path))
    code = ctypes.c_int(0)
    rc = lib.ncclGetVersion(ctypes.byref(code))
    if rc != 0:
        raise OSError(f"ncclGetVersion returned {rc}")
    return decode_version(code.value)


# Runs in the child: load the library, ask for a unique id, exit with 100 + the ncclResult_t (the
# exit status is the one channel NCCL's own threads cannot interleave with; an exception exits 1).
# The unique id is 128 bytes (NCCL_UNIQUE_ID_BYTES in nccl.h). os._exit skips waiting on the
# bootstrap root thread NCCL leaves listening; NCCL flushes each log line itself.
_BOOTSTRAP_SCRIPT = """
import ctypes, os, sys
lib = ctypes.CDLL(sys.argv[1])
uid = ctypes.create_string_buffer(128)
rc = lib.ncclGetUniqueId(uid)
sys.stdout.flush()
os._exit(100 + rc)
"""
_RC_BASE = 100


def bootstrap_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with NCCL logging forced on, to stdout, with the bootstrap subsystems shown."""
    child = dict(env)
    child.pop("NCCL_DEBUG_FILE", None)
    child["NCCL_DEBUG"] = "INFO"
    # Setting the subsystem list replaces NCCL's default; BOOTSTRAP (2.23+) and INIT (<=2.22)
    # carry the "Bootstrap: Using" line, ENV the NCCL_SOCKET_IFNAME echo (docs/nccl-log-formats.md#controls, #bootstrap).
    child["NCCL_DEBUG_SUBSYS"] = "INIT,BOOTSTRAP,ENV"
    return child


def bootstrap_probe(path: str | Path, env: Mapping[str, str], timeout: float) -> BootstrapResult:
    """Run ``ncclGetUniqueId`` from the library at ``path`` in a child process under ``env``."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _BOOTSTRAP_SCRIPT, str(path)],
            env=bootstrap_env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        return BootstrapResult(None, _lines(exc.output), error=f"timed out after {timeout:g}s")
    except OSError as exc:
        return BootstrapResult(None, [], error=f"could not start the probe: {exc}")
    output = _lines(proc.stdout)
    if not _RC_BASE <= proc.returncode < _RC_BASE + 100:
        return BootstrapResult(None, output, error=f"the probe exited with {proc.returncode}")
    rc = proc.returncode - _RC_BASE
    return BootstrapResult(rc, output, unique_id_ok=rc == 0)


def _lines(data: bytes | str | None) -> list[str]:
    if not data:
        return []
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    return [line for line in text.splitlines() if line.strip()]
