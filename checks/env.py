"""Environment checks: NCCL variables that are misspelled, malformed, ignored or costly.

The env probe parsed every NCCL_* value with NCCL's own rules (nccldoctor/nccl/rules.py)
and kept what did not fit as EnvProblems; these checks say how bad each one is.
"""

from __future__ import annotations

from checks import Problem, check
from checks.netfacts import suggested_ifname
from nccldoctor.facts import NodeFacts
from nccldoctor.facts.env import EnvProblem
from nccldoctor.model import Severity
from nccldoctor.nccl.env import TORCH_NCCL_ALIASES, TORCH_NCCL_BOOLS, TORCH_NCCL_INTS
from nccldoctor.nccl.rules import strtoll

# An invalid NCCL_ALGO / NCCL_PROTO makes every collective fail (ncclInvalidUsage, 2.24+); torch
# refuses to create the process group over a bad TORCH_NCCL_* value.
_FATAL_WHEN_MALFORMED = ("NCCL_ALGO", "NCCL_PROTO", *TORCH_NCCL_BOOLS, *TORCH_NCCL_INTS)


def _source(facts: NodeFacts, name: str) -> str:
    where = facts.env.sources.get(name, "environment")
    return "" if where == "environment" else f" (set in {where})"


def _unset(facts: NodeFacts, name: str) -> str:
    where = facts.env.sources.get(name, "environment")
    return f"unset {name}" if where == "environment" else f"# remove {name} from {where}"


@check("env.unknown-variable", area="environment", category="env_config")
def unknown_variable(facts: NodeFacts) -> list[Problem]:
    """An NCCL_* variable NCCL never reads (a typo?), with the closest real name."""
    return [
        Problem(
            Severity.WARN,
            f"{p.name} is not an NCCL variable"
            + (f": did you mean {p.suggestion}?" if p.suggestion else "; NCCL ignores it"),
            evidence=[
                f"{p.name}={p.value}{_source(facts, p.name)}",
                "not in NCCL 2.18-2.30's sources",
            ],
            fix=(
                f"export {p.suggestion}={p.value}\nunset {p.name}"
                if p.suggestion
                else _unset(facts, p.name)
            ),
        )
        for p in facts.env.problems
        if p.kind == "unknown-name"
    ]


@check("env.malformed-value", area="environment", category="env_config")
def malformed_value(facts: NodeFacts) -> list[Problem]:
    """An NCCL variable whose value NCCL cannot parse (bad integer, level, list or algorithm)."""
    return [
        Problem(
            Severity.FAIL
            if TORCH_NCCL_ALIASES.get(p.name, p.name) in _FATAL_WHEN_MALFORMED
            else Severity.WARN,
            f"{p.name}={p.value}: {p.problem}",
            evidence=[
                f"{p.name}={p.value}{_source(facts, p.name)}",
                *([f"effect: {p.effect}"] if p.effect else []),
            ],
            fix=_malformed_fix(facts, p),
        )
        for p in facts.env.problems
        if p.kind == "malformed"
    ]


def _malformed_fix(facts: NodeFacts, problem: EnvProblem) -> str:
    if problem.suggestion:
        return f"export {problem.name}={problem.suggestion}"
    if problem.name in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        return f"export {problem.name}={'=' if problem.name.startswith('NCCL') else ''}{suggested_ifname(facts.network)}"
    return _unset(facts, problem.name)


@check("env.socket-ifname-ignored", area="environment", category="interface_selection")
def socket_ifname_ignored(facts: NodeFacts) -> Problem | None:
    """NCCL_SOCKET_IFNAME is one character long, so NCCL ignores it."""
    value = facts.env.socket_ifname
    if value is None or not value.ignored:
        return None
    pick = facts.network.nccl_default_pick
    return Problem(
        Severity.WARN,
        f"NCCL_SOCKET_IFNAME='{value.raw}' is ignored (NCCL needs more than one character)",
        evidence=[
            f"NCCL_SOCKET_IFNAME='{value.raw}'{_source(facts, 'NCCL_SOCKET_IFNAME')}",
            "misc/socket.cc: only a value with strlen > 1 is used",
            f"NCCL picks by itself instead: {pick or 'unknown'}",
        ],
        fix=f"export NCCL_SOCKET_IFNAME=={suggested_ifname(facts.network)}",
    )


def _enabled(facts: NodeFacts, name: str) -> str | None:
    """The value when NCCL reads it as non-zero, else None."""
    value = facts.env.effective.get(name)
    return value if value is not None and strtoll(value)[0] != 0 else None


