"""Probe: the distributed-training environment, parsed the way NCCL, gloo and torch read it.

Values are recorded (secrets redacted) and every NCCL_* value is checked against NCCL's own
grammar; what does not parse, or a name NCCL never reads, becomes an EnvProblem (data, not a
verdict: the checks decide how bad it is).
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from nccldoctor.facts import EnvFacts
from nccldoctor.facts.env import EnvProblem
from nccldoctor.probes.nccl_rules import (
    DEBUG_LEVELS,
    DEBUG_SUBSYS,
    NCCL_ALGOS,
    NCCL_PROTOS,
    algo_proto_errors,
    parse_if_list,
    strtoll,
)
from nccldoctor.probes.sysfs import read_text

PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "GLOO_", "MASTER_")
NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "CUDA_VISIBLE_DEVICES")

# PyTorch's ProcessGroupNCCL switches (torch 2.13 ProcessGroupNCCL.hpp), read with c10d
# Utils.hpp getCvarBool (y/yes/1/t/true, n/no/0/f/false, any case) or getCvarInt (std::stoi);
# anything else makes torch raise "Invalid value for environment variable" at group creation.
TORCH_NCCL_INTS = (
    "TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
    "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC",
    "TORCH_NCCL_COORD_CHECK_MILSEC", "TORCH_NCCL_RANKS_PER_ROOT",
)  # fmt: skip
TORCH_NCCL_BOOLS = (
    "TORCH_NCCL_BCAST_UNIQUEID", "TORCH_NCCL_HIGH_PRIORITY", "TORCH_NCCL_BLOCKING_WAIT",
    "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_PROPAGATE_ERROR", "TORCH_NCCL_DESYNC_DEBUG",
    "TORCH_NCCL_ENABLE_TIMING", "TORCH_NCCL_ENABLE_MONITORING", "TORCH_NCCL_RETHROW_CUDA_ERRORS",
    "TORCH_NCCL_LOG_CPP_STACK_ON_UNCLEAN_SHUTDOWN", "TORCH_NCCL_CUDA_EVENT_CACHE",
    "TORCH_NCCL_NAN_CHECK", "TORCH_NCCL_AVOID_RECORD_STREAMS",
    "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK",
)  # fmt: skip
_TORCH_TRUE = ("y", "yes", "1", "t", "true")
_TORCH_FALSE = ("n", "no", "0", "f", "false")
# The legacy NCCL_* spellings of some of those: NCCL itself never reads them, they are no typos.
TORCH_NCCL_ALIASES = {
    "NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_BLOCKING_WAIT": "TORCH_NCCL_BLOCKING_WAIT",
    "NCCL_DESYNC_DEBUG": "TORCH_NCCL_DESYNC_DEBUG",
    "NCCL_ENABLE_TIMING": "TORCH_NCCL_ENABLE_TIMING",
    "NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK": "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK",
}

_SECRET_WORDS = ("TOKEN", "SECRET", "KEY", "PASSWORD", "CREDENTIAL", "AUTH")
REDACTED = "<redacted>"


def redact(name: str, value: str) -> str:
    """The value as it may appear in a report (swap for the shared helper when it lands)."""
    return REDACTED if any(word in name.upper() for word in _SECRET_WORDS) else value


@functools.cache
def nccl_variables() -> dict[str, str]:
    """NCCL's real variable names -> "int" | "str" (data/nccl_env_vars.txt, from NCCL source)."""
    text = resources.files("nccldoctor.probes").joinpath("data/nccl_env_vars.txt").read_text()
    pairs = (line.split() for line in text.splitlines() if line and not line.startswith("#"))
    return {name: kind for name, kind in pairs}


def probe(root: Path, env: Mapping[str, str]) -> EnvFacts:
    relevant = {k: v for k, v in env.items() if k.startswith(PREFIXES) or k in NAMES}
    facts = EnvFacts(variables={k: redact(k, v) for k, v in sorted(relevant.items())})
    conf_files = _conf_files(root, env)
    facts.nccl_conf_files = {
        path: {k: redact(k, v) for k, v in values.items()} for path, values in conf_files.items()
    }
    raw, facts.sources = _merge(conf_files, env)
    facts.effective = {k: redact(k, v) for k, v in sorted(raw.items())}
    if "NCCL_SOCKET_IFNAME" in raw:
        facts.socket_ifname = parse_if_list(raw["NCCL_SOCKET_IFNAME"])
    if "NCCL_IB_HCA" in raw:
        facts.ib_hca = parse_if_list(raw["NCCL_IB_HCA"])
    if "GLOO_SOCKET_IFNAME" in env:
        facts.gloo_socket_ifname = [n for n in env["GLOO_SOCKET_IFNAME"].split(",") if n]
    for name, value in sorted(raw.items()):
        facts.problems.extend(_problems(name, value))
    for name, value in sorted(env.items()):
        if name.startswith("TORCH_NCCL_") or name in TORCH_NCCL_ALIASES:
            facts.problems.extend(_torch_problems(name, value))
    return facts


def effective_nccl_env(root: Path, env: Mapping[str, str]) -> dict[str, str]:
    """Every NCCL_* variable NCCL will see: the environment plus its config files."""
    return _merge(_conf_files(root, env), env)[0]


