"""NCCL's own parsing and selection rules, re-implemented as pure functions.

Each function cites the NCCL source it mirrors (NVIDIA/nccl 2.30.7, ``src/``), because the
point is to predict exactly what NCCL will do with a value, quirks included. Probes use these
to compute facts (which interface NCCL would pick); checks use them to resolve a list against
the interfaces or HCAs a node has.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass

from nccldoctor.facts.env import IfList
from nccldoctor.facts.network import Interface

MAX_IFS = 16  # misc/socket.h MAX_IFS: parseStringList keeps at most this many entries

# graph/tuning.cc parseList over init.cc's ncclFuncStr / ncclAlgoStr / ncclProtoStr.
NCCL_FUNCS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
NCCL_ALGOS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
NCCL_PROTOS = ("LL", "LL128", "Simple")

# debug.cc: NCCL_DEBUG options and NCCL_DEBUG_SUBSYS tokens (2.30; older releases have subsets).
DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "ABORT", "TRACE")
DEBUG_SUBSYS = (
    "INIT", "COLL", "P2P", "SHM", "NET", "GRAPH", "TUNING", "ENV", "ALLOC", "ALLOC_HOST",
    "CALL", "PROXY", "NVLS", "BOOTSTRAP", "REG", "PROFILE", "RAS", "DESTROY", "ALL",
)  # fmt: skip


def parse_if_list(raw: str) -> IfList:
    """``NCCL_SOCKET_IFNAME`` / ``NCCL_IB_HCA`` as NCCL reads them.

    os/linux.cc ncclOsFindInterfaces and transport/net_ib/init.cc: a leading ``^`` excludes,
    then a leading ``=`` asks for exact names (``=^`` is not ``^=``); misc/utils.cc
    parseStringList splits on ``,`` (strtok: empty entries vanish), each entry ``name[:port[:rail
    [:plane]]]``, entries with an empty name dropped, at most MAX_IFS kept. misc/socket.cc
    ncclFindInterfaces ignores a NCCL_SOCKET_IFNAME of length <= 1.
    """
    rest = raw
    exclude = rest.startswith("^")
    rest = rest[1:] if exclude else rest
    exact = rest.startswith("=")
    rest = rest[1:] if exact else rest
    entries: list[str] = []
    ports: dict[str, int] = {}
    for entry in (e for e in rest.split(",") if e):
        name, _, tail = entry.partition(":")
        if not name or len(entries) >= MAX_IFS:
            continue
        entries.append(name)
        port = tail.split(":", 1)[0]
        if port:
            ports[name] = strtoll(port)[0]
    return IfList(
        raw=raw, exclude=exclude, exact=exact, entries=entries, ports=ports, ignored=len(raw) <= 1
    )


def if_list_matches(if_list: IfList, name: str, port: int | None = None) -> bool:
    """misc/utils.cc matchIfList, XOR the exclude flag (an empty list matches everything)."""
    if not if_list.entries:
        hit = True
    else:
        hit = any(
            (name == entry if if_list.exact else name.startswith(entry))
            and (port is None or if_list.ports.get(entry) in (None, -1, port))
            for entry in if_list.entries
        )
    return hit != if_list.exclude


def strtoll(value: str) -> tuple[int, bool]:
    """What C's ``strtoll(value, NULL, 0)`` returns, and whether the whole value was a number.

    misc/param.cc ncclLoadParam only rejects a value when errno is set (overflow): ``yes``
    reads as 0 and ``1x`` as 1, silently. Base 0: ``0x`` hex, leading ``0`` octal.
    """
    match = re.match(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", value)
    if not match:
        return 0, False
    sign, digits = match.groups()
    base = 16 if digits[:2].lower() == "0x" else 8 if digits.startswith("0") else 10
    number = int(digits, base) * (-1 if sign == "-" else 1)
    number = max(min(number, 2**63 - 1), -(2**63))
    return number, match.end() == len(value)


def algo_proto_errors(value: str, names: Sequence[str]) -> list[str]:
    """Why NCCL (2.24+ graph/tuning.cc parseList) would reject an NCCL_ALGO/NCCL_PROTO value.

    ``[^]list;func:[^]list;...``: only the first entry may omit the ``func:`` prefix, names are
    case-insensitive, an unknown element or prefix is ncclInvalidUsage. An empty result means
    NCCL accepts it.
    """
    known = {n.lower() for n in names}
    funcs = {f.lower() for f in NCCL_FUNCS}
    errors = []
    for i, part in enumerate(p for p in value.split(";") if p):
        prefix, sep, elems = part.partition(":")
        if not sep:
            if i:
                errors.append(f'all entries except the first must have a prefix: "{part}"')
                continue
            prefix, elems = "", part
        elif prefix.lower() not in funcs:
            errors.append(f'unrecognized prefix token "{prefix}" (one of {", ".join(NCCL_FUNCS)})')
        elems = elems[1:] if elems.startswith("^") else elems
        errors.extend(
            f'unrecognized element token "{e}" (one of {", ".join(names)})'
            for e in elems.split(",")
            if e and e.lower() not in known
        )
    return errors


@dataclass(frozen=True)
class Candidate:
    """One interface as getifaddrs() would list it for NCCL."""

    name: str
    running: bool
    ipv4: tuple[str, ...] = ()  # "a.b.c.d/len"
    ipv6: tuple[str, ...] = ()


def candidates(interfaces: Sequence[Interface]) -> list[Candidate]:
    """Interfaces (already in ifindex order) as NCCL's getifaddrs() walk sees them."""
    return [Candidate(i.name, bool(i.running), tuple(i.ipv4), tuple(i.ipv6)) for i in interfaces]


