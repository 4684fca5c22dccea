"""NCCL RAS output (``ncclras`` text and ``-f json``) from NCCL's documentation and public
threads (tests/fixtures/ras/SOURCES.md), and the rules over it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from checks import run_checks
from nccldoctor.ras import RasReading, parse_json, parse_text

FIXTURES = Path(__file__).parent / "fixtures" / "ras"


def read(name: str):
    return parse_text((FIXTURES / name).read_text().splitlines(), name)


def by_id(reports) -> dict[str, list]:
    found: dict[str, list] = {}
    for f in run_checks("ras", RasReading(reports)):
        found.setdefault(f.id, []).append(f)
    return found


def test_a_mismatch_names_the_outlier_ranks():
    report = read("nccl-1911-mismatch.txt")
    assert (report.nccl_version, report.nodes, report.processes, report.gpus) == ("2.26.2", 4,
                                                                                  32, 32)  # fmt: skip
    (group,) = report.groups
    assert (group.count, group.ranks, group.status, group.errors) == (1, 32, "RUNNING",
                                                                      ["MISMATCH"])  # fmt: skip
    (found,) = by_id([report])["ras.mismatch"]
    assert found.severity == "warn"
    assert "30 ranks up to op 640, 2 ranks up to op 641" in found.title
    assert "rank 12 process 323032 on node 10.137.190.124" in found.title
    assert (found.rank, found.node) == (12, "10.137.190.124")


def test_incomplete_communicators_and_the_uneven_job_summary_cut_mid_line():
    report = read("nccl-1762-incomplete-cut.txt")
    assert (report.nodes, report.processes, report.gpus) == (2, 10, 10)
    assert [g.errors for g in report.groups][-1] == ["INCOMPLETE", "MISMATCH"]
    titles = [f.title for f in by_id([report])["ras.incomplete"]]
    assert "NCCL RAS: #0-0 is missing rank 1" in titles
    assert "NCCL RAS: the job is missing process 60004 on node 10.4.109.13 (GPU 0)" in titles


def test_dead_process_missing_rank_and_timeout_from_the_user_guide():
    found = by_id([read("nccl-docs-dead.txt")])
    (dead,) = found["ras.dead"]
    assert dead.severity == "fail" and "process 3487984 on node 172.16.64.213" in dead.title
    # the guide's two snapshots repeat the communicator's entry: said once
    assert [f.title for f in found["ras.incomplete"]].count(
        "NCCL RAS: #0-0 is missing rank 21"
    ) == 1
    assert found["ras.timeout"][0].severity == "warn"


def test_json_output_from_the_user_guide():
    report = parse_json((FIXTURES / "nccl-docs-ras.json").read_text(), "ras.json")
    assert report.nccl_version == "2.29.1" and report.error is None
    (found,) = by_id([report])["ras.incomplete"]
    assert (found.rank, found.node) == (1, "172.16.64.245")


def test_json_dead_mismatch_and_errors_derived_from_the_guides_sample():
    data = json.loads((FIXTURES / "nccl-docs-ras.json").read_text())
    comm = data["communicators"][0]
    comm["missing_ranks"][0]["status"]["considered_dead"] = True
    extra = json.loads(json.dumps(comm["ranks"][0]))
    extra.update(rank=2, pid=7)
    extra["collective_counts"]["AllReduce"] = 5
    extra["status"]["async_error"] = 6
    comm["ranks"].append(extra)
    found = by_id([parse_json(json.dumps(data), "x.json")])
    assert {"ras.dead", "ras.mismatch", "ras.error"} <= set(found)


@pytest.mark.parametrize("junk", ["", "{", "[]", '{"communicators": 3, "nccl_version": 1}',
                                  "Errors\n======\n  orphan detail\nDEAD\n", "[" * 100_000])  # fmt: skip
def test_odd_input_never_raises(junk):
    run_checks("ras", RasReading([parse_text(junk.splitlines(), "t"), parse_json(junk, "j")]))
    assert junk.startswith('{"') or parse_json(junk, "j").error


# ---- NCCL DIAG (2.31+) --------------------------------------------------------------------------


def test_an_on_demand_report_from_the_user_guide_states_the_inventory_and_finds_nothing():
    report = read("nccl-docs-diag-ok.txt")
    (diag,) = report.diagnostics
    assert (diag.kind, diag.host, diag.pid) == ("ras", "node042", 12345)
    assert (diag.completed_ms, diag.completed_across, diag.across) == (12.3, 8, "RAS peers")
    assert [r.check for r in diag.results] == ["GPU inventory", "CUDA driver version", "ECC",
                                               "NVLink", "NCCL environment"]  # fmt: skip
    (inv,) = report.to_dict()["diagnostics"][0]["inventory"]
    assert inv == {"comm_hash": "1234", "ranks": 8, "gpus_per_node": 8,
                   "gpu_model": "NVIDIA H100", "cuda_driver": 13000, "nvidia_driver": None,
                   "nvlinks_per_device": 18, "ecc": "clean"}  # fmt: skip
    assert not by_id([report])


def test_an_nccl_variable_that_differs_names_each_value_and_its_ranks():
    (found,) = by_id([read("nccl-docs-diag-env.txt")])["ras.diag-env-mismatch"]
    assert found.severity == "warn"
    assert found.title == (
        "NCCL DIAG: NCCL_DEBUG differs across the ranks of comm 0x1234: "
        "INFO on {0,1,2,3}; WARN on {4,5,6,7}"
    )
    assert found.evidence[-2:] == ["NCCL environment: NCCL_DEBUG=INFO on rank(s) {0,1,2,3}",
                                   "NCCL environment: NCCL_DEBUG=WARN on rank(s) {4,5,6,7}"]  # fmt: skip


def test_the_active_report_from_the_user_guide_without_its_prefix():
    (diag,) = read("nccl-docs-diag-active.txt").diagnostics
    assert (diag.kind, diag.host, diag.completed_across, diag.across) == ("active", None, 8,
                                                                          "ranks")  # fmt: skip
    (p2p,) = diag.results
    assert (p2p.tag, p2p.check, p2p.kind, p2p.values["passed"]) == ("OK", "p2p", "verified", "56")


# Lines of problems nobody has published yet, each written with its format string at NCCL
# v2.31.2 (commit 8898068): src/ras/diagnostics_gpu.cc, diagnostics_checks_common.cc
# (rasDiagnosticsFormatRankSet: 8 ranks at most, then ",...} (N=total)";
# rasDiagnosticsReportIncomplete), src/diagnostics/p2p.cc.
PREFIX = "gpu-a17:88 NCCL DIAG "
BAD = [
    "=== RAS Diagnostics ===",
    "[INFO] GPU inventory: count mismatch across 16 ranks in comm 0x9e17999afaa87dbb, rank(s) "
    "{8,9,10,11,12,13,14} differ from rank 0 (8)",
    "[INFO] GPU inventory: model mismatch across 16 ranks in comm 0x9e17999afaa87dbb, rank(s) "
    "{8,9,10,11,12,13,14} differ from rank 0 (NVIDIA H100 80GB HBM3)",
    "[INFO] CUDA driver version: mismatch across 32 ranks in comm 0x9e17999afaa87dbb, rank(s) "
    "{16,17,18,19,20,21,22,23,...} (N=16) differ from rank 0 (12080)",
    "[INFO] ECC: uncorrected volatile errors on rank(s) {5} (worst=2) across 16 ranks in comm "
    "0x9e17999afaa87dbb",
    "[INFO] ECC: corrected volatile errors at or above threshold 100 on rank(s) {3,7} "
    "(worst=412) across 16 ranks in comm 0x9e17999afaa87dbb",
    "[INFO] NVLink: inactive link(s) on rank(s) {13} across 16 ranks in comm 0x9e17999afaa87dbb",
    "[INFO] NVLink: link-count mismatch across 16 ranks in comm 0x9e17999afaa87dbb, rank(s) "
    "{13} differ from rank 0 (18)",
    "[INFO] NCCL environment: diagnostics incomplete, gathered 12/16 ranks in comm "
    "0x9e17999afaa87dbb/0x51a3/0x77c2 (RAS overlay may not be ready)",
    "RAS diagnostics completed in 30.0 ms across 16 ranks",
    "=== NCCL Diagnostics ===",
    "[INFO] p2p: write mismatch srcRank=2 srcCudaDev=2 srcNvmlDev=2 dstRank=3 dstCudaDev=3 "
    "dstNvmlDev=3 path=NVL handle=CUMEM_POSIX_FD expected=0x0000000200000003 "
    "got=0x0000000000000000 verify=0x0000000000000000; check the single-node NVLink topology and "
    "peer-access state with 'nvidia-smi topo -m' and 'nvidia-smi topo -p2p n'",
    "[INFO] p2p: 54/56 directed GPU P2P edges verified",
    "NCCL diagnostics completed in 80.5 ms across 8 ranks",
]


def test_each_problem_a_diagnostics_report_names_is_one_finding():
    text = "\n".join(f"0: {PREFIX}{line}" for line in BAD)  # srun -l puts "0: " in front
    found = by_id([parse_text(text.splitlines(), "job.out")])
    (ecc_fail, ecc_warn) = found["ras.diag-ecc"]
    assert (ecc_fail.severity, ecc_fail.rank) == ("fail", 5)
    assert "uncorrected volatile ECC errors on the GPU of rank(s) {5}" in ecc_fail.title
    assert "(worst 2)" in ecc_fail.title and ecc_warn.severity == "warn"
    assert [f.severity for f in found["ras.diag-nvlink"]] == ["fail", "warn"]
    count, model = found["ras.diag-gpu-inventory"]
    assert "GPU count of rank(s) {8,9,10,11,12,13,14} differs from rank 0's (8)" in count.title
    assert "(NVIDIA H100 80GB HBM3)" in model.title
    (driver,) = found["ras.diag-driver-mismatch"]
    assert "{16,17,18,19,20,21,22,23, ... (16 ranks)}" in driver.title and "(12080)" in driver.title
    (incomplete,) = found["ras.diag-incomplete"]
    assert incomplete.title.endswith("gathered 12 of 16 ranks of comm 0x9e17999afaa87dbb")
    edge, summary = found["ras.diag-p2p"]
    assert edge.title == (
        "NCCL DIAG: P2P write mismatch from rank 2 (GPU 2) to rank 3 (GPU 3) over NVL"
    )
    assert (edge.node, edge.rank, edge.severity) == ("gpu-a17", 2, "fail")
    assert summary.title == "NCCL DIAG: only 54 of 56 GPU P2P edges verified"


def test_a_second_query_repeats_the_report_and_each_problem_is_said_once():
    once = [f"{PREFIX}{line}" for line in BAD[:10]]
    found = by_id([parse_text(once + once, "ras.txt"), parse_text(once, "again.txt")])
    assert len(found["ras.diag-ecc"]) == 2 and len(found["ras.diag-nvlink"]) == 2


@pytest.mark.parametrize("junk", [
    "NCCL DIAG ", "x:1 NCCL DIAG [INFO]", "x:1 NCCL DIAG [INFO] ECC: uncorrected volatile errors "
    "on rank(s) {1,2", "h:1 NCCL DIAG RAS diagnostics completed in 1.2.3 ms across 4 ranks",
    "h:1 NCCL DIAG [INFO] p2p: write mismatch srcRank=", "BUSY: diagnostics already in progress",
    "h:1 NCCL DIAG [OK]   GPU inventory: 999999999999999999999x A per node consistent across "
    "99999999999999999999 ranks in comm 0xffffffffffffffffffff",
    "h:1 NCCL DIAG [INFO] Xid 99999999999999999999999 detected 1 time on host h. x",
    "h:1 NCCL DIAG [INFO] SXid 1 detected 2 times (NVSwitch driver reported Fatal, link(s) {",
    "h:1 NCCL DIAG [INFO] Net device ", "h:1 NCCL DIAG [INFO] Net device x:1: ",
    "h:1 NCCL DIAG [INFO] net bw: 1/2/3 Gbit/s min/median/max same-nic bw (across 0 ranks) in "
    "comm 0x1", "h:1 NCCL DIAG [INFO] Net device x:1: net device type=a, speed=-1 Mbps, link "
    "layer=b, state=c/d across 1 nodes in comm 0x1 (port is not active)",
    "h:1 NCCL DIAG [INFO] net bw: mode=same server_rank=0 server_host= server_device= "
    "client_rank=1 client_host= client_device= x in comm 0x1",
    "h:1 NCCL DIAG [INFO] Paths: DIS(0/0) across 0 ranks in comm 0x1",
])  # fmt: skip
def test_odd_diagnostics_lines_never_raise(junk):
    report = parse_text([junk], "t")
    run_checks("ras", RasReading([report]))
    report.to_dict()


@pytest.mark.parametrize("check", ["Xid/SXid", "rdma_topo check", "IOMMU mode", "ATS state",
                                   "Paths", "Net device", "net bw"])  # fmt: skip
def test_a_2_32_line_of_megabytes_is_read_in_linear_time(check):
    long = "a" * 2_000_000
    lines = [f"h:1 NCCL DIAG [INFO] {check}: {long} in comm 0x{long}",
             f"h:1 NCCL DIAG [INFO] {check} {long}:1: {' in comm 0x1' * 100_000}"]  # fmt: skip
    started = time.monotonic()
    run_checks("ras", RasReading([parse_text(lines, "t")]))
    assert time.monotonic() - started < 5


def test_a_line_of_megabytes_is_read_in_linear_time():
    long = "a" * 4_000_000
    lines = [f"{long}:1 NCCL DIAG [INFO] NCCL environment: {long}=x on rank(s) {{{long}",
             f"h:1 NCCL DIAG [INFO] GPU inventory: {long} per node consistent across 8 ranks"]  # fmt: skip
    started = time.monotonic()
    report = parse_text(lines, "t")
    assert time.monotonic() - started < 5
    assert report.diagnostics[0].host is None  # no name of 4 MB: the 64-byte host buffer


# ---- NCCL 2.32's checks -------------------------------------------------------------------------

# Lines written with their format strings, none published yet: src/ras/diagnostics_xid.cc,
# diagnostics_pci.cc and diagnostics_checks_common.cc at NCCL v2.32.3 (commit 12df1a1);
# diagnostics_paths.cc (commit 17e1e48), diagnostics_net.cc (8a1ca63) and
# src/diagnostics/ib_write_bw.cc (15f6ac0), the versions of those files the index holds.
C = "0x9e17999afaa87dbb"
XID_DOC = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
NEW = [
    "=== RAS Diagnostics ===",
    f"[INFO] Net device: diagnostics incomplete, gathered 7/8 ranks in comm {C}/0x51a3/0x77c2",
    f"[INFO] IOMMU mode: incomplete for comm {C}: topology-dependent data was unavailable for 2 "
    "of 16 ranks",
    "[INFO] Xid 79 detected 2 times on host gpu-b03. For the recommended response, see the "
    f"NVIDIA Xid documentation: {XID_DOC}",
    "[OK]   Xid 63 detected 1 time on host gpu-b03. No user action or further investigation is "
    "required for this Xid.",
    "[INFO] Xid 13 detected at least 65535 times on host gpu-b04.cluster. Restart the affected "
    f"application. For guidance, see the NVIDIA Xid documentation: {XID_DOC}",
    "[INFO] SXid 12028 detected 3 times (NVSwitch driver reported Fatal, link(s) {4,5}) on host "
    "gpu-b03. See the NVIDIA Fabric Manager documentation for the recommended response: "
    "https://docs.nvidia.com/hgx-platforms/fabric-manager-user-guide/index.html",
    "[INFO] Xid/SXid: no kernel-log source was available on host gpu-b05",
    f"[INFO] rdma_topo check: failed on rank(s) {{8,9}} across 16/16 ranks in comm {C}; first "
    "rank 8 exit 1: FAIL\tmlx5_3\tACS enabled",
    f"[INFO] IOMMU mode: enabled (DMA remapping) for 32 relevant device(s) across 16/16 ranks in "
    f"comm {C}",
    f"[INFO] IOMMU groups: GPU and NIC groups differ on 8 pair(s) in comm {C}; first rank 8 GPU "
    "group 23 NIC 0000:1b:00.0 group 24",
    f"[INFO] ATS state: disabled on 8 rank/NIC pair(s) across 8/16 ranks in comm {C}",
    f"[INFO] ATS state: ATSCtl disabled on 8 rank/NIC pair(s) in comm {C}; first rank 8 NIC "
    "0000:1b:00.0",
    f"[INFO] Paths: self+NVL+PXB(14/16)+DIS(2/16)+NET across 16 ranks in comm {C}",
    f"[INFO] Net device mlx5_0:1: rank(s) {{8}} differ from rank 0 (net device type=Host, "
    "speed=400000 Mbps, link layer=InfiniBand, state=ACTIVE/LinkUp) across 2 of 2 nodes in comm "
    f"{C}",
    f"[INFO] Net device mlx5_1:1: net device type=Host, speed=400000 Mbps, link layer=InfiniBand, "
    f"Data Direct, state=DOWN/DISABLED across 2 nodes in comm {C} (port is not active)",
    "RAS diagnostics completed in 30.0 ms across 16 ranks",
    "=== NCCL Diagnostics ===",
    f"[INFO] net bw: 88.1/161.4/165.2 Gbit/s min/median/max same-nic bw (across 16 ranks) in comm "
    f"{C}",
    f"[INFO] net bw: same-nic rank 9 (gpu-b04): 88.1 Gbit/s, >30% off median 161.4 Gbit/s in "
    f"comm {C}",
    "[INFO] net bw: mode=same server_rank=0 server_host=gpu-b03 server_device=mlx5_0 "
    "client_rank=8 client_host=gpu-b04 client_device=mlx5_0 memory=cuda+dmabuf tool run timed "
    f"out in comm {C}",
    "NCCL diagnostics completed in 2210.5 ms across 16 ranks",
]
# what a healthy 2.32 job prints: no finding
HEALTHY = [
    "[OK]   Xid/SXid: no events requiring immediate attention across 2 hosts",
    f"[OK]   rdma_topo check: passed on 16/16 ranks in comm {C}",
    f"[OK]   IOMMU mode: passthrough for 32 relevant device(s) across 16/16 ranks in comm {C}",
    f"[OK]   ATS state: enabled on 16 rank/NIC pair(s) across 16 ranks in comm {C}",
    f"[OK]   Paths: self+NVL+NET across 16 ranks in comm {C}",
    f"[OK]   Net device mlx5_2:1: net device type=Host, speed=400000 Mbps, link layer=InfiniBand, "
    f"state=ACTIVE/LinkUp across 2 nodes in comm {C}",
    f"[OK]   Net device: NIC configuration consistent within each node across 2 nodes in comm {C}",
    f"[OK]   net bw: 385.1/390.4/391.2 Gbit/s min/median/max same-nic bw (across 16 ranks) in "
    f"comm {C}",
]


def new_lines(lines: list[str]) -> list[str]:
    return [f"gpu-b03:4242 NCCL DIAG {line}" for line in lines]


def test_every_new_line_is_one_known_message():
    report = parse_text(new_lines(NEW + HEALTHY), "job.out")
    results = [r for d in report.diagnostics for r in d.results]
    assert [r.kind for r in results if r.kind is None] == []
    xid = next(r for r in results if r.values.get("code") == "13")
    assert (xid.check, xid.values["host"], xid.values["count"]) == ("Xid/SXid", "gpu-b04.cluster",
                                                                     "65535")  # fmt: skip
    nic = next(r for r in results if r.check == "Net device" and r.kind == "differ")
    assert (nic.values["device"], nic.values["speed"], nic.ranks) == ("mlx5_0:1", "400000", [8])
    # the healthy lines come after both reports ended: a third, headerless one
    assert [d.kind for d in report.diagnostics] == ["ras", "active", "ras"]


def test_the_2_31_incomplete_line_and_the_2_32_one_are_both_read():
    old, new = (f"h:1 NCCL DIAG [INFO] ECC: diagnostics incomplete, gathered 3/4 ranks in comm "
                f"{C}/0x1/0x2{tail}" for tail in (" (RAS overlay may not be ready)", ""))  # fmt: skip
    kinds = [r.kind for d in parse_text([old, new], "t").diagnostics for r in d.results]
    assert kinds == ["incomplete", "incomplete"]


def test_each_problem_of_the_2_32_checks_is_one_finding():
    found = by_id([parse_text(new_lines(NEW), "job.out")])
    xid79, sxid = found["ras.diag-xid"][0], found["ras.diag-xid"][-1]
    # the evidence quotes the line as NCCL printed it, check name or none
    assert xid79.evidence[1] == NEW[3]
    assert found["ras.diag-net-device"][1].evidence[1] == NEW[15]
    assert (xid79.severity, xid79.node, xid79.title) == (
        "fail", "gpu-b03", "NCCL DIAG: Xid 79 on host gpu-b03, 2 time(s)")  # fmt: skip
    assert [f.severity for f in found["ras.diag-xid"]] == ["fail", "warn", "fail"]  # 63 is [OK]
    assert "SXid 12028 (Fatal) on NVSwitch link(s) {4,5}" in sxid.title
    assert len(found["ras.diag-iommu"]) == 2 and found["ras.diag-iommu"][1].rank == 8
    (ats,) = found["ras.diag-ats"]
    assert "rank 8, NIC 0000:1b:00.0" in ats.title
    (topo,) = found["ras.diag-rdma-topo"]
    assert topo.title.endswith("FAIL mlx5_3 ACS enabled") and topo.rank == 8
    (paths,) = found["ras.diag-paths"]
    assert "DIS(2/16)" in paths.title
    differ, down = found["ras.diag-net-device"]
    assert (differ.severity, differ.rank, down.severity) == ("warn", 8, "fail")
    slow, outlier, pair = found["ras.diag-net-bw"]
    assert "median 161.4 Gbit/s is under half the port rate (400 Gbit/s)" in slow.title
    assert (outlier.node, outlier.rank) == ("gpu-b04", 9)
    assert pair.title.endswith("did not run: tool run timed out") and pair.node == "gpu-b04"
    assert len(found["ras.diag-incomplete"]) == 2


def test_a_healthy_2_32_report_finds_nothing():
    assert not by_id([parse_text(new_lines(HEALTHY), "ok.out")])


def test_the_nvidia_driver_version_is_inventory_and_its_mismatch_a_finding():
    check = "NVIDIA graphics driver version"
    ok = parse_text([f"h:1 NCCL DIAG [OK]   {check}: 580.65.06 consistent across 8 ranks in comm "
                     "0x1234"], "ok")  # fmt: skip
    assert ok.to_dict()["diagnostics"][0]["inventory"][0]["nvidia_driver"] == "580.65.06"
    bad = parse_text([f"h:1 NCCL DIAG [INFO] {check}: mismatch across 8 ranks in comm 0x1234, "
                      "rank(s) {4,5,6,7} differ from rank 0 (580.65.06)",
                      "h:1 NCCL DIAG [INFO] CUDA driver version: mismatch across 8 ranks in comm "
                      "0x1234, rank(s) {1} differ from rank 0 (no driver installed)"], "bad")  # fmt: skip
    nvidia, cuda = by_id([bad])["ras.diag-driver-mismatch"]
    assert nvidia.title == ("NCCL DIAG: the NVIDIA driver of rank(s) {4,5,6,7} differs from rank "
                            "0's (580.65.06) in comm 0x1234")  # fmt: skip
    assert "(no driver installed)" in cuda.title
