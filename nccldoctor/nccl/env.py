"""NCCL's and torch's environment grammars: which variables exist and which values they accept.

Pure tables and functions (no machine access): the env probe applies them to what it reads,
the checks use the tables to judge how bad a problem is. Each table names the source it was
read from; the NCCL parsers themselves live in :mod:`nccldoctor.nccl.rules`.
"""

from __future__ import annotations

import difflib
import functools
import re
from importlib import resources

from nccldoctor.facts.env import EnvProblem
from nccldoctor.nccl.rules import (
    DEBUG_LEVELS,
    DEBUG_SUBSYS,
    NCCL_ALGOS,
    NCCL_PROTOS,
    algo_proto_errors,
    parse_if_list,
    strtoll,
)

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


@functools.cache
def nccl_variables() -> dict[str, str]:
    """NCCL's real variable names -> "int" | "str" (data/nccl_env_vars.txt, from NCCL source)."""
    text = resources.files("nccldoctor.nccl").joinpath("data/nccl_env_vars.txt").read_text()
    pairs = (line.split() for line in text.splitlines() if line and not line.startswith("#"))
    return {name: kind for name, kind in pairs}


def torch_value_problems(name: str, value: str) -> list[EnvProblem]:
    """A TORCH_NCCL_* value torch's getCvarBool/getCvarInt would refuse."""
    canonical = TORCH_NCCL_ALIASES.get(name, name)
    effect = f"torch raises 'Invalid value for environment variable: {name}'"
    if canonical in TORCH_NCCL_BOOLS and value.lower() not in _TORCH_TRUE + _TORCH_FALSE:
        return [EnvProblem(name, value, "not a boolean", "1", "malformed", effect)]
    if canonical in TORCH_NCCL_INTS and not re.match(r"\s*[+-]?\d", value):
        return [EnvProblem(name, value, "not an integer", None, "malformed", effect)]
    return []


def nccl_value_problems(name: str, value: str) -> list[EnvProblem]:
    """What NCCL makes of ``name=value``: an unknown name, a value its parser refuses."""
    known = nccl_variables()
    if name in TORCH_NCCL_ALIASES:
        return []  # torch's, checked by torch_value_problems
    if name not in known:
        close = difflib.get_close_matches(name, [*known, *TORCH_NCCL_ALIASES], n=1, cutoff=0.75)
        return [
            EnvProblem(
                name,
                value,
                "NCCL reads no variable of this name",
                suggestion=close[0] if close else None,
                kind="unknown-name",
                effect="ignored by NCCL",
            )
        ]
    parser = _VALUE_PARSERS.get(name)
    if parser is not None:
        return [EnvProblem(name, value, p, s, k, e) for p, s, k, e in parser(value)]
    if known.get(name) == "int" and value:
        number, whole = strtoll(value)
        if not whole:
            return [
                EnvProblem(
                    name, value, "not an integer", None, "malformed", f"NCCL reads it as {number}"
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
