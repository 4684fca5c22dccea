"""Report documents of the scenarios the views must show, built the way the producers build them.

Each builder returns a :class:`Report` shaped like what `preflight`, `explain` and `check` write
(the extra sections of HELPERS.md). ``tests/fixtures/reports/<name>.json`` holds each one's JSON;
``test_golden.py`` pins them and regenerates them with ``NCCLDOCTOR_UPDATE_GOLDEN=1``.
"""

from __future__ import annotations

from nccldoctor.model import Finding, Severity
from nccldoctor.report import Report
from nccldoctor.report.answer import NCCL_SUMMARY_KEYS
from tests.report.builders import (
    CREATED,
    bandwidth_section,
    cluster_section,
    mnist_section,
    nccl_section,
    node_facts,
    phases_section,
    ranks_section,
)


def healthy_check() -> Report:
    nodes = ["node-a", "node-b"]
    return Report(
        kind="check",
        nodes=[node_facts("node-a", "198.18.0.1/24", 2), node_facts("node-b", "198.18.0.2/24", 2)],
        findings=[
            Finding(
                id="run.allreduce-correct",
                category="other",
                severity=Severity.OK,
                area="run",
                title="allreduce results exact on 4 ranks (float32, float64, int32)",
            ),
            Finding(
                id="network.nccl-socket",
                category="interface_selection",
                severity=Severity.INFO,
                area="network",
                title="NCCL uses NET/Socket over eth0: no InfiniBand HCA on either node",
                evidence=["node-a: NET/IB : No device found.", "node-b: NET/IB : No device found."],
            ),
        ],
        command=["nccldoctor", "check", "--master", "198.18.0.1", "--nodes", "2"],
        created=CREATED,
        tool_version="0.1.0",
        area_status={
            "run": "4 ranks on 2 nodes, all phases ok",
            "network": "eth0 → 198.18.0.1, MTU 9000",
        },
        extra={
            "nccl": nccl_section(4, 2),
            "phases": phases_section(nodes, 2),
            "bandwidth": bandwidth_section(4, 6.5),
            "cluster": cluster_section(nodes, 2),
            "ranks": ranks_section(nodes, 2),
            "hang": None,
            "mnist": mnist_section(),
        },
    )


def failed_check() -> Report:
    """node-b runs in Docker's default bridge (NAT) with an older driver: init fails on its ranks."""
    nodes = ["node-a", "node-b"]
    node_b = node_facts("node-b", "172.17.0.2/16", 2, driver="535.161.08", torch="2.5.1")
    node_b.network.interfaces[1].name = "eth0"
    warn = "socketPollConnect: connect to 198.18.0.1<43127> returned Connection refused, exceeded error retry count (35)"
    cluster = cluster_section(nodes, 2)
    cluster["nodes"][1].update(advertised_address="172.17.0.2", seen_address="198.18.0.2")
    ranks = ranks_section(nodes, 2, warn_rank=2, warn=warn)
    for entry in ranks[2:]:
        entry.update(phase_reached="init", exit_code=3)
    return Report(
        kind="check",
        nodes=[node_facts("node-a", "198.18.0.1/24", 2), node_b],
        findings=[
            Finding(
                id="reach.nat-detected",
                category="docker_network",
                severity=Severity.FAIL,
                area="network",
                node="node-b",
                title="node-b sits behind NAT: it advertises 172.17.0.2 but the master sees 198.18.0.2",
                evidence=[
                    "advertised address: 172.17.0.2 (eth0 inside the container)",
                    "address seen by the master: 198.18.0.2",
                ],
                fix="docker run --network host --ipc host --gpus all ...",
                links=[
                    "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"
                ],
            ),
            Finding(
                id="socket.connect-refused",
                category="connect_refused_or_timeout",
                severity=Severity.FAIL,
                area="logs",
                node="node-b",
                rank=2,
                title="rank 2 could not connect to its ring peer: Connection refused",
                evidence=[warn],
                fix="export NCCL_SOCKET_IFNAME=eth0\nsudo iptables -I INPUT -s 198.18.0.0/15 -j ACCEPT",
            ),
            Finding(
                id="cluster.driver-differs",
                category="version_mismatch",
                severity=Severity.WARN,
                area="cluster",
                title="NVIDIA driver differs between nodes: 550.54.15 (node-a), 535.161.08 (node-b)",
                evidence=["node-a: 550.54.15", "node-b: 535.161.08"],
                fix="Install the same driver on every node.",
            ),
            Finding(
                id="cluster.torch-version-differs",
                category="version_mismatch",
                severity=Severity.WARN,
                area="cluster",
                title="torch differs between nodes: 2.6.0 (node-a), 2.5.1 (node-b)",
                evidence=["node-a: 2.6.0", "node-b: 2.5.1"],
                fix="pip install torch==2.6.0",
            ),
        ],
        command=["nccldoctor", "check", "--master", "198.18.0.1", "--nodes", "2"],
        created=CREATED,
        tool_version="0.1.0",
        area_status={"run": "ranks 2-3 failed in init", "cluster": "2 nodes, versions differ"},
        extra={
            "nccl": {**nccl_section(4, 2), "init_complete": False},
            "phases": phases_section(nodes, 2, stop={2: ("init", "fail"), 3: ("init", "fail")}),
            "bandwidth": None,
            "cluster": cluster,
            "ranks": ranks,
            "hang": None,
            "mnist": None,
        },
    )


