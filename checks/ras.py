"""Rules over NCCL RAS output (scope ``ras``): dead processes, communicators missing ranks,
ranks that disagree, errors, and timeouts while RAS gathered its data; and what NCCL 2.31+'s
diagnostics reports (``NCCL DIAG``) flag: uncorrected ECC errors, inactive NVLinks, GPUs,
drivers or ``NCCL_*`` variables that differ across a communicator's ranks, GPU pairs whose P2P
transfer failed, and reports that could not gather every rank; and 2.32's: Xid/SXid events in a
host's kernel log, IOMMU remapping or split groups and ATS off on the GPU/NIC pairs GPUDirect
uses, ``rdma_topo`` failures, disconnected paths, NICs down or unlike across nodes, and
``ib_write_bw`` results off the median or under half the port rate.

The subject is a :class:`~nccldoctor.ras.RasReading`: one report per ``ncclras`` output (or text
with diagnostics lines) in the ticket, whose entries RAS itself put under Errors and Warnings,
and where each rank's NCCL log in the same ticket stops, so a rank RAS names missing is shown
with its log's last line. NCCL tags every diagnostics finding ``[INFO]``; the severity here is
nccldoctor's: what breaks or corrupts a job fails, a difference that may be intended warns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from checks import Problem, check
from nccldoctor.limits import MAX_RAS_RANKS
from nccldoctor.model import Severity
from nccldoctor.ras import DiagReport, DiagResult, Entry, Peer, RasReading, RasReport

MAX_EVIDENCE = 12
MAX_TITLE_RANKS = 8  # ranks a title names; the rest are counted


def _peer(p: Peer) -> str:
    rank = f"rank {p.rank} " if p.rank is not None else ""
    return f"{rank}process {p.pid} on node {p.node} (GPU {p.gpu})"


def _entries(reading: RasReading, kind: str) -> Iterator[tuple[RasReport, Entry]]:
    """The entries of ``kind``, each said once (repeated queries in one file repeat them)."""
    seen: set[tuple[str | None, tuple[str, ...]]] = set()
    for report in reading.reports:
        for entry in report.entries:
            key = (entry.comm, tuple(entry.lines))
            if kind in entry.kinds and key not in seen:
                seen.add(key)
                yield report, entry


def _evidence(report: RasReport, entry: Entry) -> list[str]:
    head = f"{entry.comm} ({entry.comm_hash})" if entry.comm else "job"
    return [f"{report.source}: {head}: {', '.join(entry.kinds)}", *entry.lines][:MAX_EVIDENCE]


def _where(entry: Entry) -> tuple[str | None, int | None]:
    first = entry.peers[0] if entry.peers else None
    return (first.node, first.rank) if first else (None, None)


def _entry_problems(
    reading: RasReading,
    kind: str,
    severity: Severity,
    title: Callable[[Entry], str],
    fix: str,
) -> Iterator[Problem]:
    """One problem per RAS entry of ``kind``, at the node and rank of the first peer it names."""
    for report, entry in _entries(reading, kind):
        node, rank = _where(entry)
        yield Problem(severity, title(entry), _evidence(report, entry), fix=fix, node=node,
                      rank=rank)  # fmt: skip


def _named(entry: Entry) -> str:
    return "; ".join(_peer(p) for p in entry.peers[:4])


@check("ras.dead", area="ras", category="collective_timeout_hang", scope="ras")
def dead(reading: RasReading) -> Iterator[Problem]:
    """RAS considers job processes dead: unreachable for 60 s over the RAS network."""
    return _entry_problems(
        reading,
        "DEAD",
        Severity.FAIL,
        lambda e: f"NCCL RAS: {len(e.peers) or 'some'} process(es) dead: {_named(e)}",
        "The process crashed, was killed (OOM killer: dmesg | grep -i kill) or its node\n"
        "went away; its own log's last lines and the node's kernel log say which. The\n"
        "other ranks wait for it until the process-group timeout.",
    )


@check("ras.incomplete", area="ras", category="collective_timeout_hang", scope="ras")
def incomplete(reading: RasReading) -> Iterator[Problem]:
    """RAS got no data from some ranks of a communicator (stopped, hung or unreachable)."""
    for report, entry in _entries(reading, "INCOMPLETE"):
        missing = entry.missing_ranks or [p.rank for p in entry.peers if p.rank is not None]
        more = len(missing) - MAX_TITLE_RANKS + entry.left_out
        who = (
            f"rank {', '.join(map(str, missing[:MAX_TITLE_RANKS]))}"
            + (f" and {more} more" if more > 0 else "")
            if missing
            else "; ".join(_peer(p) for p in entry.peers[:4]) or "some ranks"
        )
        node, rank = _where(entry)
        logs = [
            f"rank {r}'s NCCL log stops at: {line}"
            for r in missing[:MAX_EVIDENCE]
            if (line := reading.last_line(entry.comm_hash, r))
        ]
        yield Problem(
            Severity.FAIL,
            f"NCCL RAS: {entry.comm or 'the job'} is missing {who}",
            (logs + _evidence(report, entry))[:MAX_EVIDENCE],
            fix=(
                "Query again (ncclras): a missing rank that stays missing is stopped or hung.\n"
                "Get its Python stack (py-spy dump --pid PID) and its NCCL log's last lines."
            ),
            node=node,
            rank=rank if rank is not None else (missing[0] if missing else None),
        )


def _ops(entry: Entry) -> str:
    ops = ", ".join(f"{n} ranks up to op {op}" for n, op in entry.operations)
    return (f" ({ops})" if ops else "") + (f"; named: {_named(entry)}" if entry.peers else "")


@check("ras.mismatch", area="ras", category="collective_timeout_hang", scope="ras")
def mismatch(reading: RasReading) -> Iterator[Problem]:
    """Ranks of a communicator disagree: different operation counts or status."""
    return _entry_problems(
        reading,
        "MISMATCH",
        Severity.WARN,
        lambda e: f"NCCL RAS: the ranks of {e.comm or 'a communicator'} disagree{_ops(e)}",
        "Query again: counts that move are ranks racing ahead; counts that stay put mean\n"
        "the communicator is stuck, and the ranks behind (the smaller count) are the ones\n"
        "to inspect (their Python stacks, a skipped or reordered collective).",
    )


@check("ras.error", area="ras", category="other", scope="ras")
def error(reading: RasReading) -> Iterator[Problem]:
    """Ranks of a communicator report an initialization or asynchronous NCCL error."""
    return _entry_problems(
        reading,
        "ERROR",
        Severity.FAIL,
        lambda e: f"NCCL RAS: ranks of {e.comm or 'a communicator'} report an NCCL error",
        "The ranks' NCCL logs (NCCL_DEBUG=WARN at least) name the error; start there.",
    )


@check("ras.timeout", area="ras", category="connect_refused_or_timeout", scope="ras")
def timeout(reading: RasReading) -> Iterator[Problem]:
    """RAS timed out reaching some processes while gathering its data."""
    for report, entry in _entries(reading, "TIMEOUT"):
        yield Problem(
            Severity.WARN,
            f"NCCL RAS timed out gathering data ({report.source})",
            _evidence(report, entry),
            fix="A process is unresponsive: query again; RAS declares it dead after 60 s.",
        )


@check("ras.truncated", area="ras", category="other", scope="ras")
def truncated(reading: RasReading) -> Iterator[Problem]:
    """An ncclras entry names more ranks than nccldoctor keeps (nccldoctor/limits.py): the
    rest are counted, not listed."""
    for report in reading.reports:
        cut = [e for e in report.entries if e.left_out]
        if cut:
            yield Problem(
                Severity.WARN,
                f"{report.source}: {sum(e.left_out for e in cut)} rank(s) and process(es) "
                f"past the first {MAX_RAS_RANKS:,} of an entry counted, not listed",
                [f"{e.comm or e.section} {'/'.join(e.kinds)}: {e.left_out} more" for e in cut][
                    :MAX_EVIDENCE
                ],
                fix="No job has that many ranks in one communicator: the file is not one\n"
                "ncclras output. Attach the output of ncclras -f json.",
            )


@check("ras.unreadable", area="ras", category="other", scope="ras")
def unreadable(reading: RasReading) -> Iterator[Problem]:
    """An ncclras output could not be read."""
    for report in reading.reports:
        if report.error:
            yield Problem(
                Severity.WARN,
                f"{report.source}: {report.error}",
                [],
                fix="Attach the whole output of ncclras -f json.",
            )


# ---- NCCL DIAG reports (NCCL 2.31+) ------------------------------------------------------------


def _diag(
    reading: RasReading, check: str | None, kinds: dict[str, Severity]
) -> Iterator[tuple[RasReport, DiagReport, DiagResult]]:
    """The diagnostics results of ``check`` (None: any) and ``kinds``, each said once (a
    report repeated by a second query, or printed at each communicator's init, says it again)."""
    seen: set[tuple[str, str, str]] = set()
    for report in reading.reports:
        for diag in report.diagnostics:
            for r in diag.results:
                key = (r.check, r.message, repr(r.groups))
                if r.kind in kinds and check in (None, r.check) and key not in seen:
                    seen.add(key)
                    yield report, diag, r


def _diag_evidence(report: RasReport, diag: DiagReport, r: DiagResult) -> list[str]:
    who = f" by {diag.host}:{diag.pid}" if diag.host else ""
    head = f"{report.source}: {'RAS' if diag.kind == 'ras' else 'NCCL'} diagnostics{who}"
    values = [f"{r.check}: {r.values.get('key', '')}={v} on rank(s) {_set(ranks)}"
              for v, ranks in r.groups]  # fmt: skip
    return [head, f"[{r.tag}] {r.text()}", *values][:MAX_EVIDENCE]


def _set(ranks: list[int], total: int | None = None) -> str:
    more = f", ... ({total} ranks)" if total and total > len(ranks) else ""
    return "{" + ",".join(map(str, ranks)) + more + "}"


def _diag_problems(
    reading: RasReading,
    check: str | None,
    severities: dict[str, Severity],
    title: Callable[[DiagResult], str],
    fix: str,
    judge: Callable[[DiagResult], Severity | None] | None = None,
) -> Iterator[Problem]:
    """One problem per result of ``check`` whose kind ``severities`` names, at that severity, or
    at what ``judge`` says of the line (None: nothing to act on)."""
    for report, diag, r in _diag(reading, check, severities):
        severity = judge(r) if judge else severities[r.kind or ""]
        if severity is None:
            continue
        named = r.ranks or [
            int(v) for k in ("src", "dst", "rank", "first") if (v := r.values.get(k))
        ]
        # where the named ranks ran, from the same ticket's NCCL logs: the RAS checks are printed
        # by the requesting process, not on the ranks' nodes; P2P edges by the node they are on
        hosts = [(n, h) for n in named[:8] if (h := reading.host(r.comm_hash, n))]
        evidence = _diag_evidence(report, diag, r)
        evidence += [f"rank {n} ran on {h} (its NCCL log)" for n, h in hosts]
        # a host the line itself names (Xid scans, net bw) is where the problem is
        here = (
            r.values.get("host")
            or r.values.get("client_host")
            or (diag.host if r.check == "p2p" else None)
        )
        yield Problem(
            severity,
            title(r),
            evidence[:MAX_EVIDENCE],
            fix=fix,
            node=hosts[0][1] if hosts else here,
            rank=named[0] if named else None,
        )


def _in(r: DiagResult) -> str:
    return f"comm 0x{r.comm_hash}" if r.comm_hash else "a communicator"


@check("ras.diag-ecc", area="ras", category="data_corruption", scope="ras")
def diag_ecc(reading: RasReading) -> Iterator[Problem]:
    """NCCL's diagnostics found volatile ECC errors on the GPU of a rank.

    Uncorrected ones mean data was lost or corrupted (fail); corrected ones are reported by NCCL
    only at or above ``NCCL_DIAGNOSTICS_ECC_THRESHOLD`` (0, the default, leaves them out)."""
    return _diag_problems(
        reading,
        "ECC",
        {"uncorrected": Severity.FAIL, "corrected": Severity.WARN},
        lambda r: (
            f"NCCL DIAG: {r.kind} volatile ECC errors on the GPU of rank(s) "
            f"{_set(r.ranks, r.ranks_total)} of {_in(r)} (worst {r.values.get('worst', '?')})"
        ),
        "Take those GPUs out of service: on each rank's node `nvidia-smi -q -d ECC,ROW_REMAPPER`\n"
        "shows the counters and pending row remaps, `dmesg | grep -i xid` the Xid events. A GPU\n"
        "reset (or reboot) clears the volatile counters and applies pending remaps; errors that\n"
        "return mean the GPU needs replacing.",
    )


@check("ras.diag-nvlink", area="ras", category="p2p_error", scope="ras")
def diag_nvlink(reading: RasReading) -> Iterator[Problem]:
    """NCCL's diagnostics found inactive NVLinks, or GPUs with another NVLink count than rank 0's.

    NVML's view of each link of the rank's GPU (up to 18); PCIe-only systems print no line."""
    return _diag_problems(
        reading,
        "NVLink",
        {"inactive": Severity.FAIL, "count-mismatch": Severity.WARN},
        lambda r: (
            f"NCCL DIAG: {'inactive NVLinks' if r.kind == 'inactive' else 'NVLink count differs'}"
            f" on rank(s) {_set(r.ranks, r.ranks_total)} of {_in(r)}"
        ),
        "On each named rank's node: `nvidia-smi nvlink --status` lists every link's state and\n"
        "`nvidia-smi nvlink -e` its error counters; on NVSwitch systems the fabric manager must be\n"
        "running (`systemctl status nvidia-fabricmanager`). A down link slows NVLink traffic or\n"
        "sends it over PCIe; reset the GPU, and replace it (or its baseboard) if the link stays down.",
    )


@check("ras.diag-gpu-inventory", area="ras", category="gpu_visibility", scope="ras")
def diag_gpu_inventory(reading: RasReading) -> Iterator[Problem]:
    """The ranks of a communicator run on nodes with different GPU counts or GPU models.

    The count is NVML's: every GPU of the node, whatever ``CUDA_VISIBLE_DEVICES`` says."""
    return _diag_problems(
        reading,
        "GPU inventory",
        {"count-mismatch": Severity.WARN, "model-mismatch": Severity.WARN},
        lambda r: (
            f"NCCL DIAG: GPU {'count' if r.kind == 'count-mismatch' else 'model'} of "
            f"rank(s) {_set(r.ranks, r.ranks_total)} differs from rank {r.values.get('ref')}'s "
            f"({r.values.get('gpus') or r.values.get('model')}) in {_in(r)}"
        ),
        "Run `nvidia-smi -L` on each node. A node with a GPU fewer has lost one (fallen off the\n"
        "bus: `dmesg | grep -i xid`, Xid 79); different models mean nodes of two kinds were\n"
        "mixed in one job, which NCCL runs at the slower one's speed.",
    )


@check("ras.diag-driver-mismatch", area="ras", category="version_mismatch", scope="ras")
def diag_driver_mismatch(reading: RasReading) -> Iterator[Problem]:
    """The ranks of a communicator run on different NVIDIA drivers: ones that support different
    CUDA versions, or (2.32+) another driver version by NVML."""
    drivers = {
        "CUDA driver version": "CUDA driver",
        "NVIDIA graphics driver version": "NVIDIA driver",
    }
    return _diag_problems(
        reading,
        None,
        {"mismatch": Severity.WARN},
        lambda r: (
            f"NCCL DIAG: the {drivers[r.check]} of rank(s) {_set(r.ranks, r.ranks_total)} differs "
            f"from rank {r.values.get('ref')}'s ({r.values.get('version')}) in {_in(r)}"
        ),
        "`nvidia-smi` on each node prints the driver and the CUDA version it supports; install\n"
        "the same driver on every node of the job.",
        judge=lambda r: Severity.WARN if r.check in drivers else None,
    )


@check("ras.diag-env-mismatch", area="ras", category="env_config", scope="ras")
def diag_env_mismatch(reading: RasReading) -> Iterator[Problem]:
    """An ``NCCL_*`` variable has different values (or is unset) on some ranks of a communicator."""

    def title(r: DiagResult) -> str:
        values = "; ".join(f"{v} on {_set(ranks)}" for v, ranks in r.groups[:4])
        return f"NCCL DIAG: {r.values.get('key')} differs across the ranks of {_in(r)}: {values}"

    return _diag_problems(
        reading,
        "NCCL environment",
        {"mismatch": Severity.WARN},
        title,
        "Give every rank the same NCCL_* environment (the launcher's `-x`/`--export`, the\n"
        "container's env, /etc/nccl.conf on each node). A variable that differs, such as\n"
        "NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_PROTO or NCCL_ALGO, makes ranks choose differently\n"
        "and fail or hang at init or in the first collective.",
    )


@check("ras.diag-p2p", area="ras", category="p2p_error", scope="ras")
def diag_p2p(reading: RasReading) -> Iterator[Problem]:
    """NCCL's active diagnostics found GPU pairs whose direct P2P transfer failed.

    ``NCCL_RUN_DIAGNOSTICS=1`` writes and reads a pattern over every pair of a node's GPUs that
    NCCL would connect directly; a failed import, launch or a wrong value names the pair."""

    def title(r: DiagResult) -> str:
        v = r.values
        if r.kind == "edges-failed":
            return f"NCCL DIAG: only {v['passed']} of {v['tested']} GPU P2P edges verified"
        return (
            f"NCCL DIAG: P2P {v['failure']} from rank {v['src']} (GPU {v['src_dev']}) to rank "
            f"{v['dst']} (GPU {v['dst_dev']}) over {v['path']}"
        )

    return _diag_problems(
        reading,
        "p2p",
        {"edge": Severity.FAIL, "edges-failed": Severity.FAIL},
        title,
        "NCCL's own advice ends the line (evidence). By the pair's path=: NVL or NVB,\n"
        "`nvidia-smi topo -m` and `nvidia-smi topo -p2p n`; PIX, PXB, PHB or SYS (PCIe),\n"
        "`nvidia-smi topo -p2p p`, then the IOMMU mode and PCIe ACS (`lspci -vvv | grep ACSCtl`);\n"
        "a fabric handle (CUMEM_FABRIC), the IMEX domain (`nvidia-imex-ctl -H -N`). Until fixed,\n"
        "NCCL_P2P_DISABLE=1 avoids P2P at a cost in bandwidth.",
    )


@check("ras.diag-incomplete", area="ras", category="other", scope="ras")
def diag_incomplete(reading: RasReading) -> Iterator[Problem]:
    """A diagnostics check could not gather every rank of a communicator, or could not run."""

    def title(r: DiagResult) -> str:
        if r.kind == "returned":
            return f"NCCL DIAG: the {r.check} check returned NCCL error {r.values['code']}"
        if r.kind == "topology-not-ready":
            return (
                f"NCCL DIAG: the {r.check} check had no topology for {r.values['unavailable']} "
                f"of {r.values['n']} ranks of {_in(r)}"
            )
        return (
            f"NCCL DIAG: the {r.check} check gathered {r.values['gathered']} of "
            f"{r.values['n']} ranks of {_in(r)}"
        )

    return _diag_problems(
        reading,
        None,
        {
            "incomplete": Severity.WARN,
            "returned": Severity.WARN,
            "topology-not-ready": Severity.WARN,
        },
        title,
        "Run `ncclras -D` again once every rank has finished init (the RAS network may not have\n"
        "formed yet); ranks that stay missing are stopped or unreachable, and plain `ncclras`\n"
        "names them.",
    )


# ---- NCCL 2.32's host and fabric checks ---------------------------------------------------------

# Xids that mean the GPU itself is failing whatever NVIDIA's catalogue advises for the job: double
# bit ECC (48), NVLink error (74), fallen off the bus (79), uncontained ECC (95)
_XID_FATAL = {48, 74, 79, 95}


@check("ras.diag-xid", area="ras", category="cuda_error", scope="ras")
def diag_xid(reading: RasReading) -> Iterator[Problem]:
    """The kernel log of a job's host holds Xid (GPU) or SXid (NVSwitch) errors.

    NCCL 2.32+ scans each host's kernel log (``/dev/kmsg``, ``dmesg``, ``/var/log``) for events
    since RAS started and prints one line per host and event with NVIDIA's advice."""

    def severity(r: DiagResult) -> Severity | None:
        if r.tag == "OK":  # NCCL prints [OK] where the catalogue asks no action
            return None
        v = r.values
        fatal = (
            v.get("class") == "Fatal"
            or "resetting the affected GPU" in v.get("advice", "")
            or (r.kind == "xid" and int(v["code"]) in _XID_FATAL)
        )
        return Severity.FAIL if fatal else Severity.WARN

    def title(r: DiagResult) -> str:
        v = r.values
        times = f"{v.get('at_least', '')}{v['count']} time(s)"
        if r.kind == "sxid":
            return (
                f"NCCL DIAG: SXid {v['code']} ({v['class']}) on NVSwitch link(s) {{{v['links']}}} "
                f"of host {v['host']}, {times}"
            )
        return f"NCCL DIAG: Xid {v['code']} on host {v['host']}, {times}"

    return _diag_problems(
        reading,
        "Xid/SXid",
        {"xid": Severity.WARN, "sxid": Severity.WARN},
        title,
        "On the host: `dmesg -T | grep -E 'S?Xid'` shows each event with the GPU's PCI address\n"
        "(`nvidia-smi -q | grep -i -e 'Bus Id' -e 'Minor'` maps it to a GPU). NCCL's line ends\n"
        "with NVIDIA's advice (evidence): restart the job, or drain the node and reset the GPU\n"
        "(`nvidia-smi -r -i GPU`) where it says so; Xid 79 or 48, or SXids that return, mean\n"
        "the GPU or NVSwitch needs service. Fabric Manager logs SXids: /var/log/fabricmanager.log.",
        judge=severity,
    )


def _iommu_severity(r: DiagResult) -> Severity | None:
    enabled = r.values.get("mode", "").startswith("enabled")
    return Severity.WARN if r.kind == "differ" or enabled else None


@check("ras.diag-iommu", area="ras", category="p2p_error", scope="ras")
def diag_iommu(reading: RasReading) -> Iterator[Problem]:
    """The IOMMU translates the DMA between the GPUs and NICs a communicator uses.

    NCCL 2.32+ reads the IOMMU group and its type (``identity``: passthrough, ``DMA``: remapping)
    of each GPU/NIC pair when ``rdma_topo`` gave no answer. With remapping every GPUDirect RDMA
    and P2P transfer goes through the IOMMU: slow, or failing where the NIC cannot use ATS."""

    def title(r: DiagResult) -> str:
        v = r.values
        if r.kind == "differ":
            return (
                f"NCCL DIAG: GPU and NIC are in different IOMMU groups on {v['pairs']} pair(s) "
                f"of {_in(r)} (rank {v['first']}: GPU group {v['gpu_group']}, NIC {v['bdf']} "
                f"group {v['nic_group']})"
            )
        if r.kind == "mode-devices":
            return (
                f"NCCL DIAG: IOMMU DMA remapping on {v['devices']} GPU/NIC device(s) of {_in(r)} "
                f"(rank {v['first']}, device {v['bdf']})"
            )
        return f"NCCL DIAG: IOMMU DMA remapping on the GPUs and NICs of {_in(r)}"

    return _diag_problems(
        reading,
        None,
        {"mode": Severity.WARN, "mode-devices": Severity.WARN, "differ": Severity.WARN},
        title,
        "On each named node: `cat /sys/kernel/iommu_groups/*/type` (DMA or DMA-FQ: remapping).\n"
        "For GPUDirect, boot with the IOMMU in passthrough: add `iommu=pt` to the kernel\n"
        "command line (GRUB_CMDLINE_LINUX in /etc/default/grub, then `update-grub` and reboot),\n"
        "or turn the IOMMU (VT-d / AMD-Vi) off in the firmware. Inside a VM, keep it and enable\n"
        "ATS on the NICs instead (ras.diag-ats).",
        judge=lambda r: _iommu_severity(r) if r.check in ("IOMMU mode", "IOMMU groups") else None,
    )


@check("ras.diag-ats", area="ras", category="p2p_error", scope="ras")
def diag_ats(reading: RasReading) -> Iterator[Problem]:
    """Address Translation Services are off on NICs a communicator uses (PCIe ``ATSCtl``).

    Without ATS a NIC behind an IOMMU that remaps asks it to translate each GPUDirect access."""
    return _diag_problems(
        reading,
        "ATS state",
        {"disabled-first": Severity.WARN},
        lambda r: (
            f"NCCL DIAG: ATS disabled on {r.values['pairs']} rank/NIC pair(s) of {_in(r)} "
            f"(rank {r.values['first']}, NIC {r.values['bdf']})"
        ),
        "On the node: `lspci -vvv -s BDF | grep ATSCtl` shows `Enable-`. On ConnectX NICs enable\n"
        "it in the firmware, `mlxconfig -d BDF set ATS_ENABLED=true`, then reset the NIC\n"
        "(`mlxfwreset -d BDF reset`) or reboot; it pays only with the IOMMU remapping (VMs).",
    )


@check("ras.diag-rdma-topo", area="ras", category="ib_error", scope="ras")
def diag_rdma_topo(reading: RasReading) -> Iterator[Problem]:
    """``rdma_topo check`` (rdma-core) found the PCIe topology of GPUs and ConnectX NICs wrong."""
    return _diag_problems(
        reading,
        "rdma_topo check",
        {"failed": Severity.WARN},
        lambda r: (
            f"NCCL DIAG: rdma_topo check failed on rank(s) {_set(r.ranks, r.ranks_total)} of "
            f"{_in(r)}: {' '.join(r.values['sample'].split())}"
        ),
        "Run `sudo rdma_topo check` on the named ranks' nodes: each FAIL line names the GPU/NIC\n"
        "pair and what is wrong (ACS on the switch between them, DMA Direct not configured);\n"
        "until fixed GPUDirect RDMA takes the slow path or fails.",
    )


@check("ras.diag-paths", area="ras", category="p2p_error", scope="ras")
def diag_paths(reading: RasReading) -> Iterator[Problem]:
    """Ranks of a communicator that reach peers on their node by no path (DIS), or whose own
    GPU NCCL's topology lacks, so every path of theirs is unknown."""

    def severity(r: DiagResult) -> Severity | None:
        # "NAME" or "NAME(present/total)" joined by "+"
        dis = r.kind == "types" and "DIS" in {t.split("(")[0] for t in r.values["types"].split("+")}
        return Severity.WARN if r.kind == "gpu-missing" or dis else None

    def title(r: DiagResult) -> str:
        if r.kind == "gpu-missing":
            return (
                f"NCCL DIAG: rank(s) {_set(r.ranks, r.ranks_total)} of {_in(r)} are not in "
                "NCCL's topology (their paths are unknown)"
            )
        return f"NCCL DIAG: disconnected GPU paths in {_in(r)}: {r.values['types']}"

    return _diag_problems(
        reading,
        "Paths",
        {"types": Severity.WARN, "gpu-missing": Severity.WARN},
        title,
        "DIS(k/N): k ranks have a peer on their node NCCL finds no path to (no P2P, no shared\n"
        "memory). Compare `nvidia-smi topo -m` on those nodes, and dump NCCL's view with\n"
        "NCCL_TOPO_DUMP_FILE=/tmp/topo.xml; a GPU or NIC missing from it is hidden from the\n"
        "container (CUDA_VISIBLE_DEVICES, --gpus) or from NVML.",
        judge=severity,
    )


def _port_down(r: DiagResult) -> Severity | None:
    if r.kind == "consistent":
        return Severity.FAIL if r.values.get("note") == "port is not active" else None
    return Severity.WARN


@check("ras.diag-net-device", area="ras", category="ib_error", scope="ras")
def diag_net_device(reading: RasReading) -> Iterator[Problem]:
    """A NIC NCCL uses is down, missing on some nodes, or set up differently across them."""

    def title(r: DiagResult) -> str:
        v = r.values
        if r.kind == "differ":
            return (
                f"NCCL DIAG: NIC {v['device']} of rank(s) {_set(r.ranks, r.ranks_total)} differs "
                f"from rank {v['ref']}'s ({v['speed']} Mbps {v['link']}, "
                f"{v['port_state']}/{v['phys_state']}) in {_in(r)}"
            )
        if r.kind == "missing":
            return (
                f"NCCL DIAG: NIC {v['device']} is on only {v['reporting']} of {v['expected']} "
                f"nodes of {_in(r)}"
            )
        if r.kind == "node-differs":
            return (
                f"NCCL DIAG: the NICs of {v['differ']} of {v['nodes']} nodes differ from each "
                f"other in {_in(r)}"
            )
        return (
            f"NCCL DIAG: NIC {v['device']} port is not active "
            f"({v['port_state']}/{v['phys_state']}) in {_in(r)}"
        )

    return _diag_problems(
        reading,
        "Net device",
        {
            "differ": Severity.WARN,
            "missing": Severity.WARN,
            "node-differs": Severity.WARN,
            "consistent": Severity.FAIL,
        },
        title,
        "On each node: `ibstat` (or `ibv_devinfo`) shows each port's state, physical state and\n"
        "rate. A port not ACTIVE/LinkUp: check the cable and the switch port (`ibportstate`,\n"
        "`sudo mlxlink -d DEV`); a slower rate or other link layer on some nodes: their NIC\n"
        "firmware or cabling differs (`mlxconfig -d DEV q LINK_TYPE_P1`), and NCCL runs every\n"
        "rank at the slowest; a missing NIC: `ibdev2netdev` and the driver (mlx5_core) on it.",
        judge=_port_down,
    )


def _port_gbits(reading: RasReading, comm_hash: str | None) -> float | None:
    """The fastest port rate (Gbit/s) the same ticket's Net device lines state for a comm."""
    speeds = [
        int(r.values["speed"]) / 1000
        for report in reading.reports
        for diag in report.diagnostics
        for r in diag.results
        if r.check == "Net device" and r.comm_hash == comm_hash and "speed" in r.values
    ]
    return max(speeds, default=None)


# ib_write_bw reaches ~95% of the port rate when healthy (400G NDR: ~390 Gbit/s); under half of
# it is a fabric or NIC problem, not measurement noise
_SLOW_FRACTION = 0.5


@check("ras.diag-net-bw", area="ras", category="bandwidth", scope="ras")
def diag_net_bw(reading: RasReading) -> Iterator[Problem]:
    """``ib_write_bw`` between node pairs (NCCL 2.32+, ``NCCL_RUN_DIAGNOSTICS=1``) found ranks
    >30% off the median, pairs that could not run it, or a median far below the port rate."""

    def severity(r: DiagResult) -> Severity | None:
        v = r.values
        if r.kind == "stats":
            port = _port_gbits(reading, r.comm_hash)
            return Severity.WARN if port and float(v["median"]) < _SLOW_FRACTION * port else None
        if r.kind == "outlier":
            return Severity.WARN if float(v["gbits"]) < float(v["median"]) else None
        return Severity.WARN

    def title(r: DiagResult) -> str:
        v = r.values
        if r.kind == "stats":
            return (
                f"NCCL DIAG: {v['mode']} ib_write_bw median {v['median']} Gbit/s is under half "
                f"the port rate ({_port_gbits(reading, r.comm_hash):g} Gbit/s) in {_in(r)}"
            )
        if r.kind == "outlier":
            return (
                f"NCCL DIAG: {v['mode']} ib_write_bw of rank {v['rank']} ({v['host']}) is "
                f"{v['gbits']} Gbit/s against a median of {v['median']} in {_in(r)}"
            )
        return (
            f"NCCL DIAG: ib_write_bw from rank {v['dst']} ({v['client_host']}, "
            f"{v['client_device']}) to rank {v['src']} ({v['server_host']}, {v['server_device']}) "
            f"did not run: {v['failure']}"
        )

    return _diag_problems(
        reading,
        "net bw",
        {"stats": Severity.WARN, "outlier": Severity.WARN, "pair-failed": Severity.WARN},
        title,
        "Rerun the pair by hand between the named hosts: `ib_write_bw -d DEV --report_gbits` on\n"
        "the server, the same plus the server's hostname on the client. A slow NIC: `ibstat`\n"
        "for its rate and `sudo mlxlink -d DEV -c` for link errors; all pairs slow: the\n"
        "fabric (switch congestion, adaptive routing) or GPUDirect off (nvidia_peermem not\n"
        "loaded: `lsmod | grep peermem`). 'tool missing': install perftest on every node.",
        judge=severity,
    )
