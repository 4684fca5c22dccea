"""Rules over nccl-tests output (scope ``nccl_tests``): wrong values, failure lines, the bus
bandwidth against what the network can carry, and a table read only in part.

The subject is a :class:`~nccldoctor.ncctests.PerfReading`: the parsed runs, the network NCCL's
own log lines in the same ticket name, and each node's NIC capacity where a node report says it.
"""

from __future__ import annotations

from collections.abc import Iterator

from checks import Problem, check
from checks.signatures import match_line
from nccldoctor.model import Severity
from nccldoctor.ncctests import PerfReading, PerfRun

MAX_EVIDENCE = 12
# a run that reaches under half of what its NICs carry is worth a look (nccl-tests'
# doc/PERFORMANCE.md: busbw is comparable to the hardware's peak bandwidth)
SLOW_FRACTION = 0.5


def _name(run: PerfRun) -> str:
    test = run.test or "nccl-tests"
    hosts = run.hosts
    where = f" on {len(hosts)} nodes" if len(hosts) > 1 else (f" on {hosts[0]}" if hosts else "")
    return f"{test}{where} ({run.source})"


def _multi_node(run: PerfRun) -> bool:
    return len(run.hosts) > 1


def _links(reading: PerfReading, run: PerfRun) -> dict[str, float]:
    """The NIC capacity (GB/s) of each of the run's hosts that a node report names."""
    return {h: reading.link_GBps[h] for h in run.hosts if h in reading.link_GBps}


@check(
    "nccl_tests.data-corruption", area="nccl_tests", category="data_corruption", scope="nccl_tests"
)
def data_corruption(reading: PerfReading) -> Iterator[Problem]:
    """nccl-tests found wrong values (``#wrong`` or ``Out of bounds values``): data corruption."""
    for run in reading.runs:
        wrong = run.wrong_rows()
        if not wrong and not run.out_of_bounds:
            continue
        evidence = [
            f"size {row.size} B {row.type or ''} {row.redop or ''} {side}: #wrong {n:g}"
            for row, side, n in wrong
        ]
        if run.out_of_bounds:
            evidence.append(f"# Out of bounds values : {run.out_of_bounds} FAILED")
        yield Problem(
            Severity.FAIL,
            f"{_name(run)} returned wrong values: the collective corrupts data",
            evidence[:MAX_EVIDENCE],
            fix=(
                "Wrong results are a hardware or driver fault, not tuning. Rerun on one node, then\n"
                "on each pair of GPUs, to find the part that corrupts:\n"
                "  ./build/all_reduce_perf -b 8 -e 128M -f 2 -g 2 -c 1\n"
                "Check the GPUs' ECC and Xid errors (nvidia-smi -q -d ECC; dmesg | grep -i xid),\n"
                "and with PCIe peer-to-peer (no NVLink) try NCCL_P2P_DISABLE=1: if the values are\n"
                "right then, the PCIe path (ACS, IOMMU) breaks P2P."
            ),
        )


@check("nccl_tests.test-failed", area="nccl_tests", category="other", scope="nccl_tests")
def test_failed(reading: PerfReading) -> Iterator[Problem]:
    """nccl-tests stopped with ``Test NCCL failure``, ``Test CUDA failure`` or ``Test timeout``."""
    for run in reading.runs:
        if not run.failures:
            continue
        first = run.failures[0]
        matches = match_line(first)
        cause = matches[0] if matches else None
        yield Problem(
            Severity.FAIL,
            f"{_name(run)} failed: " + (cause.title if cause else first),
            run.failures[:MAX_EVIDENCE],
            fix=cause.signature.fix
            if cause
            else (
                "Rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET and read the first NCCL\n"
                "WARN before the failure line: it names the cause."
            ),
            category=cause.signature.category if cause else None,
        )


