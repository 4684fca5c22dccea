"""Pieces of report documents: node facts, NCCL log lines and the extra sections of HELPERS.md.

Shaped like what the producers write (`preflight`, `explain`, `check`); scenarios.py assembles them.
"""

from __future__ import annotations

from typing import Any

from nccldoctor.cluster.records import WORKER_PHASES
from nccldoctor.facts import EnvFacts, GpuFacts, NetworkFacts, NodeFacts, SoftwareFacts
from nccldoctor.facts.gpu import GpuDevice
from nccldoctor.facts.network import Interface, Route
from nccldoctor.facts.software import NcclLibrary

CREATED = "2026-12-02T12:00:00+00:00"
T0 = 1796212800.0  # 2026-12-02 12:00:00 UTC
NCCL = "2.26.2"
NODE_PHASES = ("preflight", "reach", "rendezvous", "nccl_bootstrap")


def node_facts(
    name: str, address: str, gpus: int, *, driver: str = "550.54.15", torch: str = "2.6.0"
) -> NodeFacts:
    devices = [
        GpuDevice(index=i, name="NVIDIA H100 80GB HBM3", pci_bus_id=f"00000000:{0x18 + i:02x}:00.0")
        for i in range(gpus)
    ]
    return NodeFacts(
        node=name,
        gpu=GpuFacts(nvml_available=True, driver_version=driver, devices=devices),
        network=NetworkFacts(
            hostname=name,
            interfaces=[
                Interface(name="lo", up=True, mtu=65536, ipv4=["127.0.0.1/8"], kind="loopback"),
                Interface(name="eth0", up=True, mtu=9000, speed_mbps=100000, ipv4=[address]),
            ],
            master="198.18.0.1",
            route_to_master=Route(destination="198.18.0.1", interface="eth0"),
        ),
        env=EnvFacts(variables={"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "eth0"}),
        software=SoftwareFacts(
            python="3.11.9",
            torch_version=torch,
            torch_cuda="12.4",
            cuda_runtime="12.4",
            nccl_libraries=[
                NcclLibrary(path="/opt/torch/lib/libnccl.so.2", origin="torch", version=NCCL)
            ],
        ),
        multi_node=True,
    )


def nccl_lines(host: str, rank: int, nranks: int, *, warn: str | None = None) -> list[str]:
    """What NCCL 2.26 prints at INFO for one rank (formats: docs/nccl-log-formats.md)."""
    p = f"{host}:{4711 + rank}:{4790 + rank} [{rank % 2}] NCCL INFO "
    lines = [
        f"{p}Bootstrap: Using eth0:198.18.0.{1 + rank // 2}<0>",
        f"{p}NCCL version {NCCL}+cuda12.4",
        f"{p}NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.",
        f"{p}NET/IB : No device found.",
        f"{p}NET/Socket : Using [0]eth0:198.18.0.{1 + rank // 2}<0>",
        f"{p}Using network Socket",
        f"{p}comm 0x55d1c2a0 rank {rank} nRanks {nranks} nNodes 2 localRanks 2 localRank {rank % 2} MNNVL 0",
        f"{p}2 coll channels, 2 collnet channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer",
    ]
    if warn:
        lines += [
            "",
            f"[2026-12-02 12:00:07] {host}:{4711 + rank}:{4790 + rank} [0] misc/socket.cc:484 (socketPollConnect) NCCL WARN {warn}",
        ]
    else:
        lines += [
            f"{p}Connected all rings, use ring PXN 0 GDR 0",
            f"{p}ncclCommInitRankConfig comm 0x55d1c2a0 rank {rank} nranks {nranks} cudaDev {rank % 2} nvmlDev {rank % 2} busId 18000 commId 0x9f3c1b2ad4e5f601 - Init COMPLETE",
        ]
    if rank == 0 and not warn:
        lines.append(
            f"{p}AllReduce: 8388608 Bytes -> Algo RING proto SIMPLE channel{{Lo..Hi}}={{0..1}}"
        )
    return lines


def nccl_section(nranks: int, per_node: int) -> dict[str, Any]:
    """The `nccl` section of a ring over ``nranks`` ranks, ``per_node`` ranks on each node."""
    connections = []
    for channel in range(2):
        for rank in range(nranks):
            peer = (rank + 1) % nranks
            if rank // per_node == peer // per_node:
                connections.append(
                    {
                        "channel": channel,
                        "rank": rank,
                        "peer": peer,
                        "direction": "send",
                        "transport": "P2P/CUMEM/read",
                    }
                )
            else:
                for direction, me, other in (("send", rank, peer), ("receive", peer, rank)):
                    connections.append(
                        {
                            "channel": channel,
                            "rank": me,
                            "peer": other,
                            "direction": direction,
                            "transport": "NET/Socket/0",
                        }
                    )
    return {
        "nccl_version": NCCL,
        "cuda_version": "12.4",
        "nranks": nranks,
        "nodes": nranks // per_node,
        "network": "Socket",
        "interfaces": ["eth0"],
        "gdrdma": False,
        "transports": sorted({c["transport"] for c in connections}),
        "channels": 2,
        "algorithms": [
            {
                "collective": "AllReduce",
                "algorithm": "Tree",
                "protocol": "LL",
                "min_bytes": 0,
                "max_bytes": 65535,
                "source": "tuning-model",
            },
            {
                "collective": "AllReduce",
                "algorithm": "Ring",
                "protocol": "Simple",
                "min_bytes": 65536,
                "max_bytes": None,
                "source": "log",
            },
        ],
        "init_complete": True,
        "connections": connections,
        "rings": [{"channel": c, "ranks": list(range(nranks))} for c in range(2)],
        "trees": [
            {
                "channel": 0,
                "rank": r,
                "children": [r + 1] if r + 1 < nranks else [],
                "parent": r - 1 if r else None,
            }
            for r in range(nranks)
        ],
    }


def bandwidth_section(nranks: int, scale: float) -> dict[str, Any]:
    rows = []
    for exp in range(2, 27, 4):
        size = 2**exp
        time_us = 20.0 + size / (scale * 1e3)
        algbw = size / time_us / 1e3
        busbw = algbw * 2 * (nranks - 1) / nranks
        rows.append(
            {
                "size_bytes": size,
                "count": size // 4,
                "dtype": "float32",
                "time_us": round(time_us, 2),
                "algbw_GBps": round(algbw, 3),
                "busbw_GBps": round(busbw, 3),
                "wrong": 0,
            }
        )
    return {
        "backend": "nccl",
        "nranks": nranks,
        "rows": rows,
        "tcp_wire_Gbitps": {"node-a": 94.1, "node-b": 93.6},
    }


def phases_section(
    nodes: list[str], per_node: int, stop: dict[int, tuple[str, str]] | None = None
) -> list[dict[str, Any]]:
    """ok phases for every node and rank; ``stop[rank] = (phase, status)`` ends that rank there."""
    out = []
    for index, node in enumerate(nodes):
        t = T0
        for phase in NODE_PHASES:
            out.append(_phase(node, None, phase, "ok", t, 0.4 + 0.1 * index))
            t += 0.5 + 0.1 * index
        for rank in range(index * per_node, (index + 1) * per_node):
            t_rank = T0 + 2.5
            for phase in WORKER_PHASES:
                stop_phase, stop_status = (stop or {}).get(rank, ("", ""))
                status = stop_status if phase == stop_phase else "ok"
                duration = 30.0 if status == "timeout" else 0.8 + 0.05 * rank
                out.append(_phase(node, rank, phase, status, t_rank, duration))
                if status != "ok":
                    break
                t_rank += duration
    return out


def _phase(
    node: str, rank: int | None, phase: str, status: str, started: float, duration: float
) -> dict[str, Any]:
    detail = {
        "timeout": "no heartbeat progress before the phase deadline",
        "fail": "RuntimeError: NCCL error",
    }
    return {
        "node": node,
        "rank": rank,
        "phase": phase,
        "status": status,
        "started": round(started, 3),
        "ended": round(started + duration, 3),
        "duration_s": round(duration, 3),
        "detail": detail.get(status, ""),
    }


def cluster_section(nodes: list[str], per_node: int, missing: list[str] = ()) -> dict[str, Any]:
    return {
        "master": "198.18.0.1",
        "world_size": len(nodes) * per_node,
        "nodes": [
            {
                "name": n,
                "node_rank": i,
                "address": f"198.18.0.{i + 1}",
                "advertised_address": f"198.18.0.{i + 1}",
                "seen_address": f"198.18.0.{i + 1}",
                "ranks": list(range(i * per_node, (i + 1) * per_node)),
                "report_path": f"/tmp/nccldoctor/{n}/report.json",
            }
            for i, n in enumerate(nodes)
        ],
        "missing_nodes": list(missing),
    }


def ranks_section(
    nodes: list[str], per_node: int, warn_rank: int | None = None, warn: str = ""
) -> list[dict[str, Any]]:
    nranks = len(nodes) * per_node
    return [
        {
            "rank": r,
            "node": nodes[r // per_node],
            "local_rank": r % per_node,
            "phase_reached": "destroy",
            "exit_code": 0,
            "last_nccl_lines": nccl_lines(
                nodes[r // per_node], r, nranks, warn=warn if r == warn_rank else None
            ),
            "stacks": None,
            "flight_recorder": None,
            "log_path": f"/tmp/nccldoctor/{nodes[r // per_node]}/rank{r}/nccl.log",
        }
        for r in range(nranks)
    ]


def mnist_section() -> dict[str, Any]:
    return {
        "source": "synthetic",
        "path": None,
        "steps": 5,
        "loss_before": 2.3151,
        "loss_after": 2.2874,
        "params_identical": True,
    }
