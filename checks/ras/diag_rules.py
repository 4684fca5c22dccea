"""The table of rules over NCCL's diagnostics reports (``NCCL DIAG``): one row per rule, read by
``diag.py``'s one reader of rows. A row names the diagnostics checks it reads, the kinds of line
that are problems with their severity, a title per kind and the fix; ``when`` leaves out the
lines of those kinds that need no action, ``fatal`` fails the ones that break the GPU or job.
"""

from __future__ import annotations

from checks.ras.diag import DRIVERS, DiagRule, port_gbits, register_table
from nccldoctor.model import Severity
from nccldoctor.ras import DiagResult, RasReading

# ---- what leaves a line out, or makes it fatal -------------------------------------------------

# Xids that mean the GPU itself is failing whatever NVIDIA's catalogue advises for the job: double
# bit ECC (48), NVLink error (74), fallen off the bus (79), uncontained ECC (95)
_XID_FATAL = {48, 74, 79, 95}


def _xid_fatal(r: DiagResult) -> bool:
    v = r.values
    return (
        v.get("class") == "Fatal"
        or "resetting the affected GPU" in v.get("advice", "")
        or (r.kind == "xid" and v.get("code", "").isdigit() and int(v["code"]) in _XID_FATAL)
    )


def _xid_acts(reading: RasReading, r: DiagResult) -> bool:
    return r.tag != "OK"  # NCCL prints [OK] where the catalogue asks no action


def _iommu_remaps(reading: RasReading, r: DiagResult) -> bool:
    return r.kind == "differ" or r.values.get("mode", "").startswith("enabled")


def _paths_broken(reading: RasReading, r: DiagResult) -> bool:
    # "NAME" or "NAME(present/total)" joined by "+"
    types = {t.split("(")[0] for t in r.values.get("types", "").split("+")}
    return r.kind == "gpu-missing" or "DIS" in types


def _port_down(reading: RasReading, r: DiagResult) -> bool:
    return r.kind != "consistent" or r.values.get("note") == "port is not active"


# ib_write_bw reaches ~95% of the port rate when healthy (400G NDR: ~390 Gbit/s); under half of
# it is a fabric or NIC problem, not measurement noise
_SLOW_FRACTION = 0.5


def _bandwidth_low(reading: RasReading, r: DiagResult) -> bool:
    v = r.values
    if r.kind == "stats":
        port = port_gbits(reading, r.comm_hash)
        return bool(port) and float(v["median"]) < _SLOW_FRACTION * (port or 0)
    if r.kind == "outlier":
        return float(v["gbits"]) < float(v["median"])
    return True


# ---- the table ---------------------------------------------------------------------------------

W, F = Severity.WARN, Severity.FAIL

