"""Probe: the distributed-training environment, parsed the way NCCL, gloo and torch read it.

Values are recorded (secrets redacted) and every NCCL_* value is checked against NCCL's own
grammar; what does not parse, or a name NCCL never reads, becomes an EnvProblem (data, not a
verdict: the checks decide how bad it is).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from nccldoctor.facts import EnvFacts
from nccldoctor.facts.env import EnvProblem
from nccldoctor.nccl.env import TORCH_NCCL_ALIASES, nccl_value_problems, torch_value_problems
from nccldoctor.nccl.rules import parse_if_list
from nccldoctor.probes.sysfs import read_text
from nccldoctor.redact import REDACTED, is_secret_name

PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "GLOO_", "MASTER_")
NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "CUDA_VISIBLE_DEVICES")


def redact(name: str, value: str) -> str:
    """The value as it may appear in a report."""
    return REDACTED if is_secret_name(name) else value


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
        facts.problems.extend(_redacted(nccl_value_problems(name, value)))
    for name, value in sorted(env.items()):
        if name.startswith("TORCH_NCCL_") or name in TORCH_NCCL_ALIASES:
            facts.problems.extend(_redacted(torch_value_problems(name, value)))
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


def _redacted(problems: list[EnvProblem]) -> list[EnvProblem]:
    return [dataclasses.replace(p, value=redact(p.name, p.value)) for p in problems]