def socket_family(value: str | None) -> str | None:
    """misc/socket.cc ncclEnvSocketFamily: only the exact strings filter; anything else is none."""
    return value if value in ("AF_INET", "AF_INET6") else None


def find_interfaces(
    candidates: Sequence[Candidate], if_list: IfList, family: str | None, max_ifs: int
) -> list[tuple[str, str]]:
    """os/linux.cc ncclOsFindInterfaces: (name, address) in getifaddrs() order.

    glibc lists every interface's IPv4 addresses (by ifindex) before the IPv6 ones; NCCL skips
    interfaces without IFF_RUNNING (2.28+), the other family when NCCL_SOCKET_FAMILY forces one,
    and ``::1``; it keeps the first address per name and stops at ``max_ifs``.
    """
    walk = [(c, a, "AF_INET") for c in candidates for a in c.ipv4]
    walk += [(c, a, "AF_INET6") for c in candidates for a in c.ipv6]
    found: dict[str, str] = {}
    for cand, addr, fam in walk:
        if len(found) >= max_ifs:
            break
        if not cand.running or (family and fam != family) or addr.split("/")[0] == "::1":
            continue
        if if_list_matches(if_list, cand.name) and cand.name not in found:
            found[cand.name] = addr
    return list(found.items())


def default_pick(
    candidates: Sequence[Candidate], family: str | None, comm_id: str | None = None
) -> tuple[str, str] | None:
    """misc/socket.cc ncclFindInterfaces without NCCL_SOCKET_IFNAME, for bootstrap (1 slot).

    ``ib*`` first; then (NCCL_COMM_ID set) the interface in its subnet; then anything but
    ``docker*``/``lo*``/``virbr*``; then docker, lo, virbr.
    """
    for raw in ("ib", None, "^docker,lo,virbr", "docker", "lo", "virbr"):
        if raw is None:
            hit = _subnet_match(candidates, comm_id) if comm_id else None
        else:
            found = find_interfaces(candidates, parse_if_list(raw), family, 1)
            hit = found[0] if found else None
        if hit:
            return hit
    return None


def _subnet_match(candidates: Sequence[Candidate], comm_id: str) -> tuple[str, str] | None:
    """misc/socket.cc ncclFindInterfaceMatchSubnet for an ``<ipv4>:<port>`` NCCL_COMM_ID."""
    try:
        target = ipaddress.ip_address(comm_id.rsplit(":", 1)[0].strip("[]"))
    except ValueError:
        return None
    for cand in candidates:
        for addr in (*cand.ipv4, *cand.ipv6):
            if target in ipaddress.ip_interface(addr).network:
                return cand.name, addr
    return None
