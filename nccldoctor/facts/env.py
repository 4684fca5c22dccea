"""What the environment probe reads: the distributed-training variables, parsed."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class EnvProblem:
    """A value that does not parse, or a name NCCL does not know."""

    name: str
    value: str
    problem: str
    suggestion: str | None = None  # did-you-mean name, or a corrected value
    kind: str = "malformed"  # malformed | unknown-name | ignored
    effect: str | None = None  # what NCCL will actually do with it ("reads as 0")


@dataclass
class IfList:
    """A parsed NCCL_SOCKET_IFNAME / NCCL_IB_HCA value (NCCL's parseStringList grammar)."""

    raw: str
    exclude: bool = False
    exact: bool = False
    entries: list[str] = field(default_factory=list)  # names (ports split off)
    ports: dict[str, int] = field(default_factory=dict)
    ignored: bool = False  # NCCL ignores values of length <= 1


@dataclass
class EnvFacts:
    variables: dict[str, str] = field(default_factory=dict)  # relevant names only, raw values
    problems: list[EnvProblem] = field(default_factory=list)
    socket_ifname: IfList | None = None
    gloo_socket_ifname: list[str] | None = None
    ib_hca: IfList | None = None
    nccl_conf_files: dict[str, dict[str, str]] = field(default_factory=dict)  # path -> vars
    effective: dict[str, str] = field(default_factory=dict)  # NCCL_* after conf files (env wins)
    sources: dict[str, str] = field(default_factory=dict)  # NCCL_* name -> env | conf file path
