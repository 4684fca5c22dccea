"""Each InfiniBand/RoCE check fires on a captured host that has the problem and stays quiet otherwise."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from hostfacts import HOSTS, copy_host, findings, host_facts

from nccldoctor.facts.software import NcclLibrary
from nccldoctor.model import Severity

IB, ROCE = "ib-two-hca", "roce-gid"


def test_hca_missing():
    (hit,) = findings("ib.hca-missing", host_facts(IB, {"NCCL_IB_HCA": "mlx5_4"}))
    assert hit.severity is Severity.FAIL and hit.fix == "export NCCL_IB_HCA==mlx5_0:1"
    (partial,) = findings("ib.hca-missing", host_facts(IB, {"NCCL_IB_HCA": "=mlx5_0,mlx5_4"}))
    assert partial.severity is Severity.WARN
    assert not findings("ib.hca-missing", host_facts(IB, {"NCCL_IB_HCA": "mlx5_0"}))


def test_hca_prefix_trap(tmp_path: Path):
    root = copy_host(IB, tmp_path)
    ib = root / "sys/class/infiniband"
    shutil.copytree(ib / "mlx5_1", ib / "mlx5_10", symlinks=True)
    (hit,) = findings("ib.hca-prefix-trap", host_facts(root, {"NCCL_IB_HCA": "mlx5_1"}))
    assert "mlx5_10" in hit.title and hit.fix.startswith("export NCCL_IB_HCA==mlx5_1")
    assert not findings("ib.hca-prefix-trap", host_facts(root, {"NCCL_IB_HCA": "=mlx5_1"}))


def test_port_not_active():
    (hit,) = findings("ib.port-not-active", host_facts(IB))
    assert hit.severity is Severity.WARN and "'1: DOWN'" in hit.evidence[0]
    (only_down,) = findings("ib.port-not-active", host_facts(IB, {"NCCL_IB_HCA": "=mlx5_1"}))
    assert only_down.severity is Severity.FAIL
    assert not findings("ib.port-not-active", host_facts(IB, {"NCCL_IB_HCA": "=mlx5_0"}))
    assert not findings("ib.port-not-active", host_facts(ROCE))


def test_mixed_link_layers(tmp_path: Path):
    root = copy_host(IB, tmp_path)
    shutil.copytree(
        HOSTS / ROCE / "sys/class/infiniband/mlx5_0", root / "sys/class/infiniband/mlx5_2"
    )
    (hit,) = findings("ib.mixed-link-layers", host_facts(root))
    assert "mlx5_2:1/Ethernet" in hit.title and hit.fix.startswith("export NCCL_IB_HCA==mlx5_0")
    assert not findings("ib.mixed-link-layers", host_facts(IB))


def test_gid_index_unusable():
    for index, why in (("0", "IB/RoCE v1"), ("1", "link-local"), ("5", "empty")):
        (hit,) = findings("roce.gid-index-unusable", host_facts(ROCE, {"NCCL_IB_GID_INDEX": index}))
        assert why in hit.title and hit.fix == "export NCCL_IB_GID_INDEX=3"
    assert not findings("roce.gid-index-unusable", host_facts(ROCE, {"NCCL_IB_GID_INDEX": "3"}))
    assert not findings("roce.gid-index-unusable", host_facts(ROCE))


def test_gid_index_in_another_netns(tmp_path: Path):
    root = copy_host(ROCE, tmp_path)
    # a container in its own netns sees the host's GID table, but not the netdev behind it
    shutil.rmtree(root / "sys/class/net/ens1f0")
    captured = root / "run/nccldoctor/ip-addr.json"
    links = [link for link in json.loads(captured.read_text()) if link["ifname"] != "ens1f0"]
    captured.write_text(json.dumps(links))
    (hit,) = findings("roce.gid-index-unusable", host_facts(root, {"NCCL_IB_GID_INDEX": "3"}))
    assert "not in this network namespace" in hit.title


def test_default_gid_link_local():
    (hit,) = findings("roce.default-gid-link-local", host_facts(ROCE))
    assert hit.fix.startswith("export NCCL_IB_GID_INDEX=3")
    facts = host_facts(ROCE)
    facts.software.nccl_libraries = [NcclLibrary("/x/libnccl.so.2", "torch", "2.21.5")]
    assert not findings("roce.default-gid-link-local", facts)
    assert not findings("roce.default-gid-link-local", host_facts(ROCE, {"NCCL_IB_GID_INDEX": "3"}))


def test_no_routable_gid(tmp_path: Path):
    root = copy_host(ROCE, tmp_path)
    for index in (2, 3):  # no IPv4 on the netdev: only the link-local GIDs remain
        (root / f"sys/class/infiniband/mlx5_0/ports/1/gids/{index}").write_text(
            "0000:0000:0000:0000:0000:0000:0000:0000\n"
        )
    (hit,) = findings("roce.no-routable-gid", host_facts(root))
    assert hit.severity is Severity.FAIL and "ens1f0" in hit.fix
    assert not findings("roce.no-routable-gid", host_facts(ROCE))


def test_no_peer_memory():
    (hit,) = findings("rdma.no-peer-memory", host_facts(IB))
    assert "modprobe nvidia-peermem" in hit.fix
    assert not findings("rdma.no-peer-memory", host_facts(ROCE))
    assert not findings("rdma.no-peer-memory", host_facts("hosts-loopback"))


def test_uverbs_module_missing(tmp_path: Path):
    root = copy_host(IB, tmp_path)
    modules = root / "proc/modules"
    modules.write_text(
        "".join(x for x in modules.read_text().splitlines(True) if "ib_uverbs " not in x)
    )
    (hit,) = findings("rdma.uverbs-module-missing", host_facts(root))
    assert "modprobe ib_uverbs" in hit.fix
    assert not findings("rdma.uverbs-module-missing", host_facts(IB))


def test_sysfs_unreadable(tmp_path: Path):
    root = copy_host(IB, tmp_path)
    (root / "sys/class/infiniband/mlx5_0/ports/1/rate").unlink()
    (hit,) = findings("rdma.sysfs-unreadable", host_facts(root))
    assert "ports/1/rate" in hit.evidence[0]
    assert not findings("rdma.sysfs-unreadable", host_facts(IB))