DIAG_RULES: tuple[DiagRule, ...] = (
    DiagRule(
        "ras.diag-ecc", "data_corruption",
        """NCCL's diagnostics found volatile ECC errors on the GPU of a rank.

        Uncorrected ones mean data was lost or corrupted (fail); corrected ones are reported by
        NCCL only at or above ``NCCL_DIAGNOSTICS_ECC_THRESHOLD`` (0, the default, leaves them
        out).""",
        ("ECC",),
        {"uncorrected": F, "corrected": W},
        dict.fromkeys(("uncorrected", "corrected"),
            "NCCL DIAG: {kind} volatile ECC errors on the GPU of rank(s) {ranks} of {comm} "
            "(worst {worst})"),
        "Take those GPUs out of service: on each rank's node `nvidia-smi -q -d ECC,ROW_REMAPPER`\n"
        "shows the counters and pending row remaps, `dmesg | grep -i xid` the Xid events. A GPU\n"
        "reset (or reboot) clears the volatile counters and applies pending remaps; errors that\n"
        "return mean the GPU needs replacing.",
    ),
    DiagRule(
        "ras.diag-nvlink", "p2p_error",
        """NCCL's diagnostics found inactive NVLinks, or GPUs with another NVLink count than rank
        0's.

        NVML's view of each link of the rank's GPU (up to 18); PCIe-only systems print no line.""",
        ("NVLink",),
        {"inactive": F, "count-mismatch": W},
        {"inactive": "NCCL DIAG: inactive NVLinks on rank(s) {ranks} of {comm}",
         "count-mismatch": "NCCL DIAG: NVLink count differs on rank(s) {ranks} of {comm}"},
        "On each named rank's node: `nvidia-smi nvlink --status` lists every link's state and\n"
        "`nvidia-smi nvlink -e` its error counters; on NVSwitch systems the fabric manager must be\n"
        "running (`systemctl status nvidia-fabricmanager`). A down link slows NVLink traffic or\n"
        "sends it over PCIe; reset the GPU, and replace it (or its baseboard) if the link stays down.",
    ),
    DiagRule(
        "ras.diag-gpu-inventory", "gpu_visibility",
        """The ranks of a communicator run on nodes with different GPU counts or GPU models.

        The count is NVML's: every GPU of the node, whatever ``CUDA_VISIBLE_DEVICES`` says.""",
        ("GPU inventory",),
        {"count-mismatch": W, "model-mismatch": W},
        {"count-mismatch": "NCCL DIAG: GPU count of rank(s) {ranks} differs from rank {ref}'s "
                           "({gpus}) in {comm}",
         "model-mismatch": "NCCL DIAG: GPU model of rank(s) {ranks} differs from rank {ref}'s "
                           "({model}) in {comm}"},
        "Run `nvidia-smi -L` on each node. A node with a GPU fewer has lost one (fallen off the\n"
        "bus: `dmesg | grep -i xid`, Xid 79); different models mean nodes of two kinds were\n"
        "mixed in one job, which NCCL runs at the slower one's speed.",
    ),
    DiagRule(
        "ras.diag-driver-mismatch", "version_mismatch",
        """The ranks of a communicator run on different NVIDIA drivers: ones that support
        different CUDA versions, or (2.32+) another driver version by NVML.""",
        tuple(DRIVERS),
        {"mismatch": W},
        {"mismatch": "NCCL DIAG: the {driver} of rank(s) {ranks} differs from rank {ref}'s "
                     "({version}) in {comm}"},
        "`nvidia-smi` on each node prints the driver and the CUDA version it supports; install\n"
        "the same driver on every node of the job.",
    ),
    DiagRule(
        "ras.diag-env-mismatch", "env_config",
        """An ``NCCL_*`` variable has different values (or is unset) on some ranks of a
        communicator.""",
        ("NCCL environment",),
        {"mismatch": W},
        {"mismatch": "NCCL DIAG: {key} differs across the ranks of {comm}: {groups}"},
        "Give every rank the same NCCL_* environment (the launcher's `-x`/`--export`, the\n"
        "container's env, /etc/nccl.conf on each node). A variable that differs, such as\n"
        "NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_PROTO or NCCL_ALGO, makes ranks choose differently\n"
        "and fail or hang at init or in the first collective.",
    ),
    DiagRule(
        "ras.diag-p2p", "p2p_error",
        """NCCL's active diagnostics found GPU pairs whose direct P2P transfer failed.

        ``NCCL_RUN_DIAGNOSTICS=1`` writes and reads a pattern over every pair of a node's GPUs
        that NCCL would connect directly; a failed import, launch or a wrong value names the
        pair.""",
        ("p2p",),
        {"edge": F, "edges-failed": F},
        {"edges-failed": "NCCL DIAG: only {passed} of {tested} GPU P2P edges verified",
         "edge": "NCCL DIAG: P2P {failure} from rank {src} (GPU {src_dev}) to rank {dst} "
                 "(GPU {dst_dev}) over {path}"},
        "NCCL's own advice ends the line (evidence). By the pair's path=: NVL or NVB,\n"
        "`nvidia-smi topo -m` and `nvidia-smi topo -p2p n`; PIX, PXB, PHB or SYS (PCIe),\n"
        "`nvidia-smi topo -p2p p`, then the IOMMU mode and PCIe ACS (`lspci -vvv | grep ACSCtl`);\n"
        "a fabric handle (CUMEM_FABRIC), the IMEX domain (`nvidia-imex-ctl -H -N`). Until fixed,\n"
        "NCCL_P2P_DISABLE=1 avoids P2P at a cost in bandwidth.",
    ),
    DiagRule(
        "ras.diag-incomplete", "other",
        """A diagnostics check could not gather every rank of a communicator, or could not
        run.""",
        (),
        {"incomplete": W, "returned": W, "topology-not-ready": W},
        {"returned": "NCCL DIAG: the {check} check returned NCCL error {code}",
         "topology-not-ready": "NCCL DIAG: the {check} check had no topology for {unavailable} "
                               "of {n} ranks of {comm}",
         "incomplete": "NCCL DIAG: the {check} check gathered {gathered} of {n} ranks of {comm}"},
        "Run `ncclras -D` again once every rank has finished init (the RAS network may not have\n"
        "formed yet); ranks that stay missing are stopped or unreachable, and plain `ncclras`\n"
        "names them.",
    ),
    DiagRule(
        "ras.diag-xid", "cuda_error",
        """The kernel log of a job's host holds Xid (GPU) or SXid (NVSwitch) errors.

        NCCL 2.32+ scans each host's kernel log (``/dev/kmsg``, ``dmesg``, ``/var/log``) for
        events since RAS started and prints one line per host and event with NVIDIA's advice.""",
        ("Xid/SXid",),
        {"xid": W, "sxid": W},
        {"sxid": "NCCL DIAG: SXid {code} ({class}) on NVSwitch link(s) {{{links}}} of host "
                 "{host}, {times}",
         "xid": "NCCL DIAG: Xid {code} on host {host}, {times}"},
        "On the host: `dmesg -T | grep -E 'S?Xid'` shows each event with the GPU's PCI address\n"
        "(`nvidia-smi -q | grep -i -e 'Bus Id' -e 'Minor'` maps it to a GPU). NCCL's line ends\n"
        "with NVIDIA's advice (evidence): restart the job, or drain the node and reset the GPU\n"
        "(`nvidia-smi -r -i GPU`) where it says so; Xid 79 or 48, or SXids that return, mean\n"
        "the GPU or NVSwitch needs service. Fabric Manager logs SXids: /var/log/fabricmanager.log.",
        when=_xid_acts,
        fatal=_xid_fatal,
    ),
    DiagRule(
        "ras.diag-iommu", "p2p_error",
        """The IOMMU translates the DMA between the GPUs and NICs a communicator uses.

        NCCL 2.32+ reads the IOMMU group and its type (``identity``: passthrough, ``DMA``:
        remapping) of each GPU/NIC pair when ``rdma_topo`` gave no answer. With remapping every
        GPUDirect RDMA and P2P transfer goes through the IOMMU: slow, or failing where the NIC
        cannot use ATS.""",
        ("IOMMU mode", "IOMMU groups"),
        {"mode": W, "mode-devices": W, "differ": W},
        {"differ": "NCCL DIAG: GPU and NIC are in different IOMMU groups on {pairs} pair(s) of "
                   "{comm} (rank {first}: GPU group {gpu_group}, NIC {bdf} group {nic_group})",
         "mode-devices": "NCCL DIAG: IOMMU DMA remapping on {devices} GPU/NIC device(s) of "
                         "{comm} (rank {first}, device {bdf})",
         "mode": "NCCL DIAG: IOMMU DMA remapping on the GPUs and NICs of {comm}"},
        "On each named node: `cat /sys/kernel/iommu_groups/*/type` (DMA or DMA-FQ: remapping).\n"
        "For GPUDirect, boot with the IOMMU in passthrough: add `iommu=pt` to the kernel\n"
        "command line (GRUB_CMDLINE_LINUX in /etc/default/grub, then `update-grub` and reboot),\n"
        "or turn the IOMMU (VT-d / AMD-Vi) off in the firmware. Inside a VM, keep it and enable\n"
        "ATS on the NICs instead (ras.diag-ats).",
        when=_iommu_remaps,
    ),
    DiagRule(
        "ras.diag-ats", "p2p_error",
        """Address Translation Services are off on NICs a communicator uses (PCIe ``ATSCtl``).

        Without ATS a NIC behind an IOMMU that remaps asks it to translate each GPUDirect
        access.""",
        ("ATS state",),
        {"disabled-first": W},
        {"disabled-first": "NCCL DIAG: ATS disabled on {pairs} rank/NIC pair(s) of {comm} "
                           "(rank {first}, NIC {bdf})"},
        "On the node: `lspci -vvv -s BDF | grep ATSCtl` shows `Enable-`. On ConnectX NICs enable\n"
        "it in the firmware, `mlxconfig -d BDF set ATS_ENABLED=true`, then reset the NIC\n"
        "(`mlxfwreset -d BDF reset`) or reboot; it pays only with the IOMMU remapping (VMs).",
    ),
    DiagRule(
        "ras.diag-rdma-topo", "ib_error",
        """``rdma_topo check`` (rdma-core) found the PCIe topology of GPUs and ConnectX NICs
        wrong.""",
        ("rdma_topo check",),
        {"failed": W},
        {"failed": "NCCL DIAG: rdma_topo check failed on rank(s) {ranks} of {comm}: {sample}"},
        "Run `sudo rdma_topo check` on the named ranks' nodes: each FAIL line names the GPU/NIC\n"
        "pair and what is wrong (ACS on the switch between them, DMA Direct not configured);\n"
        "until fixed GPUDirect RDMA takes the slow path or fails.",
    ),
    DiagRule(
        "ras.diag-paths", "p2p_error",
        """Ranks of a communicator that reach peers on their node by no path (DIS), or whose own
        GPU NCCL's topology lacks, so every path of theirs is unknown.""",
        ("Paths",),
        {"types": W, "gpu-missing": W},
        {"gpu-missing": "NCCL DIAG: rank(s) {ranks} of {comm} are not in NCCL's topology "
                        "(their paths are unknown)",
         "types": "NCCL DIAG: disconnected GPU paths in {comm}: {types}"},
        "DIS(k/N): k ranks have a peer on their node NCCL finds no path to (no P2P, no shared\n"
        "memory). Compare `nvidia-smi topo -m` on those nodes, and dump NCCL's view with\n"
        "NCCL_TOPO_DUMP_FILE=/tmp/topo.xml; a GPU or NIC missing from it is hidden from the\n"
        "container (CUDA_VISIBLE_DEVICES, --gpus) or from NVML.",
        when=_paths_broken,
    ),
    DiagRule(
        "ras.diag-net-device", "ib_error",
        """A NIC NCCL uses is down, missing on some nodes, or set up differently across them.""",
        ("Net device",),
        {"differ": W, "missing": W, "node-differs": W, "consistent": F},
        {"differ": "NCCL DIAG: NIC {device} of rank(s) {ranks} differs from rank {ref}'s "
                   "({speed} Mbps {link}, {port_state}/{phys_state}) in {comm}",
         "missing": "NCCL DIAG: NIC {device} is on only {reporting} of {expected} nodes of "
                    "{comm}",
         "node-differs": "NCCL DIAG: the NICs of {differ} of {nodes} nodes differ from each "
                         "other in {comm}",
         "consistent": "NCCL DIAG: NIC {device} port is not active ({port_state}/{phys_state}) "
                       "in {comm}"},
        "On each node: `ibstat` (or `ibv_devinfo`) shows each port's state, physical state and\n"
        "rate. A port not ACTIVE/LinkUp: check the cable and the switch port (`ibportstate`,\n"
        "`sudo mlxlink -d DEV`); a slower rate or other link layer on some nodes: their NIC\n"
        "firmware or cabling differs (`mlxconfig -d DEV q LINK_TYPE_P1`), and NCCL runs every\n"
        "rank at the slowest; a missing NIC: `ibdev2netdev` and the driver (mlx5_core) on it.",
        when=_port_down,
    ),
    DiagRule(
        "ras.diag-net-bw", "bandwidth",
        """``ib_write_bw`` between node pairs (NCCL 2.32+, ``NCCL_RUN_DIAGNOSTICS=1``) found ranks
        >30% off the median, pairs that could not run it, or a median far below the port
        rate.""",
        ("net bw",),
        {"stats": W, "outlier": W, "pair-failed": W},
        {"stats": "NCCL DIAG: {mode} ib_write_bw median {median} Gbit/s is under half the port "
                  "rate ({port} Gbit/s) in {comm}",
         "outlier": "NCCL DIAG: {mode} ib_write_bw of rank {rank} ({host}) is {gbits} Gbit/s "
                    "against a median of {median} in {comm}",
         "pair-failed": "NCCL DIAG: ib_write_bw from rank {dst} ({client_host}, {client_device}) "
                        "to rank {src} ({server_host}, {server_device}) did not run: {failure}"},
        "Rerun the pair by hand between the named hosts: `ib_write_bw -d DEV --report_gbits` on\n"
        "the server, the same plus the server's hostname on the client. A slow NIC: `ibstat`\n"
        "for its rate and `sudo mlxlink -d DEV -c` for link errors; all pairs slow: the\n"
        "fabric (switch congestion, adaptive routing) or GPUDirect off (nvidia_peermem not\n"
        "loaded: `lsmod | grep peermem`). 'tool missing': install perftest on every node.",
        when=_bandwidth_low,
    ),
)  # fmt: skip


register_table(DIAG_RULES, "`checks/ras/diag_rules.py`, `DIAG_RULES`")