@check("env.ib-disabled", area="environment", category="env_config")
def ib_disabled(facts: NodeFacts) -> Problem | None:
    """NCCL_IB_DISABLE is set: NCCL uses TCP sockets between nodes."""
    value = _enabled(facts, "NCCL_IB_DISABLE")
    if value is None:
        return None
    active = [
        f"{h.name}:{p.number}" for h in facts.rdma.hcas for p in h.ports if p.state == "ACTIVE"
    ]
    return Problem(
        Severity.WARN if active else Severity.INFO,
        "NCCL_IB_DISABLE is set: inter-node traffic goes over TCP sockets"
        + (f" although {', '.join(active)} is ACTIVE" if active else ""),
        evidence=[
            f"NCCL_IB_DISABLE={value}{_source(facts, 'NCCL_IB_DISABLE')}",
            "must be the same on every node, or NCCL mixes transports and hangs",
        ],
        fix=_unset(facts, "NCCL_IB_DISABLE"),
    )


@check("env.p2p-disabled", area="environment", category="p2p_error")
def p2p_disabled(facts: NodeFacts) -> Problem | None:
    """NCCL_P2P_DISABLE is set: GPUs on this node talk through host memory, not NVLink/PCIe P2P."""
    value = _enabled(facts, "NCCL_P2P_DISABLE")
    if value is None:
        return None
    gpus = len(facts.gpu.devices)
    return Problem(
        Severity.WARN if gpus > 1 else Severity.INFO,
        "NCCL_P2P_DISABLE is set: intra-node GPU traffic is staged through host memory"
        + (f" on {gpus} GPUs" if gpus > 1 else ""),
        evidence=[
            f"NCCL_P2P_DISABLE={value}{_source(facts, 'NCCL_P2P_DISABLE')}",
            "a workaround for ACS/IOMMU hangs; it costs most of the NVLink bandwidth",
        ],
        fix=_unset(facts, "NCCL_P2P_DISABLE"),
    )


@check("env.shm-disabled", area="environment", category="env_config")
def shm_disabled(facts: NodeFacts) -> Problem | None:
    """NCCL_SHM_DISABLE is set: ranks on one node without P2P go over the network."""
    value = _enabled(facts, "NCCL_SHM_DISABLE")
    if value is None:
        return None
    return Problem(
        Severity.INFO,
        "NCCL_SHM_DISABLE is set: local ranks without P2P use the network transport instead of /dev/shm",
        evidence=[
            f"NCCL_SHM_DISABLE={value}{_source(facts, 'NCCL_SHM_DISABLE')}",
            "usually a workaround for a small /dev/shm (docker --shm-size)",
        ],
        fix=f"{_unset(facts, 'NCCL_SHM_DISABLE')}  # and give the container --shm-size=1g or --ipc=host",
    )


@check("env.debug-subsys-hides-init", area="environment", category="env_config")
def debug_subsys_hides_init(facts: NodeFacts) -> Problem | None:
    """NCCL_DEBUG_SUBSYS leaves out INIT (or BOOTSTRAP), hiding the interface and transport lines."""
    raw = facts.env.effective.get("NCCL_DEBUG_SUBSYS")
    if raw is None:
        return None
    invert = raw.startswith("^")
    tokens = {t.strip().upper() for t in raw.lstrip("^").split(",") if t.strip()}
    named = [t for t in ("INIT", "BOOTSTRAP") if t in tokens or "ALL" in tokens]
    hidden = named if invert else [t for t in ("INIT", "BOOTSTRAP") if t not in named]
    if not hidden:
        return None
    return Problem(
        Severity.WARN if "INIT" in hidden else Severity.INFO,
        f"NCCL_DEBUG_SUBSYS={raw} hides {' and '.join(hidden)}: no 'Bootstrap: Using' / NET lines in the log",
        evidence=[
            f"NCCL_DEBUG_SUBSYS={raw}{_source(facts, 'NCCL_DEBUG_SUBSYS')}",
            "setting it replaces NCCL's default INIT,BOOTSTRAP,ENV",
        ],
        fix="export NCCL_DEBUG_SUBSYS=INIT,BOOTSTRAP,ENV,NET,GRAPH,TUNING",
    )


@check("env.from-conf-file", area="environment", category="env_config")
def from_conf_file(facts: NodeFacts) -> Problem | None:
    """NCCL variables come from nccl.conf files, not the environment: easy to forget per node."""
    from_files = {n: s for n, s in facts.env.sources.items() if s != "environment"}
    if not from_files:
        return None
    return Problem(
        Severity.INFO,
        f"{len(from_files)} NCCL variable(s) set by config files: " + ", ".join(sorted(from_files)),
        evidence=[
            f"{n}={facts.env.effective.get(n)} from {s}" for n, s in sorted(from_files.items())
        ],
        fix="cat "
        + " ".join(sorted(set(from_files.values())))
        + "  # keep them equal on every node",
    )
