"""NCCL RAS output (``ncclras``, text and ``-f json``) as data: the job, the communicators, and
each error or warning RAS printed with the ranks and processes it names; and NCCL 2.31+'s
diagnostics reports (``NCCL DIAG`` lines: ``ncclras -D``, ``NCCL_RUN_RAS_DIAGNOSTICS=1``,
``NCCL_RUN_DIAGNOSTICS=1``) with the inventory they state per communicator.

The text format is NCCL's src/ras/client_support.cc (``rasOutAppend`` calls), described in
the formats page (docs/nccl-tests-formats.md#ras); each detail line kind is one row of
``_DETAILS``. The diagnostics lines are src/ras/diagnostics*.cc and src/diagnostics/ of NCCL
2.31.2 and 2.32.3 (docs/nccl-tests-formats.md#diag), one row of ``_DIAG_LINES`` per message.
It judges nothing: the rules are ``checks/ras.py``. Bad input never raises: what cannot be read is left
out and ``error`` says why (JSON).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from nccldoctor import jsondoc
from nccldoctor.limits import MAX_EVIDENCE_CHARS, MAX_RAS_RANKS


@dataclass
class Peer:
    """A rank or process RAS names: what it printed of it."""

    rank: int | None = None
    pid: int | None = None
    node: str | None = None
    gpu: str | None = None


@dataclass
class Entry:
    """One entry of the Errors or Warnings section: ``DEAD``, ``#0-0 (hash) INCOMPLETE`` ..."""

    section: str  # errors | warnings
    kinds: list[str]  # DEAD, INCOMPLETE, MISMATCH, TIMEOUT, ERROR ...
    comm: str | None = None  # "#0-0" for a communicator's entry
    comm_hash: str | None = None
    lines: list[str] = field(default_factory=list)
    peers: list[Peer] = field(default_factory=list)
    missing_ranks: list[int] = field(default_factory=list)
    operations: list[tuple[int, int]] = field(default_factory=list)  # (ranks, up to operation)
    left_out: int = 0  # ranks and processes named past MAX_RAS_RANKS: counted, not kept

    def keep(self, peers: list[Peer], ranks: Sequence[int] = ()) -> None:
        """Take ``peers`` and missing ``ranks`` up to MAX_RAS_RANKS of each; count the rest."""
        room = max(0, MAX_RAS_RANKS - len(self.peers))
        self.peers += peers[:room]
        self.left_out += max(0, len(peers) - room)
        room = max(0, MAX_RAS_RANKS - len(self.missing_ranks))
        self.missing_ranks += list(ranks[:room])
        self.left_out += max(0, len(ranks) - room)


@dataclass
class CommGroup:
    """A row of the communicators table: ``count`` communicators alike."""

    group: int
    count: int
    nodes: int
    ranks_per_node: str  # "8" or a range "7-8"
    ranks: int
    status: str
    errors: list[str]


@dataclass
class DiagResult:
    """One ``[OK]`` or ``[INFO]`` line of a diagnostics report."""

    tag: str  # OK | INFO
    check: str  # "GPU inventory", "CUDA driver version", "ECC", "NVLink", "p2p", "Xid/SXid" ...
    message: str  # the text after "<check>: "
    kind: str | None = None  # which message of _DIAG_LINES it is; None: one this table lacks
    comm_hash: str | None = None  # hex, without 0x
    ranks: list[int] = field(default_factory=list)  # the rank set it names ({0,1,...} (N=12))
    ranks_total: int | None = None  # the set's size when NCCL cut the list
    values: dict[str, str] = field(default_factory=dict)  # model, gpus, version, links, worst ...
    groups: list[tuple[str, list[int]]] = field(default_factory=list)  # env: value -> its ranks

    def text(self) -> str:
        """The result as NCCL printed it after the tag (``_check_message`` undone)."""
        if self.check == "Xid/SXid" and _XID_EVENT.match(self.message):
            return self.message
        if self.check == _NET_DEVICE.rstrip() and _NIC.match(self.message):
            return f"{self.check} {self.message}"
        return f"{self.check}: {self.message}" if self.check else self.message


@dataclass
class Inventory:
    """What one communicator's diagnostics stated when its ranks agreed."""

    comm_hash: str
    ranks: int | None = None
    gpus_per_node: int | None = None
    gpu_model: str | None = None
    cuda_driver: int | None = None  # the CUDA version the driver supports, 13000 = 13.0
    nvidia_driver: str | None = None  # NVML's driver version, "580.65.06" (2.32+)
    nvlinks_per_device: int | None = None  # None: no line (PCIe-only systems print none)
    ecc: str | None = None  # clean | errors | unavailable