def _merge(
    conf_files: Mapping[str, Mapping[str, str]], env: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """(values, where each came from). misc/param.cc initEnvFunc uses setenv(overwrite=0):
    the user's file is read first, then /etc/nccl.conf, so env beats the user file beats /etc."""
    values: dict[str, str] = {}
    sources: dict[str, str] = {}
    for path, entries in reversed(list(conf_files.items())):
        for name, value in entries.items():
            values[name], sources[name] = value, path
    for name, value in env.items():
        if name.startswith("NCCL_"):
            values[name], sources[name] = value, "environment"
    return values, sources


def _conf_files(root: Path, env: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """misc/param.cc setEnvFile: NCCL_CONF_FILE or ~/.nccl.conf, then /etc/nccl.conf."""
    user = env.get("NCCL_CONF_FILE") or (
        f"{env['HOME'].rstrip('/')}/.nccl.conf" if env.get("HOME") else None
    )
    files = {}
    for path in (user, "/etc/nccl.conf"):
        text = read_text(root, path) if path else None
        if text is None:
            continue
        values = {}
        for line in text.splitlines():
            name, sep, value = line.rstrip("\r").partition("=")
            if sep and not line.startswith("#"):
                values[name] = value
        files[path] = values
    return files


def _torch_problems(name: str, value: str) -> list[EnvProblem]:
    """A TORCH_NCCL_* value torch's getCvarBool/getCvarInt would refuse."""
    canonical = TORCH_NCCL_ALIASES.get(name, name)
    effect = f"torch raises 'Invalid value for environment variable: {name}'"
    if canonical in TORCH_NCCL_BOOLS and value.lower() not in _TORCH_TRUE + _TORCH_FALSE:
        return [EnvProblem(name, redact(name, value), "not a boolean", "1", "malformed", effect)]
    if canonical in TORCH_NCCL_INTS and not re.match(r"\s*[+-]?\d", value):
        return [EnvProblem(name, redact(name, value), "not an integer", None, "malformed", effect)]
    return []


def _problems(name: str, value: str) -> list[EnvProblem]:
    known = nccl_variables()
    shown = redact(name, value)
    if name in TORCH_NCCL_ALIASES:
        return []  # torch's, checked by _torch_problems
    if name not in known:
        close = difflib.get_close_matches(name, [*known, *TORCH_NCCL_ALIASES], n=1, cutoff=0.75)
        return [
            EnvProblem(
                name,
                shown,
                "NCCL reads no variable of this name",
                suggestion=close[0] if close else None,
                kind="unknown-name",
                effect="ignored by NCCL",
            )
        ]
    parser = _VALUE_PARSERS.get(name)
    if parser is not None:
        return [EnvProblem(name, shown, p, s, k, e) for p, s, k, e in parser(value)]
    if known.get(name) == "int" and value:
        number, whole = strtoll(value)
        if not whole:
            return [
                EnvProblem(
                    name, shown, "not an integer", None, "malformed", f"NCCL reads it as {number}"
                )
            ]
    return []


Issue = tuple[str, str | None, str, str | None]  # problem, suggestion, kind, effect


def _socket_ifname(value: str) -> list[Issue]:
    parsed = parse_if_list(value)
    if parsed.ignored:
        return [("a value of one character is ignored", None, "ignored", "NCCL picks by itself")]
    if not parsed.entries:
        effect = "matches no interface" if parsed.exclude else "matches every interface"
        return [("no interface names after ^/=", None, "malformed", effect)]
    odd = [e for e in parsed.entries if e[0] in "^="]
    if odd:
        where = "first" if not parsed.exclude else "after ^"
        return [
            (
                f"entry {odd[0]!r}: ^ and = are flags for the whole list and go {where}, once",
                None,
                "malformed",
                f"NCCL skips only names starting with {odd[0]!r}: every interface matches"
                if parsed.exclude
                else f"NCCL looks for interfaces whose name starts with {odd[0]!r}",
            )
        ]
    return []


def _ib_hca(value: str) -> list[Issue]:
    parsed = parse_if_list(value)
    if not parsed.entries:
        effect = "uses no HCA" if parsed.exclude else "uses every HCA"
        return [("no HCA names after ^/=", None, "malformed", effect)]
    return []


def _debug(value: str) -> list[Issue]:
    if value.upper() in DEBUG_LEVELS:
        return []
    close = difflib.get_close_matches(value.upper(), DEBUG_LEVELS, n=1)
    return [
        (
            f"not a level ({', '.join(DEBUG_LEVELS)})",
            close[0] if close else "INFO",
            "malformed",
            "NCCL rejects it and stays silent",
        )
    ]


def _debug_subsys(value: str) -> list[Issue]:
    tokens = [t for t in value.lstrip("^").split(",") if t]
    bad = [t for t in tokens if t.upper() not in DEBUG_SUBSYS]
    if not bad:
        return []
    close = difflib.get_close_matches(bad[0].upper(), DEBUG_SUBSYS, n=1)
    return [
        (
            f"unknown subsystem {', '.join(bad)} (known: {', '.join(DEBUG_SUBSYS)})",
            close[0] if close else None,
            "malformed",
            "ignored before NCCL 2.30, rejected since",
        )
    ]


def _list_parser(names: tuple[str, ...]):
    def parse(value: str) -> list[Issue]:
        errors = algo_proto_errors(value, names)
        effect = "NCCL 2.24+ fails every collective with invalid usage"
        return [(e, None, "malformed", effect) for e in errors[:1]]

    return parse


def _family(value: str) -> list[Issue]:
    if value in ("AF_INET", "AF_INET6"):
        return []
    return [("neither AF_INET nor AF_INET6", "AF_INET", "malformed", "no family filter")]


_VALUE_PARSERS = {
    "NCCL_SOCKET_IFNAME": _socket_ifname,
    "NCCL_IB_HCA": _ib_hca,
    "NCCL_DEBUG": _debug,
    "NCCL_DEBUG_SUBSYS": _debug_subsys,
    "NCCL_ALGO": _list_parser(NCCL_ALGOS),
    "NCCL_PROTO": _list_parser(NCCL_PROTOS),
    "NCCL_SOCKET_FAMILY": _family,
}
