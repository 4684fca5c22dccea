"""The InfiniBand/RoCE and environment probes on captured trees."""

from __future__ import annotations

import json
from pathlib import Path

from hostfacts import HOSTS, copy_host

from nccldoctor.facts import EnvFacts, RdmaFacts, from_dict, to_dict
from nccldoctor.nccl.env import nccl_variables
from nccldoctor.probes import env as env_probe
from nccldoctor.probes import rdma
from nccldoctor.probes.env import redact


def test_two_hcas_one_port_down():
    facts = rdma.probe(HOSTS / "ib-two-hca", {})
    (hca0, hca1) = facts.hcas
    assert (hca0.name, hca0.node_guid, hca0.fw_ver, hca0.netdevs) == (
        "mlx5_0", "b8ce:f603:00a1:2b3c", "20.39.1002", ["ib0"]
    )  # fmt: skip
    port = hca0.ports[0]
    assert (port.state, port.phys_state, port.rate, port.link_layer) == (
        "ACTIVE", "LinkUp", "200 Gb/sec (4X HDR)", "InfiniBand"
    )  # fmt: skip
    assert port.state_raw == "4: ACTIVE" and port.netdev == "ib0"
    assert [g.index for g in port.gids] == [0]  # the all-zero entries are skipped
    assert hca1.ports[0].state == "DOWN" and hca1.ports[0].phys_state == "Polling"
    assert facts.modules == ["mlx5_ib", "mlx5_core", "ib_uverbs", "ib_core", "rdma_ucm", "rdma_cm"]
    assert facts.peer_memory_module is None and facts.modules_readable and not facts.read_errors


def test_roce_gid_table():
    facts = rdma.probe(HOSTS / "roce-gid", {})
    port = facts.hcas[0].ports[0]
    assert port.link_layer == "Ethernet" and port.netdev == "ens1f0"
    table = [(g.index, g.type, g.ipv4, g.ndev) for g in port.gids]
    assert table == [
        (0, "IB/RoCE v1", None, "ens1f0"),
        (1, "RoCE v2", None, "ens1f0"),
        (2, "IB/RoCE v1", "198.18.30.11", "ens1f0"),
        (3, "RoCE v2", "198.18.30.11", "ens1f0"),
    ]
    assert facts.peer_memory_module == "nvidia_peermem"
    assert "/sys/module/nvidia_peermem/version" in facts.peer_memory_evidence


def test_garbled_tree_is_recorded_not_raised(tmp_path: Path):
    root = copy_host("ib-two-hca", tmp_path)
    port = root / "sys/class/infiniband/mlx5_0/ports/1"
    (port / "state").unlink()
    (port / "gids/0").write_bytes(b"\x00\xfe garbage")
    (root / "sys/class/infiniband/mlx5_1/ports/bogus").mkdir()
    (root / "proc/modules").write_bytes(b"\x7fELF\x00\x01\x02\xff\xfe\n\x00\x00")
    facts = rdma.probe(root, {})
    assert facts.hcas[0].ports[0].state == "" and facts.hcas[0].ports[0].gids == []
    assert not facts.modules_readable and facts.modules == []
    text = "\n".join(facts.read_errors)
    assert "ports/1/state" in text and "not a GID" in text and "bogus" in text
    assert "/proc/modules" in text
    assert from_dict(RdmaFacts, json.loads(json.dumps(to_dict(facts)))) == facts


def test_variable_list_comes_from_nccl_source():
    names = nccl_variables()
    assert names["NCCL_IB_DISABLE"] == "int" and names["NCCL_SOCKET_IFNAME"] == "str"
    assert {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_IB_GID_INDEX", "NCCL_P2P_LEVEL"} <= set(names)
    assert len(names) > 200


def test_env_probe_parses_and_flags(tmp_path: Path):
    env = {
        "NCCL_IB_DISABEL": "1",
        "NCCL_SOCKET_IFNAME": "=eth0,eth1",
        "NCCL_IB_HCA": "^mlx5_2:1",
        "GLOO_SOCKET_IFNAME": "eth0",
        "MASTER_ADDR": "198.18.0.1",
        "HF_TOKEN": "hf_abc",
        "NCCL_SOME_AUTH_TOKEN": "s3cret",
        "PATH": "/usr/bin",
    }
    facts = env_probe.probe(tmp_path, env)
    assert "PATH" not in facts.variables and "HF_TOKEN" not in facts.variables
    assert facts.variables["NCCL_SOME_AUTH_TOKEN"] == "<redacted>"
    assert facts.socket_ifname.exact and facts.socket_ifname.entries == ["eth0", "eth1"]
    assert facts.ib_hca.exclude and facts.ib_hca.ports == {"mlx5_2": 1}
    assert facts.gloo_socket_ifname == ["eth0"]
    typo = next(p for p in facts.problems if p.name == "NCCL_IB_DISABEL")
    assert (typo.kind, typo.suggestion) == ("unknown-name", "NCCL_IB_DISABLE")
    assert "s3cret" not in json.dumps(to_dict(facts))
    assert from_dict(EnvFacts, json.loads(json.dumps(to_dict(facts)))) == facts


def test_conf_files_precedence(tmp_path: Path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/nccl.conf").write_text("NCCL_DEBUG=WARN\nNCCL_IB_HCA=mlx5_0\n#NCCL_X=1\n")
    (tmp_path / "home/u").mkdir(parents=True)
    (tmp_path / "home/u/.nccl.conf").write_text("NCCL_IB_HCA=mlx5_1\nNCCL_ALGO=Ring\n")
    env = {"HOME": "/home/u", "NCCL_ALGO": "Tree"}
    facts = env_probe.probe(tmp_path, env)
    assert facts.effective == {"NCCL_ALGO": "Tree", "NCCL_DEBUG": "WARN", "NCCL_IB_HCA": "mlx5_1"}
    assert facts.sources["NCCL_IB_HCA"] == "/home/u/.nccl.conf"
    assert facts.sources["NCCL_DEBUG"] == "/etc/nccl.conf"
    assert facts.ib_hca.entries == ["mlx5_1"]


def test_redact():
    assert redact("WANDB_API_KEY", "x") == "<redacted>" and redact("NCCL_DEBUG", "INFO") == "INFO"