def hang_check() -> Report:
    """Rank 1 stops issuing the bandwidth sweep's allreduce; rank 0 waits for it until the deadline."""
    nodes = ["node-a", "node-b"]
    phases = phases_section(
        nodes, 1, stop={0: ("bandwidth", "timeout"), 1: ("bandwidth", "timeout")}
    )
    ranks = ranks_section(nodes, 1)
    last = ranks[1]["last_nccl_lines"][-1]
    for entry in ranks:
        entry.update(phase_reached="bandwidth", exit_code=None)
    ranks[1]["stacks"] = (
        'Thread 0x7f3a (most recent call first):\n  File "worker.py", line 88 in _bandwidth\n  File "worker.py", line 40 in main'
    )
    ranks[1]["flight_recorder"] = "/tmp/nccldoctor/node-b/rank1/fr_trace_rank_1"
    return Report(
        kind="check",
        nodes=[node_facts("node-a", "198.18.0.1/24", 1), node_facts("node-b", "198.18.0.2/24", 1)],
        findings=[
            Finding(
                id="run.hang",
                category="collective_timeout_hang",
                severity=Severity.FAIL,
                area="run",
                node="node-b",
                rank=1,
                title="rank 1 on node-b stopped in the bandwidth phase; rank 0 waited 30 s in allreduce",
                evidence=[
                    f"last NCCL line of rank 1: {last}",
                    "rank 0: waiting in allreduce for rank 1",
                ],
                fix="py-spy dump --pid <pid of rank 1>\nexport TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_NCCL_TRACE_BUFFER_SIZE=2000",
            ),
        ],
        command=[
            "nccldoctor",
            "check",
            "--master",
            "198.18.0.1",
            "--nodes",
            "2",
            "--timeout-collective",
            "30",
        ],
        created=CREATED,
        tool_version="0.1.0",
        area_status={"run": "hang in bandwidth (rank 1)"},
        extra={
            "nccl": nccl_section(2, 1),
            "phases": phases,
            "bandwidth": {
                **bandwidth_section(2, 9.0),
                "rows": bandwidth_section(2, 9.0)["rows"][:3],
            },
            "cluster": cluster_section(nodes, 1),
            "ranks": ranks,
            "hang": {
                "phase": "bandwidth",
                "stuck": [
                    {"node": "node-b", "rank": 1, "phase": "bandwidth", "last_nccl_line": last},
                    {
                        "node": "node-a",
                        "rank": 0,
                        "phase": "bandwidth",
                        "last_nccl_line": ranks[0]["last_nccl_lines"][-1],
                    },
                ],
                "verdict": "rank 1 never entered the allreduce of 4 MiB; rank 0 waited for it",
            },
            "mnist": None,
        },
    )


def preflight() -> Report:
    facts = node_facts("gpu-box-7", "198.18.0.7/24", 2)
    facts.multi_node = False
    facts.env.variables["NCCL_SOCKET_IFNAME"] = "ib0"
    return Report(
        kind="preflight",
        nodes=[facts],
        findings=[
            Finding(
                id="socket.ifname-missing",
                category="interface_selection",
                severity=Severity.FAIL,
                area="environment",
                node="gpu-box-7",
                title="NCCL_SOCKET_IFNAME=ib0 names no interface on this node",
                evidence=["interfaces up: lo, eth0"],
                fix="export NCCL_SOCKET_IFNAME=eth0",
            ),
            Finding(
                id="container.shm-small",
                category="shm_docker",
                severity=Severity.WARN,
                area="container",
                node="gpu-box-7",
                title="/dev/shm is 64 MiB: NCCL's SHM transport needs more",
                evidence=["/dev/shm: 64 MiB"],
                fix="docker run --shm-size=1g ... (or --ipc=host)",
            ),
            Finding(
                id="gpu.count",
                category="gpu_visibility",
                severity=Severity.OK,
                area="gpu",
                title="2 GPUs visible",
            ),
        ],
        command=["nccldoctor", "preflight", "--json"],
        created=CREATED,
        tool_version="0.1.0",
        area_status={
            "gpu": "2 × NVIDIA H100 80GB HBM3, driver 550.54.15",
            "environment": "2 relevant variables set",
        },
    )


def explain() -> Report:
    """What `nccldoctor explain` writes: the `nccl` section, its issue-3 keys also at top level."""
    summary = nccl_section(4, 2)
    top = {key: summary[key] for key in NCCL_SUMMARY_KEYS}
    return Report(
        kind="explain",
        findings=[
            Finding(
                id="nccl.socket-not-ib",
                category="interface_selection",
                severity=Severity.INFO,
                area="nccl",
                title="NCCL fell back to NET/Socket: NET/IB found no device",
                evidence=["node-a:4711:4790 [0] NCCL INFO NET/IB : No device found."],
            ),
        ],
        command=[
            "nccldoctor",
            "explain",
            "logs/nccl.node-a.4711.log",
            "logs/nccl.node-b.4713.log",
            "--json",
        ],
        created=CREATED,
        tool_version="0.1.0",
        extra={"nccl": summary, **top},
    )


SCENARIOS = {
    "healthy-check": healthy_check,
    "failed-check": failed_check,
    "hang-check": hang_check,
    "preflight": preflight,
    "explain": explain,
}
