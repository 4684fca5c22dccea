"""How the network lines change the process record: interfaces, devices, the network chosen,
connect errors; the ``fold`` of those entries of :mod:`nccldoctor.ncclog.kinds`.

Each fold keeps the line it read a fact from (``quote``), so that a rule judging the Facts of a
log (``ncclog/hostfacts.py``) quotes it (docs/nccl-log-formats.md#network-facts).
"""

from __future__ import annotations

import re

from nccldoctor.ncclog.envelope import Envelope
from nccldoctor.ncclog.joins import by_index
from nccldoctor.ncclog.records import MAX_LISTED, ProcessLog


def quote(p: ProcessLog, fact: str, line: str | None = None) -> None:
    """Keep the line a network fact came from (the line being folded is ``p.last_line``), so
    a rule over the facts the log yields quotes it (``ncclog/hostfacts.py``)."""
    text = line if line is not None else p.last_line
    if text is not None:
        p.quotes.setdefault(fact, text)


def bootstrap(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.bootstrap = {"ifname": m["ifname"], "address": m["addr"]}
    quote(p, "bootstrap")


def found_interface(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    """2.2–2.3: one interface ncclFindInterfaces kept; a line after it says for whom."""
    _found(p, {"ifname": m["ifname"], "address": m["addr"], "line": p.last_line or ""})


def socket_count(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    """2.2–2.3 "NET/Socket : N interfaces found": the last N interfaces found are its."""
    _found(p, {"socket": m["n"]})


def ib_sideband(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    """2.2–2.3: the IB out-of-band interface, found on the line before."""
    _found(p, {"sideband": m["ifname"]})


def _found(p: ProcessLog, event: dict[str, str]) -> None:
    """Keep a 2.2–2.3 interface line in order; what they say together is read once the whole
    file is (``settle_interfaces``): a file parsed in stretches may be cut between them."""
    if len(p.found_ifs) < MAX_LISTED:  # bootstrap, IB sideband, NET/Socket's 16
        p.found_ifs.append(event)


def settle_interfaces(p: ProcessLog) -> None:
    """2.2–2.3's interface lines, read together: the interfaces found before "NET/Socket : N
    interfaces found" are NET/Socket's, the one before the IB sideband line is IB's
    out-of-band one, and the bootstrap listens on the first of them: ncclFindInterfaces
    walks the same list for each, and the bootstrap's net is the socket net, device 0
    (v2.3.7-1:bootstrap.cu:16,189; NCCL_COMM_ID's subnet match prints its own line)."""
    found: list[dict[str, str]] = []
    for event in p.found_ifs:
        if "ifname" in event:
            found.append(event)
            continue
        if "socket" in event:
            n = int(event["socket"])
            mine = found[-n:] if 0 < n <= len(found) else []
            if mine and not any(s["address"] for s in p.socket_ifs):
                p.socket_ifs = [{"ifname": f["ifname"], "address": f["address"]} for f in mine]
                quote(p, "socket", mine[0]["line"])
        else:
            name = event["sideband"]
            mine = [f for f in found if f["ifname"] == name][-1:]
            p.ib_oob = p.ib_oob or (f"{name}:{mine[0]['address']}" if mine else name)
        if mine and p.bootstrap is None:
            p.bootstrap = {"ifname": mine[0]["ifname"], "address": mine[0]["address"]}
            quote(p, "bootstrap", mine[0]["line"])
        found = []


_NET_DEV = re.compile(r"([^\s(/]+)(?:/(\d+))?\(\w+\)")


def net_devices(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    """2.3: the chosen network's devices by name ("IP Interfaces : eth0(PHB)", "IB Ports :
    mlx5_0/1(PIX)"), for a process whose log has not listed them with their addresses."""
    devs = _NET_DEV.findall(m["devs"])[:64]
    if m["what"] == "IB Ports":
        if not p.ib_devices:
            p.ib_devices = [
                {"index": i, "hca": hca, "port": int(port or 1), "link_layer": "IB"}
                for i, (hca, port) in enumerate(devs)
            ]
            quote(p, "ib")
    elif not p.socket_ifs:
        p.socket_ifs = [{"ifname": name, "address": ""} for name, _ in devs]
        quote(p, "socket")


def ib_device(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    """2.3: one line per IB port NCCL will use, by its index (a repeated line is one port)."""
    dev = {"index": int(m["index"]), "hca": m["hca"], "port": int(m["port"]), "link_layer": m["ll"]}
    p.ib_devices = by_index(p.ib_devices, [dev])
    quote(p, "ib")


def ofi_devices(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    """The OFI plugin's provider and its NICs: the plugin initialised, so it is the network."""
    found = {"name": "OFI", "provider": m["provider"], "fabric": m["fabric"]}
    found["nics"] = int(m["nics"] or m["ndev"]) if (m["nics"] or m["ndev"]) else None
    p.plugin_devices.update({k: v for k, v in found.items() if v is not None})
    quote(p, "plugin")


def plugin(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.plugins[m["what"]] = m["text"].strip()


def network(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    name = m["name"].strip()  # pasted lines keep the terminal's trailing blanks
    if name not in p.networks:
        p.networks.append(name)
        quote(p, "network")


_IB_DEV = re.compile(r"\[(\d+)\]([^:\s]+):(\d+)(?::[\d:]*)?/(\w+)")
_SOCK_IF = re.compile(r"\[(\d+)\]([^:\s]+):(\S+?)<\d+>")


def ib_devices(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    quote(p, "ib")
    p.ib_devices = [
        {"index": int(i), "hca": hca, "port": int(port), "link_layer": ll}
        for i, hca, port, ll in _IB_DEV.findall(m["devs"])
    ]
    p.ib_relaxed_ordering = "[RO]" in m["devs"]
    p.ib_oob = m["oob"]


def ib_none(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.ib_no_device = True


def socket_ifs(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.socket_ifs = [{"ifname": n, "address": a} for _, n, a in _SOCK_IF.findall(m["ifs"])]
    quote(p, "socket")


# The transport a failing line belongs to, by its text or its source file: a WARN of NET/IB or
# NET/OFI, an ibverbs call that failed, an error chain through net_ib.cc
# (docs/nccl-log-formats.md#network). Checked in order; the first that holds names it.
FAILING_NETS: tuple[tuple[str, str, str], ...] = (
    ("text", "NET/IB", "IB"),
    ("text", "NET/OFI", "OFI"),
    ("text", "NET/Socket", "Socket"),
    ("text", "Call to ibv_", "IB"),
    ("file", "net_ib", "IB"),
    ("file", "ibvwrap", "IB"),
    ("file", "net_socket", "Socket"),
)
# ... except the lines of device discovery, printed before any network is chosen: IB absent or
# unusable there means NCCL goes on with another network
DISCOVERY = (
    "No device found",
    "No IP interface found",
    "Unable to open device",
    "Unable to query",
    "Failed to open libibverbs",
    "ibv_open_device",
    "ibv_get_device_list",
    "ibv_query_",
    "ibv_fork_init",
    "dlvsym failed",
    "lib wrapper not initialized",
)


def failing_net(text: str, file: str | None) -> str | None:
    """The network a failing line (``text``, printed from ``file``) belongs to, if it says."""
    if any(d in text for d in DISCOVERY):
        return None
    for where, needle, net in FAILING_NETS:
        if needle in (text if where == "text" else file or ""):
            return net
    return None


def failed_net(p: ProcessLog, net: str | None) -> None:
    if net is not None and net not in p.failed_nets:
        p.failed_nets.append(net)
        quote(p, f"failed:{net}")


def retry(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    peer = m["peer"] or "?"
    if peer in p.connect_retries or len(p.connect_retries) < 64:
        p.connect_retries[peer] = p.connect_retries.get(peer, 0) + 1


MAX_TARGETS = 64


def connect_failed(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    """A connect that failed for good: its target (``?`` where the line names none) and why."""
    peer = m["peer"] or "?"
    if peer in p.connect_errors or len(p.connect_errors) < MAX_TARGETS:
        p.connect_errors[peer] = m["error"].strip()
        quote(p, f"connect:{peer}")
