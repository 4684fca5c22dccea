"""The reader of NCCL 2.31+'s diagnostics reports (``NCCL DIAG`` lines: ``ncclras -D``,
``NCCL_RUN_RAS_DIAGNOSTICS=1``, ``NCCL_RUN_DIAGNOSTICS=1``) in any stream of lines.

The lines are src/ras/diagnostics*.cc and src/diagnostics/ of NCCL 2.31.2 and 2.32.3
(docs/nccl-tests-formats.md#diag), one row of ``_DIAG_LINES`` per message. It judges nothing.
"""

from __future__ import annotations

import re

from nccldoctor.ras.records import NET_DEVICE, XID_EVENT, DiagReport, DiagResult, number

# diagnostics_log.h DIAG_PRINT: "%s:%d " (hostname, pid) then "NCCL DIAG %s"; rasDiagnosticsFormatLine
# the same for a report sent back to ncclras -D. A launcher may put its own prefix in front.
DIAG_MARK = "NCCL DIAG "
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


def _check_message(rest: str) -> tuple[str, str]:
    """The check a result line names, and its message."""
    if XID_EVENT.match(rest):
        return "Xid/SXid", rest
    if rest.startswith(NET_DEVICE) and not rest.startswith(NET_DEVICE.rstrip() + ":"):
        return NET_DEVICE.rstrip(), rest[len(NET_DEVICE) :]
    m = _CHECK.match(rest)
    return (m["check"].strip(), m["message"]) if m else ("", rest)


# client.cc, a second on-demand request while one runs
DIAG_BUSY = "BUSY: diagnostics already in progress"
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


def _diag_result(tag: str, check: str, message: str) -> DiagResult:
    result = DiagResult(tag, check, message)
    for row_check, kind, pattern in _DIAG_LINES:
        if row_check not in (None, check) or not (m := pattern.match(message)):
            continue
        values = {k: v for k, v in m.groupdict().items() if v is not None}
        result.kind = kind
        result.comm_hash = values.pop("comm", None)
        result.ranks = [int(r) for r in values.pop("ranks", "").split(",") if r.isdigit()]
        result.ranks_total = number(values.pop("total", None)) or (len(result.ranks) or None)
        result.values = values
        break
    return result


class DiagReader:
    """The diagnostics reports in a stream of lines, one open report per printing process (the
    rank-0 processes of several communicators can print at once)."""

    def __init__(self, out: list[DiagReport]) -> None:
        self.out = out
        self.open: dict[tuple[str | None, int | None], DiagReport] = {}

    def line(self, line: str, at: int) -> None:
        """The line whose ``NCCL DIAG `` starts at ``at``: what precedes it names the process."""
        m = _DIAG_WHO.search(line, max(0, at - 80), at)
        who = (m["host"], number(m["pid"])) if m else (None, None)
        body = line[at + len(DIAG_MARK) :].rstrip()
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
