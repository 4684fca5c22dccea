"""How each kind of NCCL line changes the process record: one small function per kind.

The functions are the ``fold`` of the entries in :mod:`nccldoctor.ncclog.kinds`; each takes the
process record, the regex match and the line's envelope. Names here follow NCCL's own spelling
(src/include/device.h, graph/tuning.cc, enqueue.cc).
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

from nccldoctor.ncclog.envelope import Envelope
from nccldoctor.ncclog.records import MAX_BACKTRACE, MAX_RING_CHANNELS, CommRank, Op, ProcessLog

if TYPE_CHECKING:
    from nccldoctor.ncclog.parser import LogSet

# Names as the tuning table and NCCL_ALGO spell them (src/include/device.h, enqueue.cc).
ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOCOLS = ("LL", "LL128", "Simple")
_CANON = {n.upper(): n for n in ALGORITHMS + PROTOCOLS}
_CANON.update({"COLLNET_DIRECT": "CollNetDirect", "COLLNET_CHAIN": "CollNetChain"})
_CANON["NVLS_TREE"] = "NVLSTree"


@functools.lru_cache(maxsize=256)  # twice per call on rank 0: the same few names
def canonical(name: str, numbered: tuple[str, ...]) -> str:
    """``RING``/``1``/``Ring`` -> ``Ring`` (per-call lines are upper case 2.24+, numeric 2.20–2.23)."""
    if name.isdigit():
        idx = int(name)
        return numbered[idx] if idx < len(numbered) else name
    return _CANON.get(name.upper(), name)


def transport_label(via: str) -> str:
    """The transport class of a ``via …`` text: ``NET/IB/0/GDRDMA``, ``P2P/CUMEM``, ``SHM``."""
    parts = via.split("/")
    kind = parts[0]
    if kind == "P2P" and len(parts) > 1:
        return f"P2P/{parts[1]}"
    if kind == "SHM" or via.startswith("direct shared memory"):  # ≤2.12 spelling of SHM
        return "SHM"
    if kind in ("NET", "COLLNET") and len(parts) > 2:
        dev = parts[2].split("(")[0]  # "2(1)" = device 2 through PXN proxy rank 1
        return f"{kind}/{parts[1]}/{dev}" + ("/GDRDMA" if "GDRDMA" in via else "")
    return via


def _int(text: str | None) -> int | None:
    return int(text) if text is not None else None


# ---- folds: each writes one kind of line into the process record -------------------------


def version(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.nccl_version = m["version"] + (m["suffix"] or "")
    p.cuda_version = m["cuda"] or p.cuda_version


def git(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.git_version = m["rest"]


def driver(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.driver_version = int(m["v"])


def init(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    if m["phase"] == "COMPLETE" and p.current is None:
        p.adopt(m["comm"])  # ≤2.18 print no START: the lines before were this init's
    c = p.comm(m["comm"])
    if m["phase"] == "START":
        p.current = m["comm"]
        c.init_start = True
    else:
        c.init_complete = True
    c.api = m["api"] or c.api
    c.rank, c.nranks = int(m["rank"]), int(m["nranks"])
    c.cuda_dev, c.nvml_dev = int(m["cuda_dev"]), _int(m["nvml_dev"])  # no nvmlDev 2.5–2.18
    c.bus_id = m["bus_id"] or c.bus_id  # no busId in 2.4
    c.comm_id = m["comm_id"] or c.comm_id


def init_garbled(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    if p.current is None and m["comm"]:
        p.adopt(m["comm"])
    p.comm(m["comm"]).init_complete = True


def comm_sized(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    """2.3 "comm %p rank %d nranks %d" (no Init START/COMPLETE yet): the lines after it are
    this communicator's init; 2.3 "rank %d nranks %d", 2.3–2.4 "nranks %d" (ncclCommInitAll)
    name no communicator."""
    if m["comm"]:
        p.current = m["comm"]
    c = p.comm(m["comm"])
    if m["rank"] is not None:
        c.rank = int(m["rank"])
    c.nranks = int(m["nranks"])


def ended(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.comm(m["comm"]).ended = m["what"]


def timings(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    c = p.comm()
    c.rank, c.nranks = (
        c.rank if c.rank is not None else int(m["rank"]),
        c.nranks or int(m["nranks"]),
    )
    c.init_complete = True  # printed right after Init COMPLETE (v2.22.3-1:init.cc:1434-1437)
    c.timings = {"total": float(m["total"])}
    for part in m["parts"].split(","):
        name, _, value = part.strip().partition(" ")
        try:
            c.timings[name] = float(value)
        except ValueError:
            continue


def topo(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    c = p.comm(m["comm"])
    c.nnodes, c.local_ranks = int(m["nnodes"]), int(m["local_ranks"])
    c.rank, c.nranks = int(m["rank"]), int(m["nranks"])


def channels(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.comm().channels = {k: int(v) for k, v in m.groupdict().items() if v is not None}


def env(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    value = m["value"]
    if value.endswith(".") and value[:-1].lstrip("-").isdigit():
        value = value[:-1]  # integer params end with a period (misc/param.cc)
    p.env[m["name"]] = value
    if m["name"].startswith("NCCL_SOCKET_"):  # what the network rules read of the env
        _quote(p, m["name"])


MAX_FOUND_IFS = 64  # 2.2–2.3's interface lines kept: bootstrap, IB sideband, NET/Socket's 16


def _quote(p: ProcessLog, fact: str, line: str | None = None) -> None:
    """Keep the line a network fact came from (the line being folded is ``p.last_line``), so
    a rule over the facts the log yields quotes it (``ncclog/hostfacts.py``)."""
    text = line if line is not None else p.last_line
    if text is not None:
        p.quotes.setdefault(fact, text)


def bootstrap(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.bootstrap = {"ifname": m["ifname"], "address": m["addr"]}
    _quote(p, "bootstrap")


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
    if len(p.found_ifs) < MAX_FOUND_IFS:
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
                _quote(p, "socket", mine[0]["line"])
        else:
            name = event["sideband"]
            mine = [f for f in found if f["ifname"] == name][-1:]
            p.ib_oob = p.ib_oob or (f"{name}:{mine[0]['address']}" if mine else name)
        if mine and p.bootstrap is None:
            p.bootstrap = {"ifname": mine[0]["ifname"], "address": mine[0]["address"]}
            _quote(p, "bootstrap", mine[0]["line"])
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
            _quote(p, "ib")
    elif not p.socket_ifs:
        p.socket_ifs = [{"ifname": name, "address": ""} for name, _ in devs]
        _quote(p, "socket")


def ib_device(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    """2.3: one line per IB port NCCL will use, by its index (a repeated line is one port)."""
    dev = {"index": int(m["index"]), "hca": m["hca"], "port": int(m["port"]), "link_layer": m["ll"]}
    p.ib_devices = by_index(p.ib_devices, [dev])
    _quote(p, "ib")


def by_index(devices: list[dict], more: list[dict]) -> list[dict]:
    """IB device lists joined by their index, the later entry winning, at most 64."""
    joined = {d["index"]: d for d in devices}
    joined.update((d["index"], d) for d in more)
    return [joined[i] for i in sorted(joined)][:64]


def ofi_devices(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    """The OFI plugin's provider and its NICs: the plugin initialised, so it is the network."""
    found = {"name": "OFI", "provider": m["provider"], "fabric": m["fabric"]}
    found["nics"] = int(m["nics"] or m["ndev"]) if (m["nics"] or m["ndev"]) else None
    p.plugin_devices.update({k: v for k, v in found.items() if v is not None})
    _quote(p, "plugin")


