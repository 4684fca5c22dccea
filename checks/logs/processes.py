"""Rules over what each process's log says (scope ``logs``): NCCL versions and environments
that differ, NCCL errors no signature explains, connection retries.
"""

from __future__ import annotations

from collections.abc import Iterator

from checks import Problem, check
from checks.ncclenv import settings_differ
from nccldoctor.model import Severity
from nccldoctor.ncclog.summary import LogReading

# init.cc ncclGetErrorString
RESULTS = {
    1: ("ncclUnhandledCudaError", "cuda_error"),
    2: ("ncclSystemError", "other"),
    3: ("ncclInternalError", "other"),
    4: ("ncclInvalidArgument", "env_config"),
    5: ("ncclInvalidUsage", "env_config"),
    6: ("ncclRemoteError", "remote_peer_closed"),
    7: ("ncclInProgress", "other"),
    8: ("ncclTimeout", "collective_timeout_hang"),
}


def _explained(reading: LogReading) -> set[str]:
    """Processes (``host:pid``) whose lines a known signature matched."""
    return {key for hit in reading.logs.signatures.values() for key in hit.keys}


@check("logs.version-mismatch", area="logs", category="version_mismatch", scope="logs")
def version_mismatch(reading: LogReading) -> Problem | None:
    """Processes run different NCCL versions."""
    procs = reading.logs.processes.values()
    versions = {p.key: p.nccl_version for p in procs if p.nccl_version}
    if len(set(versions.values())) < 2:
        return None
    return Problem(
        Severity.FAIL,
        f"processes run different NCCL versions: {', '.join(sorted(set(versions.values())))}",
        [f"{key}: NCCL {v}" for key, v in sorted(versions.items())],
        "Use one NCCL everywhere: the same container image or the same torch wheel on\n"
        "every node (PyTorch wheels bundle their own libnccl).",
    )


@check("logs.env-differs", area="logs", category="env_config", scope="logs")
def env_differs(reading: LogReading) -> Problem | None:
    """NCCL_* settings differ between processes (or are unset on some)."""
    processes = sorted(reading.logs.processes.values(), key=lambda p: p.key)
    return settings_differ({p.key: p.env for p in processes}, "processes", Severity.WARN)


@check("logs.nccl-error", area="logs", category="other", scope="logs")
def nccl_error(reading: LogReading) -> Iterator[Problem]:
    """NCCL returned an error code; a detail when a known signature already names the cause."""
    explained = _explained(reading)
    for p in reading.logs.processes.values():
        if not p.error_code:
            continue
        name, category = RESULTS.get(p.error_code, (f"error {p.error_code}", "other"))
        yield Problem(
            Severity.INFO if p.key in explained else Severity.FAIL,
            f"NCCL returned {name} ({p.error_code}) in {p.key}",
            [w.text.strip() for w in p.warns[-3:]] + p.backtrace[-4:],
            "The WARN lines before the error chain name the cause; the '-> N' lines are the\n"
            "call path (read bottom-up).",
            node=p.host,
            rank=p.rank,
            category=category,
        )


@check("logs.connect-retries", area="logs", category="connect_refused_or_timeout", scope="logs")
def connect_retries(reading: LogReading) -> Iterator[Problem]:
    """A process retried its connections to peers."""
    for p in reading.logs.processes.values():
        retries = sum(p.connect_retries.values())
        if not retries:
            continue
        peers = ", ".join(f"{k} ({n}×)" for k, n in sorted(p.connect_retries.items())[:5])
        yield Problem(
            Severity.WARN,
            f"{p.key} retried connections {retries} times",
            [f"peers: {peers}", f"last line: {p.last_line}"],
            "The peer was not listening yet or could not be reached: check that it started, that\n"
            "its address is routable from here and that no firewall drops the port.",
            node=p.host,
            rank=p.rank,
        )