@dataclass
class DiagReport:
    """One diagnostics report: ``=== RAS Diagnostics ===`` (passive, over RAS) or
    ``=== NCCL Diagnostics ===`` (active, at communicator init), its results, its end."""

    kind: str  # ras | active
    host: str | None = None  # the process that printed it (DIAG_PRINT's "%s:%d" prefix)
    pid: int | None = None
    results: list[DiagResult] = field(default_factory=list)
    completed_ms: float | None = None  # None: the report's last line never came
    completed_across: int | None = None
    across: str | None = None  # "ranks" (one communicator's) or "RAS peers" (the job's processes)
    busy: bool = False  # "BUSY: diagnostics already in progress": nothing ran

    def inventory(self) -> list[Inventory]:
        """Per communicator, what its ranks agree on (GPUs per node, model, driver, NVLinks)."""
        found: dict[str, Inventory] = {}
        for r in self.results:
            if r.comm_hash is not None and r.kind is not None:
                inv = found.setdefault(r.comm_hash, Inventory(r.comm_hash))
                inv.ranks = _int(r.values.get("n")) or inv.ranks
                _state(inv, r)
        stated = ("gpus_per_node", "gpu_model", "cuda_driver", "nvidia_driver",
                  "nvlinks_per_device", "ecc")  # fmt: skip
        return [i for i in found.values() if any(getattr(i, k) is not None for k in stated)]


@dataclass
class RasReport:
    source: str
    nccl_version: str | None = None
    nodes: int | None = None
    processes: int | None = None
    gpus: int | None = None
    groups: list[CommGroup] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    diagnostics: list[DiagReport] = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for diag, report in zip(data["diagnostics"], self.diagnostics, strict=True):
            diag["inventory"] = [asdict(i) for i in report.inventory()]
        return data


@dataclass
class RasReading:
    """The subject of the ``ras`` rules: the outputs, and where each rank's NCCL log in the same
    ticket stops and on which host it ran, by communicator hash and rank (RAS and its
    diagnostics print a communicator's ``commHash``, which is the ``commId 0x…`` of NCCL's
    ``Init COMPLETE`` line: all are ``comm->commHash``)."""

    reports: list[RasReport]
    log_last_lines: dict[tuple[int, int], str] = field(default_factory=dict)
    log_hosts: dict[tuple[int, int], str] = field(default_factory=dict)

    def last_line(self, comm_hash: str | None, rank: int | None) -> str | None:
        return _by_rank(self.log_last_lines, comm_hash, rank)

    def host(self, comm_hash: str | None, rank: int | None) -> str | None:
        return _by_rank(self.log_hosts, comm_hash, rank)


def _by_rank(
    table: dict[tuple[int, int], str], comm_hash: str | None, rank: int | None
) -> str | None:
    if comm_hash is None or rank is None:
        return None
    try:
        return table.get((int(comm_hash, 16), rank))
    except ValueError:
        return None


_VERSION = re.compile(r"^NCCL version (?P<v>[\d.]+)")
# The job's totals follow a "(total) ..." heading line: "%7d  %9ld  %11d  %9d  %8d" under
# "(total)   per node  per process    (total)  (total)" for a uniform job, three totals
# (nodes, processes, GPUs) under "(total)    (total)      (total)" otherwise.
_INTS = re.compile(r"^\s*\d+(?:\s+\d+)*\s*$")
# client_support.cc: "%5d  %8d  %8d  %8s  %8d  %8d  %8s  %6s"
_GROUP = re.compile(
    r"^\s*(?P<g>\d+)\s+(?P<n>\d+)\s+(?P<nodes>\d+)\s+(?P<rpn>[\d-]+)\s+(?P<ranks>\d+)\s+\d+\s+"
    r"(?P<status>[A-Z]+)\s+(?P<errors>[A-Z,]+)\s*$"
)
_COMM_ENTRY = re.compile(r"^#(?P<comm>\d+-\d+) \((?P<hash>[0-9a-f]+)\) (?P<kinds>[A-Z,]+)\s*$")
_ENTRY = re.compile(r"^(?P<kinds>[A-Z]+(?:,[A-Z]+)*)\s*$")
# "Process %d on node %s managing GPU%s %s"; "Rank %d -- GPU %s managed by process %d on node %s"
_PROCESS = re.compile(r"Process (?P<pid>\d+) on node (?P<node>\S+) managing GPUs? (?P<gpu>\S+)")
_RANK = re.compile(
    r"Rank (?P<rank>\d+) -- GPU (?P<gpu>\S+) managed by process (?P<pid>\d+) on node (?P<node>\S+)"
)
_MISSING = re.compile(r"The missing ranks?: (?P<ranks>[\d, ]+)")
_OPS = re.compile(r"(?P<n>\d+) ranks? ha(?:s|ve) launched up to operation (?P<op>\d+)")


def _detail(entry: Entry, line: str) -> None:
    if len(entry.lines) < MAX_RAS_RANKS:  # a line a rank: as many as the ranks kept
        entry.lines.append(line[:MAX_EVIDENCE_CHARS])  # a list of a million ranks is one line
    if m := _RANK.search(line):
        entry.keep([Peer(int(m["rank"]), int(m["pid"]), m["node"], m["gpu"])])
    elif m := _PROCESS.search(line):
        entry.keep([Peer(None, int(m["pid"]), m["node"], m["gpu"])])
    elif m := _MISSING.search(line):
        entry.keep([], [int(r) for r in re.findall(r"\d+", m["ranks"])])
    elif m := _OPS.search(line):
        entry.operations.append((int(m["n"]), int(m["op"])))


