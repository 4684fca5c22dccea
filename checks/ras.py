"""Rules over NCCL RAS output (scope ``ras``): dead processes, communicators missing ranks,
ranks that disagree, errors, and timeouts while RAS gathered its data; and what NCCL 2.31+'s
diagnostics reports (``NCCL DIAG``) flag: uncorrected ECC errors, inactive NVLinks, GPUs,
drivers or ``NCCL_*`` variables that differ across a communicator's ranks, GPU pairs whose P2P
transfer failed, and reports that could not gather every rank.

The subject is a :class:`~nccldoctor.ras.RasReading`: one report per ``ncclras`` output (or text
with diagnostics lines) in the ticket, whose entries RAS itself put under Errors and Warnings,
and where each rank's NCCL log in the same ticket stops, so a rank RAS names missing is shown
with its log's last line. NCCL tags every diagnostics finding ``[INFO]``; the severity here is
nccldoctor's: what breaks or corrupts a job fails, a difference that may be intended warns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from checks import Problem, check
from nccldoctor.model import Severity
from nccldoctor.ras import DiagReport, DiagResult, Entry, Peer, RasReading, RasReport

MAX_EVIDENCE = 12


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
        who = (
            f"rank {', '.join(map(str, missing))}"
            if missing
            else "; ".join(_peer(p) for p in entry.peers[:4]) or "some ranks"
        )
        node, rank = _where(entry)
        logs = [
            f"rank {r}'s NCCL log stops at: {line}"
            for r in missing
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
    return [head, f"[{r.tag}] {r.check}: {r.message}", *values][:MAX_EVIDENCE]


def _set(ranks: list[int], total: int | None = None) -> str:
    more = f", ... ({total} ranks)" if total and total > len(ranks) else ""
    return "{" + ",".join(map(str, ranks)) + more + "}"


def _diag_problems(
    reading: RasReading,
    check: str | None,
    severities: dict[str, Severity],
    title: Callable[[DiagResult], str],
    fix: str,
) -> Iterator[Problem]:
    for report, diag, r in _diag(reading, check, severities):
        named = r.ranks or [int(v) for k in ("src", "dst") if (v := r.values.get(k))]
        # where the named ranks ran, from the same ticket's NCCL logs: the RAS checks are printed
        # by the requesting process, not on the ranks' nodes; P2P edges by the node they are on
        hosts = [(n, h) for n in named[:8] if (h := reading.host(r.comm_hash, n))]
        evidence = _diag_evidence(report, diag, r)
        evidence += [f"rank {n} ran on {h} (its NCCL log)" for n, h in hosts]
        yield Problem(
            severities[r.kind or ""],
            title(r),
            evidence[:MAX_EVIDENCE],
            fix=fix,
            node=hosts[0][1] if hosts else (diag.host if r.check == "p2p" else None),
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
    """The ranks of a communicator run on drivers that support different CUDA versions."""
    return _diag_problems(
        reading,
        "CUDA driver version",
        {"mismatch": Severity.WARN},
        lambda r: (
            f"NCCL DIAG: the CUDA driver of rank(s) {_set(r.ranks, r.ranks_total)} differs "
            f"from rank {r.values.get('ref')}'s ({r.values.get('version')}) in {_in(r)}"
        ),
        "`nvidia-smi` on each node prints the driver and the CUDA version it supports; install\n"
        "the same driver on every node of the job.",
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
        return (
            f"NCCL DIAG: the {r.check} check gathered {r.values['gathered']} of "
            f"{r.values['n']} ranks of {_in(r)}"
        )

    return _diag_problems(
        reading,
        None,
        {"incomplete": Severity.WARN, "returned": Severity.WARN},
        title,
        "Run `ncclras -D` again once every rank has finished init (the RAS network may not have\n"
        "formed yet); ranks that stay missing are stopped or unreachable, and plain `ncclras`\n"
        "names them.",
    )
