"""Probes: the only code that reads the machine. Each returns plain Facts, never a verdict.

Every probe reads the file system under ``root`` (``/`` on a real node, a fixture tree in tests)
and takes the environment as a mapping, so that tests can feed captured machines.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from nccldoctor.facts import NodeFacts, ProbeError


def collect_node_facts(
    root: str | Path = "/",
    env: Mapping[str, str] | None = None,
    master: str | None = None,
    node: str | None = None,
    local_ranks: int | None = None,
) -> NodeFacts:
    """Run every probe; a probe that raises becomes a ProbeError, the rest still run.
    ``local_ranks``: the ranks the caller will start here (else the launcher's LOCAL_WORLD_SIZE)."""
    from nccldoctor.probes import container, gpu, network, rdma, software
    from nccldoctor.probes import env as env_probe

    root = Path(root)
    env = dict(os.environ if env is None else env)
    facts = NodeFacts(node=node or socket.gethostname(), root=str(root))
    probes: dict[str, Callable[[], Any]] = {
        "env": lambda: env_probe.probe(root, env),
        "gpu": lambda: gpu.probe(root, env),
        "container": lambda: container.probe(root, env),
        "network": lambda: network.probe(root, env, master),
        "rdma": lambda: rdma.probe(root, env),
        "software": lambda: software.probe(root, env),
    }
    for name, run in probes.items():
        try:
            setattr(facts, name, run())
        except Exception as exc:  # a probe crash is data: the checks say what is unknown
            facts.probe_errors.append(ProbeError(name, f"{type(exc).__name__}: {exc}"))
    facts.multi_node = bool(master or env.get("MASTER_ADDR")) or _world_exceeds_node(env)
    facts.local_ranks = local_ranks or _positive_int(env.get("LOCAL_WORLD_SIZE"))
    return facts


def _positive_int(value: str | None) -> int | None:
    try:
        number = int(value or "")
    except ValueError:
        return None
    return number if number > 0 else None


def _world_exceeds_node(env: Mapping[str, str]) -> bool:
    try:
        return int(env.get("WORLD_SIZE", "1")) > int(env.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        return False
