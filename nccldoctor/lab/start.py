"""One way to start `nccldoctor check` (or `watch`) on a lab host: the demo, the tests and the
benchmarks all call ``start_check``, so the command line, the environment and the import path are
written once.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from nccldoctor.lab.netns import LabHost, NetLab, isolated

# A launcher's or nccldoctor's own variables in the caller's environment would make every lab
# host the same node of the caller's job: a host gets only what the caller passes explicitly.
_NOT_INHERITED_PREFIXES = ("MASTER_", "NCCLDOCTOR_", "SLURM_")
_NOT_INHERITED = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")


def check_argv(out: Path, args: Sequence[str], command: str = "check") -> list[str]:
    """``python -m nccldoctor COMMAND --out OUT ARGS`` with this interpreter."""
    return [sys.executable, "-m", "nccldoctor", command, "--out", str(out), *args]


def check_env(
    env: Mapping[str, str], node_name: str, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a check on a lab host: ``env`` without launcher and nccldoctor
    variables, this nccldoctor first on PYTHONPATH, the host's node name, then ``extra``."""
    inherited = {
        name: value
        for name, value in env.items()
        if name not in _NOT_INHERITED and not name.startswith(_NOT_INHERITED_PREFIXES)
    }
    path = os.pathsep.join(filter(None, [package_root(), env.get("PYTHONPATH")]))
    return {**inherited, "PYTHONPATH": path, "NCCLDOCTOR_NODE_NAME": node_name, **(extra or {})}


def start_check(
    args: Sequence[str],
    *,
    out: Path,
    node_name: str,
    env: Mapping[str, str],
    extra_env: Mapping[str, str] | None = None,
    lab: NetLab | None = None,
    host: LabHost | None = None,
    shm_size: str | None = None,
    hostname: str | None = None,
    command: str = "check",
    **popen_kwargs: object,
) -> subprocess.Popen:
    """Start `nccldoctor check` for ``node_name`` in a session of its own: inside ``host``'s
    namespace of ``lab``, or here (loopback) without one; with ``shm_size``/``hostname`` on a
    private /dev/shm and hostname (see ``isolated``); ``command`` "watch" starts `nccldoctor watch`
    the same way. ``popen_kwargs`` go to Popen (stdout...)."""
    argv = check_argv(out, args, command)
    child_env = check_env(env, node_name, extra_env)
    if lab is not None and host is not None:
        return lab.popen(host, argv, child_env, shm_size=shm_size, hostname=hostname,
                         **popen_kwargs)  # fmt: skip
    return subprocess.Popen(
        isolated(argv, shm_size, hostname), env=child_env, start_new_session=True, **popen_kwargs
    )  # type: ignore[arg-type]


def package_root() -> str:
    """Where this nccldoctor lives, so the node processes import the same code."""
    return str(Path(__file__).resolve().parents[2])


def free_port_pair() -> int:
    """A loopback port whose successor is free too (the store and the master's listener)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 65534:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    return 29400
