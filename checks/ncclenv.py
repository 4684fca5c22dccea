"""NCCL_* settings compared across a job: the one judgement behind ``cluster.nccl-env-differs``
(each node's environment, as probed) and ``logs.env-differs`` (each process's, as NCCL printed
it), so that both count the same differences and say them alike (no checks here)."""

from __future__ import annotations

from collections.abc import Mapping

from checks import Problem
from nccldoctor.model import Severity

# Variables that name each holder's own thing (its debug file, its host), expected to differ
PER_HOLDER_VARIABLES = ("NCCL_DEBUG_FILE", "NCCL_HOSTID")
_SHOWN = 6  # holders named one by one; more are grouped by value, the fewest first


def settings_differ(
    settings: Mapping[str, Mapping[str, str]], holders: str, severity: Severity
) -> Problem | None:
    """``settings``: holder (a node, a process) → its NCCL_* variables. A variable set to
    different values, or set on some holders only, differs; ``holders`` names them in the title.
    The rule states the severity (its page lists what it can report)."""
    names = sorted({name for env in settings.values() for name in env
                    if name.startswith("NCCL_") and name not in PER_HOLDER_VARIABLES})  # fmt: skip
    evidence = []
    for name in names:
        values = {holder: env.get(name, "(unset)") for holder, env in settings.items()}
        if len(set(values.values())) > 1:
            evidence.append(f"{name}: {_values(values)}")
    if not evidence:
        return None
    return Problem(
        severity,
        f"{len(evidence)} NCCL variable(s) differ between {holders}",
        evidence,
        "Set NCCL_* the same way on every node (one env file; check ~/.nccl.conf and\n"
        "/etc/nccl.conf too): different NCCL_ALGO/PROTO/IB_* values make ranks choose\n"
        "differently and hang. Per-node interface names (NCCL_SOCKET_IFNAME) are the exception.",
    )


def _values(values: Mapping[str, str]) -> str:
    """``a=1, b=(unset)``; past a few holders, each value and who holds it, the fewest first,
    so that the one process of sixty-four that differs is named."""
    if len(values) <= _SHOWN:
        return ", ".join(f"{holder}={value}" for holder, value in values.items())
    by_value: dict[str, list[str]] = {}
    for holder, value in values.items():
        by_value.setdefault(value, []).append(holder)
    return "; ".join(
        f"{value} on {', '.join(named[:3])}" + (f" and {len(named) - 3} more" if named[3:] else "")
        for value, named in sorted(by_value.items(), key=lambda item: len(item[1]))
    )