# ---- NCCL DIAG reports (NCCL 2.31+) ------------------------------------------------------------

# diagnostics_log.h DIAG_PRINT: "%s:%d " (hostname, pid) then "NCCL DIAG %s"; rasDiagnosticsFormatLine
# the same for a report sent back to ncclras -D. A launcher may put its own prefix in front.
_DIAG = "NCCL DIAG "
# the whole host name (a 64-byte buffer), after a launcher's prefix ("0: ", "[1,0]<stdout>:")
_DIAG_WHO = re.compile(r"(?<![^\s\]>:])(?P<host>[^\s:]{1,64}):(?P<pid>\d{1,10}) $")
_DIAG_HEAD = re.compile(r"=== (?P<which>RAS|NCCL) Diagnostics ===$")
# diagnostics.cc rasDiagnosticsResume "RAS diagnostics completed in %.1f ms across %d %s" (ranks
# for one communicator, RAS peers on demand); src/diagnostics "NCCL diagnostics completed in …"
_DIAG_DONE = re.compile(
    r"(?P<which>RAS|NCCL) diagnostics completed in (?P<ms>\d+(?:\.\d+)?) ms across (?P<n>\d+) "
    r"(?P<across>ranks|RAS peers)"
)
# RAS_DIAG_TAG_OK "[OK]   ", RAS_DIAG_TAG_INFO "[INFO] ", then "<check>: <message>" mostly
_DIAG_RESULT = re.compile(r"\[(?P<tag>OK|INFO)\]\s+(?P<rest>.*)$")
_CHECK = re.compile(r"(?P<check>[^:]+): (?P<message>.*)$")
# 2.32's lines that do not start "<check>: ": an Xid or SXid event (diagnostics_xid.cc) and a
# NIC's line "Net device NAME:PORT: …" (diagnostics_net.cc)
_XID_EVENT = re.compile(r"S?Xid \d")
_NET_DEVICE = "Net device "
_NIC = re.compile(r"\S+:\d+: ")  # "mlx5_0:1: " after "Net device "


def _check_message(rest: str) -> tuple[str, str]:
    """The check a result line names, and its message."""
    if _XID_EVENT.match(rest):
        return "Xid/SXid", rest
    if rest.startswith(_NET_DEVICE) and not rest.startswith(_NET_DEVICE.rstrip() + ":"):
        return _NET_DEVICE.rstrip(), rest[len(_NET_DEVICE) :]
    m = _CHECK.match(rest)
    return (m["check"].strip(), m["message"]) if m else ("", rest)


# client.cc, a second on-demand request while one runs
_DIAG_BUSY = "BUSY: diagnostics already in progress"
# diagnostics_checks_common.cc rasDiagnosticsFormatRankSet: "{0,1,2}", or past
# RAS_DIAG_RANK_SET_MAX (8) ranks "{0,1,...,7,...} (N=12)"
_SET = r"\{(?P<ranks>[\d,]*?)(?:,\.\.\.\} \(N=(?P<total>\d+)\)|\})"
_RANKS = rf"rank\(s\) {_SET}"
_COMM = r"in comm 0x(?P<comm>[0-9a-f]+)"
_ACROSS = rf"across (?P<n>\d+) ranks {_COMM}"
_REF = r"differ from rank (?P<ref>\d+)"
# diagnostics_net.cc rasDiagnosticsNetFormatProps; speed is the port rate in Mbps (400000: NDR)
_NET_PROPS = (
    r"net device type=(?P<type>[^,]+), speed=(?P<speed>-?\d+) Mbps, link layer=(?P<link>[^,]+)"
    r"(?P<data_direct>, Data Direct)?, state=(?P<port_state>[^/]+)/(?P<phys_state>[^),]+)"
)