@check("nccl_tests.socket-transport", area="nccl_tests", category="bandwidth", scope="nccl_tests")
def socket_transport(reading: PerfReading) -> Iterator[Problem]:
    """A multi-node nccl-tests run went over TCP sockets (``NET/Socket``), not InfiniBand/RoCE."""
    for run in reading.runs:
        # the output's own NCCL lines first; else what the ticket's logs say of the job
        network = run.network or reading.log_network
        if network != "Socket" or not _multi_node(run):
            continue
        peak = run.peak_busbw_GBps
        at = f" (peak busbw {peak:g} GB/s)" if peak is not None else ""
        yield Problem(
            Severity.WARN,
            f"{_name(run)} ran over TCP sockets{at}: NCCL fell back to NET/Socket",
            [
                "NCCL's lines in this output: NET/Socket"
                if run.network
                else "NCCL's logs in the same ticket: network Socket",
                *run.hosts,
            ],
            fix=(
                "If the nodes have InfiniBand/RoCE, NCCL could not use it: check that\n"
                "libibverbs loads (ibv_devinfo), /dev/infiniband is visible in the container,\n"
                "NCCL_IB_DISABLE is not set, and NCCL_IB_HCA names real devices; then rerun with\n"
                "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET and look for 'NET/IB : Using'."
            ),
        )


@check("nccl_tests.below-link", area="nccl_tests", category="bandwidth", scope="nccl_tests")
def below_link(reading: PerfReading) -> Iterator[Problem]:
    """A multi-node run's peak bus bandwidth is far below what the nodes' NICs carry."""
    for run in reading.runs:
        peak = run.peak_busbw_GBps
        links = _links(reading, run)
        if not _multi_node(run) or peak is None or not links:
            continue
        link = min(links.values())
        if peak >= SLOW_FRACTION * link:
            continue
        yield Problem(
            Severity.WARN,
            f"{_name(run)} peaks at {peak:g} GB/s bus bandwidth, {peak / link:.0%} of the "
            f"{link:g} GB/s the nodes' NICs carry",
            [f"{h}: NICs {gbps:g} GB/s" for h, gbps in links.items()],
            fix=(
                "Measure up to large sizes first (-e 8G): small messages never reach the link.\n"
                "Then check which transport NCCL used (NCCL_DEBUG=INFO: 'NET/IB' vs 'NET/Socket'),\n"
                "that GPUDirect RDMA is on ('GDRDMA' in the channel lines), and that every NIC is\n"
                "used (NCCL_IB_HCA)."
            ),
        )


@check("nccl_tests.read-in-part", area="nccl_tests", category="other", scope="nccl_tests")
def read_in_part(reading: PerfReading) -> Iterator[Problem]:
    """An nccl-tests output was cut short (a row cut mid-way, no footer) or is unreadable."""
    for run in reading.runs:
        if run.error:
            yield Problem(
                Severity.WARN,
                f"{run.source}: {run.error}",
                [],
                fix="Attach the whole file nccl-tests wrote (-J).",
            )
        elif run.cut_rows or (run.rows and not run.concluded and not run.failures):
            yield Problem(
                Severity.INFO,
                f"{_name(run)} ends before its footer: {len(run.rows)} rows read"
                + (f", {run.cut_rows} cut short" if run.cut_rows else ""),
                [f"last size read: {run.rows[-1].size} B"] if run.rows else [],
                fix="The run was stopped or the paste was cut: attach the whole output.",
            )


@check("nccl_tests.result", area="nccl_tests", category="bandwidth", scope="nccl_tests")
def result(reading: PerfReading) -> Iterator[Problem]:
    """What each nccl-tests run measured: its peak and average bus bandwidth."""
    for run in reading.runs:
        peak = run.peak_busbw_GBps
        if peak is None:
            continue
        best = max(
            (
                r
                for r in run.rows
                for h in (r.out_of_place, r.in_place)
                if h and h.busbw_GBps == peak
            ),
            key=lambda r: r.size,
        )
        avg = f", average {run.avg_busbw_GBps:g} GB/s" if run.avg_busbw_GBps is not None else ""
        yield Problem(
            Severity.OK,
            f"{_name(run)}: peak busbw {peak:g} GB/s at {best.size} B{avg}",
            [f"{len(run.rows)} sizes, {len(run.devices)} ranks"],
        )