def plugin(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.plugins[m["what"]] = m["text"].strip()


def network(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    name = m["name"].strip()  # pasted lines keep the terminal's trailing blanks
    if name not in p.networks:
        p.networks.append(name)
        _quote(p, "network")


_IB_DEV = re.compile(r"\[(\d+)\]([^:\s]+):(\d+)(?::[\d:]*)?/(\w+)")
_SOCK_IF = re.compile(r"\[(\d+)\]([^:\s]+):(\S+?)<\d+>")


def ib_devices(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    _quote(p, "ib")
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
    _quote(p, "socket")


def gdr_hca(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.gdr_hca[m["hca"]] = m["state"] == "Enabled"


def gdr_pair(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    if len(p.gdr_pairs) < 64:
        p.gdr_pairs.append(
            {
                "enabled": m["state"] == "Enabled",
                "gpu": m["gpu"],
                "hca": m["hca"],
                "distance": int(m["distance"]),
                "limit": int(m["limit"]),
            }
        )


def connection(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    via = m["via"].strip()
    key = (int(m["channel"]), _int(m["conn"]), int(m["src"]), int(m["dst"]), m["dir"])
    p.comm().add_connection(key, transport_label(via))


def collnet(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    via = m["via"].strip()
    key = (int(m["channel"]), int(m["conn"]), int(m["rank"]), -1, m["dir"])
    p.comm().add_connection(key, transport_label(via))


def ring(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    c = p.comm()
    if len(c.rings) < MAX_RING_CHANNELS:
        c.rings[int(m["channel"])] = [int(r) for r in m["ranks"].split()]


def neighbours(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    c = p.comm()
    if len(c.ring_neighbours) < MAX_RING_CHANNELS:
        c.ring_neighbours[int(m["channel"])] = (int(m["prev"]), int(m["next"]))


_TREE = re.compile(r"\[(\d+)\] (\S+)")


def trees(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    c = p.comm()
    for channel, shape in _TREE.findall(m["trees"])[:MAX_RING_CHANNELS]:
        c.trees[int(channel)] = shape


def connected_rings(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    c = p.comm()
    c.connected_rings = True
    c.ring_pxn, c.ring_gdr = _int(m["pxn"]), _int(m["gdr"])


def connected_trees(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.comm().connected_trees = True


def nvls(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.comm().nvls = True


def _cells(text: str) -> list[str]:
    return [cell.strip() for cell in text.split("|")]


def tuning_algorithms(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.comm().tuning.algorithms = [a for a in _cells(m["cells"]) if a]


def tuning_protocols(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.comm().tuning.protocols = [a for a in _cells(m["cells"]) if a]


def tuning_row(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    table = p.comm().tuning
    algos, protos = table.algorithms, table.protocols
    if not algos or not protos:
        return  # a row without its header (the log starts mid-table)
    per_algo = max(1, len(protos) // len(algos))
    row = table.rows.setdefault(m["func"], {})
    for i, cell in enumerate(c for c in _cells(m["cells"]) if c):
        lat, _, bw = cell.partition("/")
        if i // per_algo < len(algos) and i < len(protos):
            try:
                row[(algos[i // per_algo], protos[i])] = (float(lat), float(bw))
            except ValueError:
                continue


def tuned_comm(p: ProcessLog) -> CommRank:
    """The communicator a per-call tuning line is about. They come long after init, and only
    rank 0 of a communicator prints them (enqueue.cc): the one this process is rank 0 of, the
    largest if several; the one initialised last when the log does not say."""
    best = None
    for c in p.comms.values():  # once per call on rank 0: a loop, not a list and a max()
        if c.rank == 0 and (best is None or (c.nranks or 0) > (best.nranks or 0)):
            best = c
    return best if best is not None else p.comm()


def algo(p: ProcessLog, m: re.Match[str], e: Envelope, times: int = 1) -> None:
    algo = canonical(m["algo"], ALGORITHMS)
    proto = canonical(m["proto"], PROTOCOLS)
    c = tuned_comm(p)
    # 2.20–2.22 print no function name: the collective traced just before is the one tuned
    func = m["func"] or (c.last_op.func if c.last_op else "?")
    c.add_algo(func, algo, proto, int(m["bytes"]), times)


def best_tuning(p: ProcessLog, m: re.Match[str], e: Envelope, times: int = 1) -> None:
    c = p.comm()
    pick = f"{canonical(m['algo'], ALGORITHMS)}/{canonical(m['proto'], PROTOCOLS)}"
    c.tuned[pick] = c.tuned.get(pick, 0) + times


def special_algo(p: ProcessLog, m: re.Match[str], e: Envelope, times: int = 1) -> None:
    tuned_comm(p).add_algo(m["func"], m["how"], m["detail"].split()[0], int(m["bytes"]), times)


def coll(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    c = p.comm(m["comm"])
    c.nranks = c.nranks or int(m["nranks"])
    c.add_op(
        Op(
            int(m["op"], 16),
            m["func"],
            int(m["count"]),
            int(m["dtype"]),
            int(m["redop"]),
            int(m["root"]),
        )
    )


def backtrace(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    p.error_code = int(m["code"])
    if len(p.backtrace) < MAX_BACKTRACE:
        p.backtrace.append(e.msg)
    failed_net(p, failing_net(e.msg, m["file"]))


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
        _quote(p, f"failed:{net}")


def retry(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    peer = m["peer"] or "?"
    if peer in p.connect_retries or len(p.connect_retries) < 64:
        p.connect_retries[peer] = p.connect_retries.get(peer, 0) + 1


# ---- warn folds: WARN lines with a fact besides their signature (kinds.WARN_KINDS) ---------

MAX_TARGETS = 64


def connect_failed(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    """A connect that failed for good: its target (``?`` where the line names none) and why."""
    peer = m["peer"] or "?"
    if peer in p.connect_errors or len(p.connect_errors) < MAX_TARGETS:
        p.connect_errors[peer] = m["error"].strip()
        _quote(p, f"connect:{peer}")


def checked_in(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    """The bootstrap root's "rank R of N ranks has already checked in": the size it expects."""
    c = p.comm()
    c.nranks = c.nranks or int(m["nranks"])


def hint(p: ProcessLog, m: re.Match[str], e: Envelope) -> None:
    if p.warns and len(p.warns[-1].hints) < 8:
        p.warns[-1].hints.append(e.msg)


# ---- text folds: lines that are not NCCL's (TEXT_KINDS), written into the parse result ------

# ProcessGroupNCCL.cpp's watchdog: it waited on SeqNum=12, so 11 completed; or it says so
_SEQ_TIMEOUT = re.compile(r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+)")
_SEQ_COMPLETED = re.compile(r"last completed (?:NCCL )?work: (-?\d+)")
# ProcessGroupNCCL::createLogPrefix (2.3+): "[PG ID 1 PG GUID 5(dp) Rank 0] ": SeqNums count
# per process group, so a rank is behind only against the others of its group
_PG = re.compile(r"\[PG ID \S+ PG GUID (\S+?) Rank \d+\]")
MAX_RANKS_SEEN = 4096


def world_size(logs: LogSet, m: re.Match[str], text: str) -> None:
    size = int(m[1])
    logs.world_sizes[size] = logs.world_sizes.get(size, 0) + 1


def completed_seq(logs: LogSet, m: re.Match[str], text: str) -> None:
    """Remember the last collective PyTorch's watchdog says this rank (``m``: torchrun's
    ``[rankN]:`` first, else c10d's own) completed in its process group (None: not named)."""
    done = _SEQ_COMPLETED.search(text)
    seq = int(done[1]) if done else None
    if seq is None and (timeout := _SEQ_TIMEOUT.search(text)):
        seq = int(timeout[1]) - 1
    if seq is None:
        return
    pg = _PG.search(text)
    key = (pg[1] if pg else None, int(m[1] or m[2]))
    seqs = logs.completed_seq
    if key in seqs or len(seqs) < MAX_RANKS_SEEN:
        seqs[key] = max(seq, seqs.get(key, seq))


def init_failed(logs: LogSet, m: re.Match[str], text: str) -> None:
    logs.init_failures += 1