# (check, kind, message pattern): the rasDiagnosticsReport formats of NCCL 2.31.2 src/ras/
# diagnostics_gpu.cc (GPU inventory, CUDA driver version, ECC, NVLink), diagnostics_env.cc (NCCL
# environment), diagnostics_checks_common.cc (incomplete, any check: None) and the active P2P
# check's DIAG_PRINTs (src/diagnostics/p2p.cc). First match wins.
_DIAG_LINES: tuple[tuple[str | None, str, re.Pattern[str]], ...] = tuple(
    (check, kind, re.compile(pattern))
    for check, kind, pattern in (
        ("GPU inventory", "count-only",
         rf"(?P<gpus>\d+) GPUs per node consistent {_ACROSS}, GPU model unavailable via NVML$"),
        ("GPU inventory", "model-only",
         rf"(?P<model>.+) per node consistent {_ACROSS}, GPU count unavailable via NVML$"),
        ("GPU inventory", "consistent", rf"(?P<gpus>\d+)x (?P<model>.+) per node consistent {_ACROSS}$"),
        ("GPU inventory", "unavailable", rf"unavailable via NVML {_ACROSS}$"),
        ("GPU inventory", "count-mismatch",
         rf"count mismatch {_ACROSS}, {_RANKS} {_REF} \((?P<gpus>\d+)\)$"),
        ("GPU inventory", "model-mismatch",
         rf"model mismatch {_ACROSS}, {_RANKS} {_REF} \((?P<model>.*)\)$"),
        # a later diagnostics_gpu.cc prints both driver checks through one version summary:
        # rank 0's value may then be "unavailable" or "no driver installed" (both read here)
        ("CUDA driver version", "consistent", rf"(?P<version>\d+) consistent {_ACROSS}$"),
        ("CUDA driver version", "unavailable",
         rf"(?P<version>unavailable|no driver installed) {_ACROSS}$"),
        ("CUDA driver version", "mismatch",
         rf"mismatch {_ACROSS}, {_RANKS} {_REF} \((?P<version>[^)]*)\)$"),
        ("NVIDIA graphics driver version", "consistent",
         rf"(?P<version>\S+) consistent {_ACROSS}$"),
        ("NVIDIA graphics driver version", "unavailable", rf"unavailable via NVML {_ACROSS}$"),
        ("NVIDIA graphics driver version", "mismatch",
         rf"mismatch {_ACROSS}, {_RANKS} {_REF} \((?P<version>[^)]*)\)$"),
        ("ECC", "unavailable", rf"unavailable via NVML {_ACROSS}$"),
        ("ECC", "clean", rf"no uncorrected volatile errors {_ACROSS}$"),
        ("ECC", "clean-partial",
         rf"no uncorrected volatile errors across (?P<available>\d+) of (?P<n>\d+) ranks {_COMM} "
         r"\(ECC counters unavailable via NVML on (?P<unavailable>\d+) ranks\)$"),
        ("ECC", "uncorrected",
         rf"uncorrected volatile errors on {_RANKS} \(worst=(?P<worst>\d+)\) {_ACROSS}$"),
        ("ECC", "corrected",
         rf"corrected volatile errors at or above threshold (?P<threshold>\d+) on {_RANKS} "
         rf"\(worst=(?P<worst>\d+)\) {_ACROSS}$"),
        ("NVLink", "consistent",
         rf"found (?P<links>\d+) link\(s\) per device, all active {_ACROSS}$"),
        ("NVLink", "count-mismatch",
         rf"link-count mismatch {_ACROSS}, {_RANKS} {_REF} \((?P<links>\d+)\)$"),
        ("NVLink", "inactive", rf"inactive link\(s\) on {_RANKS} {_ACROSS}$"),
        ("NCCL environment", "consistent", rf"NCCL_\* env vars consistent {_ACROSS}$"),
        ("NCCL environment", "mismatch", rf"mismatch {_ACROSS} for (?P<key>.+)$"),
        ("NCCL environment", "value", rf"(?P<key>[^=\s]+)=(?P<value>.*) on {_RANKS}$"),
        ("NCCL environment", "differ",
         rf"(?P<count>\d+) NCCL_\* env var\(s\) differ across ranks {_COMM}$"),
        ("NCCL environment", "truncated",
         r"(?P<count>\d+) rank\(s\) had >(?P<bytes>\d+) bytes of NCCL_\* env vars; "
         r"comparison may be partial$"),
        (None, "incomplete",
         r"diagnostics incomplete, gathered (?P<gathered>\d+)/(?P<n>\d+) ranks in comm "
         r"0x(?P<comm>[0-9a-f]+)/0x[0-9a-f]+/0x[0-9a-f]+(?: \(RAS overlay may not be ready\))?$"),
        ("p2p", "verified",
         r"all (?P<passed>\d+) directed GPU P2P edges verified"
         r"(?: \(skipped indirect=(?P<skipped>\d+)\))?$"),
        ("p2p", "edges-failed",
         r"(?P<passed>\d+)/(?P<tested>\d+) directed GPU P2P edges verified"
         r"(?: \(skipped indirect=(?P<skipped>\d+)\))?$"),
        ("p2p", "edge",
         r"(?P<failure>[a-z][a-z /-]*?) srcRank=(?P<src>\d+) srcCudaDev=(?P<src_dev>-?\d+) "
         r"srcNvmlDev=-?\d+ dstRank=(?P<dst>\d+) dstCudaDev=(?P<dst_dev>-?\d+) dstNvmlDev=-?\d+ "
         r"path=(?P<path>\S+) handle=(?P<handle>\S+)(?P<detail>.*)$"),
        ("p2p", "returned", r"(?:active )?check returned (?P<code>-?\d+)$"),
        # 2.32.3 (commit 12df1a1) adds the checks below. diagnostics_checks_common.cc: a check
        # that could not gather every rank no longer ends "(RAS overlay may not be ready)" (the
        # row above reads both), and a topology not yet built is its own line.
        (None, "topology-not-ready",
         r"incomplete for comm 0x(?P<comm>[0-9a-f]+): topology-dependent data was unavailable "
         r"for (?P<unavailable>\d+) of (?P<n>\d+) ranks$"),
        # diagnostics_xid.cc: one line per host and event (the check's name is not printed on
        # an event's line: _check_message names it), [OK] where NVIDIA's catalogue asks nothing
        ("Xid/SXid", "sxid",
         r"SXid (?P<code>\d+) detected (?P<at_least>at least )?(?P<count>\d+) times? \(NVSwitch "
         r"driver reported (?P<class>Fatal|Non-fatal|classification unavailable), link\(s\) "
         r"\{(?P<links>[\d,]*)\}\) on host (?P<host>\S+)\. (?P<advice>.*)$"),
        ("Xid/SXid", "xid",
         r"Xid (?P<code>\d+) detected (?P<at_least>at least )?(?P<count>\d+) times? on host "
         r"(?P<host>\S+)\. (?P<advice>.*)$"),
        ("Xid/SXid", "no-source", r"no kernel-log source was available on host (?P<host>\S+)$"),
        ("Xid/SXid", "truncated", r"recent-event scan was truncated on host (?P<host>\S+)$"),
        ("Xid/SXid", "clean",
         r"no events requiring immediate attention across (?P<hosts>\d+) hosts?$"),
        # diagnostics_pci.cc: rdma_topo (ConnectX DMA Direct topology), then, where it gave no
        # conclusive answer, IOMMU mode and groups and ATS of each GPU/NIC pair NCCL uses
        ("rdma_topo check", "passed",
         rf"passed on (?P<ranks_ok>\d+)/(?P<n>\d+) ranks {_COMM}$"),
        ("rdma_topo check", "failed",
         rf"failed on {_RANKS} across (?P<ran>\d+)/(?P<n>\d+) ranks {_COMM}; first rank "
         r"(?P<first>\d+) exit (?P<exit>-?\d+): (?P<sample>.*)$"),
        ("rdma_topo check", "not-usable",
         rf"not usable on (?P<unusable>\d+)/(?P<n>\d+) ranks {_COMM} \((?P<reason>[^)]*)\)$"),
        ("rdma_topo check", "mixed",
         rf"mixed results {_ACROSS} \(conclusive=(?P<conclusive>\d+) "
         r"not-usable=(?P<unusable>\d+)\)$"),
        ("IOMMU mode", "mode",
         rf"(?P<mode>disabled|passthrough|enabled \(DMA remapping\)) for (?P<devices>\d+) "
         rf"relevant device\(s\) across (?P<ranks_ok>\d+)/(?P<n>\d+) ranks {_COMM}$"),
        ("IOMMU mode", "mixed",
         rf"(?P<result>unavailable|incomplete|mismatch) across (?P<devices>\d+) relevant "
         rf"device\(s\) on (?P<ranks_ok>\d+)/(?P<n>\d+) ranks {_COMM}$"),
        ("IOMMU mode", "mode-devices",
         r"(?P<mode>disabled|passthrough|enabled \(DMA remapping\)|unavailable) on "
         rf"(?P<devices>\d+) device\(s\); first rank (?P<first>\d+) device (?P<bdf>\S+) {_COMM}$"),
        ("IOMMU mode", "unidentified",
         rf"unable to identify relevant GPU/NIC pairs on (?P<unusable>\d+)/(?P<n>\d+) ranks "
         rf"{_COMM}$"),
        ("IOMMU groups", "differ",
         rf"GPU and NIC groups differ on (?P<pairs>\d+) pair\(s\) {_COMM}; first rank "
         r"(?P<first>\d+) GPU group (?P<gpu_group>-?\d+) NIC (?P<bdf>\S+) group "
         r"(?P<nic_group>-?\d+)$"),
        ("IOMMU groups", "match",
         rf"GPU and NIC groups match on (?P<pairs>\d+) pair\(s\) across (?P<ranks_ok>\d+)/"
         rf"(?P<n>\d+) ranks {_COMM}$"),
        ("IOMMU groups", "unavailable",
         rf"comparison unavailable on (?P<pairs>\d+) GPU/NIC pair\(s\) {_COMM}$"),
        ("IOMMU groups", "unavailable-first",
         rf"unavailable on (?P<pairs>\d+) pair\(s\) {_COMM}; first rank (?P<first>\d+) GPU "
         r"group (?P<gpu_group>-?\d+) NIC (?P<bdf>\S+) group (?P<nic_group>-?\d+)$"),
        ("ATS state", "enabled",
         rf"enabled on (?P<pairs>\d+) rank/NIC pair\(s\) {_ACROSS}$"),
        ("ATS state", "enabled-partial",
         rf"enabled on (?P<pairs>\d+) rank/NIC pair\(s\) across (?P<ranks_ok>\d+)/(?P<n>\d+) "
         rf"ranks {_COMM}$"),
        ("ATS state", "disabled",
         rf"disabled on (?P<pairs>\d+) rank/NIC pair\(s\) across (?P<affected>\d+)/(?P<n>\d+) "
         rf"ranks {_COMM}$"),
        ("ATS state", "disabled-first",
         rf"ATSCtl disabled on (?P<pairs>\d+) rank/NIC pair\(s\) {_COMM}; first rank "
         r"(?P<first>\d+) NIC (?P<bdf>\S+)$"),
        ("ATS state", "needs-root",
         rf"PCIe capabilities (?:require root access|inaccessible) on (?P<pairs>\d+) rank/NIC "
         rf"pair\(s\) (?:across (?P<affected>\d+)/(?P<n>\d+) ranks )?{_COMM}"
         r"(?:; first rank (?P<first>\d+) NIC (?P<bdf>\S+))?$"),
        ("ATS state", "unavailable",
         rf"(?:ATSCtl )?unavailable (?:on (?P<pairs>\d+) rank/NIC pair\(s\) |across "
         rf"(?P<affected>\d+)/(?P<n>\d+) ranks ){_COMM}(?:; first rank (?P<first>\d+) NIC "
         r"(?P<bdf>\S+))?$"),
        ("ATS state", "not-inspected",
         rf"(?:lspci (?P<lspci>unavailable|output truncated)|network device selection "
         rf"(?P<selection>truncated|incomplete)) on {_RANKS} {_COMM}$"),
        ("ATS state", "unidentified",
         rf"unable to identify relevant NICs on (?P<unusable>\d+)(?:/(?P<n>\d+))? rank\(?s\)? "
         rf"{_COMM}$"),
        # diagnostics_paths.cc: the PATH_* types the ranks use to reach their peers, "NAME" when
        # every rank uses it, "NAME(present/total)" when only some do
        ("Paths", "gpu-missing",
         r"could not locate the rank's own GPU in the topology, so its paths are unknown -- "
         rf"{_SET} {_COMM}$"),
        ("Paths", "types", rf"(?P<types>[A-Za-z0-9()/+]+) {_ACROSS}$"),
        # diagnostics_net.cc: each NIC (name:port) compared across nodes, then within each node;
        # its properties "net device type=T, speed=S Mbps, link layer=L[, Data Direct],
        # state=PORT/PHYS"
        ("Net device", "differ",
         rf"(?P<device>\S+:\d+): {_RANKS} {_REF} \({_NET_PROPS}\) across (?P<reporting>\d+) of "
         rf"(?P<expected>\d+) nodes {_COMM}$"),
        ("Net device", "missing",
         rf"(?P<device>\S+:\d+): reported on only (?P<reporting>\d+) of (?P<expected>\d+) nodes "
         rf"{_COMM} \(device may be missing on some nodes\)(?P<note>.*)$"),
        ("Net device", "consistent",
         rf"(?P<device>\S+:\d+): {_NET_PROPS} across (?P<reporting>\d+) nodes {_COMM}"
         r"(?: \((?P<note>port is not active|some port attributes unavailable)\))?$"),
        ("Net device", "node-differs",
         rf"NIC configuration \(device type, speed, link layer, port state or Data Direct use\) "
         rf"differs within (?P<differ>\d+) of (?P<nodes>\d+) nodes {_COMM}$"),
        ("Net device", "node-consistent",
         rf"NIC configuration consistent within each node across (?P<nodes>\d+) nodes {_COMM}$"),
        ("Net device", "skipped",
         rf"(?P<state>skipped|not inspected) across (?P<n>\d+) ranks {_COMM} \((?P<reason>.*)\)$"),
        # src/diagnostics/ib_write_bw.cc (NCCL_RUN_DIAGNOSTICS): ib_write_bw between node pairs,
        # printed by rank 0 (the summary, each rank >30% off the median) or by the pair's rank
        ("net bw", "stats",
         r"(?P<min>\d+(?:\.\d+)?)/(?P<median>\d+(?:\.\d+)?)/(?P<max>\d+(?:\.\d+)?) Gbit/s "
         r"min/median/max (?P<mode>same-nic|cross-nic) bw \(across (?P<measured>\d+) ranks\) "
         rf"{_COMM}$"),
        ("net bw", "outlier",
         r"(?P<mode>same-nic|cross-nic) rank (?P<rank>\d+) \((?P<host>[^)]*)\): "
         r"(?P<gbits>\d+(?:\.\d+)?) Gbit/s, >30% off median (?P<median>\d+(?:\.\d+)?) Gbit/s "
         rf"{_COMM}$"),
        ("net bw", "more-outliers",
         rf"(?P<mode>same-nic|cross-nic): (?P<more>\d+) more ranks >30% off median {_COMM}$"),
        ("net bw", "pair-failed",
         r"mode=(?P<mode>same|cross) server_rank=(?P<src>\d+) server_host=(?P<server_host>\S*) "
         r"server_device=(?P<server_device>\S*) client_rank=(?P<dst>\d+) "
         r"client_host=(?P<client_host>\S*) client_device=(?P<client_device>\S*) "
         rf"(?:memory=(?P<memory>\S+) )?(?P<failure>.+?) {_COMM}$"),
        ("net bw", "not-run", rf"(?P<failure>.+?) {_COMM}$"),
    )
)  # fmt: skip


def _int(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() else None


def _state(inv: Inventory, r: DiagResult) -> None:
    """What a line states of its communicator's inventory when its ranks agree (or that ECC
    errors were found); mismatch lines state nothing common."""
    v = r.values
    match (r.check, r.kind):
        case ("GPU inventory", "consistent"):
            inv.gpus_per_node, inv.gpu_model = int(v["gpus"]), v["model"]
        case ("GPU inventory", "count-only"):
            inv.gpus_per_node = int(v["gpus"])
        case ("GPU inventory", "model-only"):
            inv.gpu_model = v["model"]
        case ("CUDA driver version", "consistent"):
            inv.cuda_driver = int(v["version"])
        case ("NVIDIA graphics driver version", "consistent"):
            inv.nvidia_driver = v["version"]
        case ("NVLink", "consistent"):
            inv.nvlinks_per_device = int(v["links"])
        case ("ECC", "clean" | "clean-partial"):
            inv.ecc = inv.ecc or "clean"
        case ("ECC", "uncorrected" | "corrected"):
            inv.ecc = "errors"
        case ("ECC", "unavailable"):
            inv.ecc = "unavailable"


def _diag_result(tag: str, check: str, message: str) -> DiagResult:
    result = DiagResult(tag, check, message)
    for row_check, kind, pattern in _DIAG_LINES:
        if row_check not in (None, check) or not (m := pattern.match(message)):
            continue
        values = {k: v for k, v in m.groupdict().items() if v is not None}
        result.kind = kind
        result.comm_hash = values.pop("comm", None)
        result.ranks = [int(r) for r in values.pop("ranks", "").split(",") if r.isdigit()]
        result.ranks_total = _int(values.pop("total", None)) or (len(result.ranks) or None)
        result.values = values
        break
    return result


class _DiagReader:
    """The diagnostics reports in a stream of lines, one open report per printing process (the
    rank-0 processes of several communicators can print at once)."""

    def __init__(self, out: list[DiagReport]) -> None:
        self.out = out
        self.open: dict[tuple[str | None, int | None], DiagReport] = {}

    def line(self, line: str, at: int) -> None:
        """The line whose ``NCCL DIAG `` starts at ``at``: what precedes it names the process."""
        m = _DIAG_WHO.search(line, max(0, at - 80), at)
        who = (m["host"], _int(m["pid"])) if m else (None, None)
        body = line[at + len(_DIAG) :].rstrip()
        if head := _DIAG_HEAD.match(body):
            self._start(who, _kind(head["which"]))
        elif done := _DIAG_DONE.match(body):
            report = self.open.pop(who, None) or self._start(who, _kind(done["which"]), keep=False)
            report.completed_ms = float(done["ms"])
            report.completed_across, report.across = int(done["n"]), done["across"]
        elif res := _DIAG_RESULT.match(body):
            result = _diag_result(res["tag"], *_check_message(res["rest"]))
            # the active checks (src/diagnostics) print without a report's header when cut
            report = self.open.get(who) or self._start(
                who, "active" if result.check in ("p2p", "net bw") else "ras"
            )
            last = report.results[-1] if report.results else None
            # diagnostics_env.cc prints each variable's values right after its mismatch line
            if (
                result.kind == "value"
                and last is not None
                and (last.check, last.kind) == (result.check, "mismatch")
            ):
                last.groups.append((result.values.get("value", ""), result.ranks))
            else:
                report.results.append(result)

    def busy(self) -> None:
        self.out.append(DiagReport("ras", busy=True))

    def _start(
        self, who: tuple[str | None, int | None], kind: str, keep: bool = True
    ) -> DiagReport:
        report = DiagReport(kind, who[0], who[1])
        self.out.append(report)
        if keep:
            self.open[who] = report
        return report


def _kind(which: str) -> str:
    return "ras" if which == "RAS" else "active"


def parse_text(lines: Iterable[str], source: str) -> RasReport:
    """An ncclras text output, or any text with diagnostics reports in it (a job's stdout)."""
    report = RasReport(source)
    diag = _DiagReader(report.diagnostics)
    section = ""
    entry: Entry | None = None
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line.strip() or set(line.strip()) == {"="}:
            entry = None if not line.strip() else entry
            continue
        if (at := line.find(_DIAG)) >= 0:
            diag.line(line, at)
        elif line.startswith(_DIAG_BUSY):
            diag.busy()
        elif m := _VERSION.match(line):
            report.nccl_version = m["v"]
        elif line.startswith("Job summary"):
            section = "job"
        elif line.startswith("Communicators..."):
            section = "comms"
        elif line in ("Errors", "Warnings"):
            section = line.lower()
        elif section == "job" and line.startswith("(total)"):
            section = "totals"
        elif section == "totals" and _INTS.match(line):
            values = [int(v) for v in line.split()]
            if len(values) in (3, 5):
                report.nodes, report.processes, report.gpus = values[0], values[-2], values[-1]
            section = "job"
        elif section == "comms" and (m := _GROUP.match(line)):
            report.groups.append(
                CommGroup(
                    int(m["g"]),
                    int(m["n"]),
                    int(m["nodes"]),
                    m["rpn"],
                    int(m["ranks"]),
                    m["status"],
                    m["errors"].split(","),
                )
            )
        elif section in ("errors", "warnings"):
            if m := _COMM_ENTRY.match(line):
                entry = Entry(section, m["kinds"].split(","), "#" + m["comm"], m["hash"])
                report.entries.append(entry)
            elif (m := _ENTRY.match(line)) and not line.startswith(" "):
                entry = Entry(section, m["kinds"].split(","))
                report.entries.append(entry)
            elif entry is not None and line.startswith(" "):
                _detail(entry, line.strip())
    return report


# ---- -f json ----------------------------------------------------------------------------------


def is_json_document(data: Any) -> bool:
    """The keys of ``ncclras -f json`` (2.28.7+)."""
    return isinstance(data, dict) and "communicators" in data and "nccl_version" in data


def parse_json(text: str, source: str) -> RasReport:
    """The same reading from the JSON form: its raw per-rank data become the same entries
    (missing ranks: INCOMPLETE or DEAD; unequal collective counts: MISMATCH; a rank's init or
    async error: ERROR)."""
    report = RasReport(source)
    data, report.error = jsondoc.load(text, is_json_document, "ncclras -f json output")
    if data is None:
        return report
    report.nccl_version = _s(data.get("nccl_version"))
    nodes: set[str] = set()
    for index, comm in enumerate(
        c for c in jsondoc.as_list(data.get("communicators")) if isinstance(c, dict)
    ):
        name, comm_hash = f"#{index}", _s(comm.get("hash"))
        ranks = [r for r in jsondoc.as_list(comm.get("ranks")) if isinstance(r, dict)]
        missing = [r for r in jsondoc.as_list(comm.get("missing_ranks")) if isinstance(r, dict)]
        nodes |= {str(r.get("host")) for r in ranks + missing if r.get("host")}
        if missing:
            dead = [r for r in missing if _status(r).get("considered_dead") is True]
            entry = Entry("errors", ["DEAD"] if dead else ["INCOMPLETE"], name, comm_hash)
            entry.keep([_peer(r) for r in missing[:MAX_RAS_RANKS]])
            entry.left_out += max(0, len(missing) - MAX_RAS_RANKS)
            entry.missing_ranks = [p.rank for p in entry.peers if p.rank is not None]
            entry.lines = [f"Missing communicator data from {len(missing)} rank(s)"]
            report.entries.append(entry)
        counts: dict[tuple[tuple[str, int], ...], list[Peer]] = {}
        for r in ranks:
            ops = r.get("collective_counts")
            if isinstance(ops, dict):
                key = tuple(sorted((str(k), v) for k, v in ops.items() if isinstance(v, int)))
                counts.setdefault(key, []).append(_peer(r))
        if len(counts) > 1:
            entry = Entry("warnings", ["MISMATCH"], name, comm_hash)
            entry.keep(min(counts.values(), key=len))
            entry.lines = ["Communicator ranks have different collective operation counts"]
            report.entries.append(entry)
        failed = [
            r
            for r in ranks
            if _status(r).get("init_state") not in (0, 7, None)
            or _status(r).get("async_error") not in (0, 7, None)
        ]
        if failed:
            entry = Entry("errors", ["ERROR"], name, comm_hash)
            entry.keep([_peer(r) for r in failed[:MAX_RAS_RANKS]])
            entry.left_out += max(0, len(failed) - MAX_RAS_RANKS)
            entry.lines = [
                f"rank {r.get('rank')}: init_state {_status(r).get('init_state')}, "
                f"async_error {_status(r).get('async_error')}"
                for r in failed[:MAX_RAS_RANKS]
            ]
            report.entries.append(entry)
    report.nodes = len(nodes) or None
    ras = data.get("ras")
    if (
        isinstance(ras, dict)
        and isinstance(ras.get("timeouts_count"), int)
        and ras["timeouts_count"]
    ):
        report.entries.append(
            Entry(
                "warnings", ["TIMEOUT"], lines=[f"{ras['timeouts_count']} communication timeouts"]
            )
        )
    return report


def _s(value: Any) -> str | None:
    return str(value) if isinstance(value, str | int) else None


def _status(rank: dict[str, Any]) -> dict[str, Any]:
    status = rank.get("status")
    return status if isinstance(status, dict) else {}


def _peer(rank: dict[str, Any]) -> Peer:
    num = jsondoc.as_int
    return Peer(num(rank.get("rank")), num(rank.get("pid")), _s(rank.get("host")),
                _s(num(rank.get("cuda_dev"))))  # fmt: skip
