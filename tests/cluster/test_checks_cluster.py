"""Cross-node checks: each fires on differing nodes and stays quiet on equal ones."""

from __future__ import annotations

from checks import get_check, run_cluster_checks
from nccldoctor.facts import NodeFacts
from nccldoctor.facts.gpu import GpuDevice
from nccldoctor.facts.network import Interface, Route


def node(name, torch="2.5.1", nccl="2.21.5", cuda="12.4", driver="550.54", gpu="H100",
         mtu=9000, address="198.18.0.2/24", env=None):  # fmt: skip
    facts = NodeFacts(node=name)
    facts.software.torch_version, facts.software.torch_nccl = torch, nccl
    facts.software.torch_cuda, facts.gpu.driver_version = cuda, driver
    facts.gpu.devices = [GpuDevice(0, name=gpu)]
    facts.network.interfaces = [Interface("eth0", mtu=mtu, ipv4=[address])]
    facts.network.route_to_master = Route(
        "198.18.0.1", interface="eth0", source=address.split("/")[0]
    )
    facts.env.variables = dict(env or {})
    return facts


def run(check_id, nodes):
    return get_check(check_id).run(nodes)


def test_equal_nodes_are_quiet():
    assert run_cluster_checks([node("a"), node("b", address="198.18.0.3/24")]) == []


def test_versions_differ():
    (f,) = run("cluster.torch-version-differs", [node("a"), node("b", torch="2.4.0")])
    assert f.severity.value == "fail" and f.category == "version_mismatch"
    assert f.evidence == ["2.4.0: b", "2.5.1: a"]
    assert run("cluster.nccl-version-differs", [node("a"), node("b", nccl="2.18.1")])
    assert run("cluster.cuda-version-differs", [node("a"), node("b", cuda="12.1")])
    assert run("cluster.driver-differs", [node("a"), node("b", driver="535.1")])
    assert run("cluster.gpu-model-differs", [node("a"), node("b", gpu="A100")])
    assert run("cluster.torch-version-differs", [node("a"), node("b", torch=None)]) == []


def test_nccl_env_differs_but_per_node_files_do_not_count():
    nodes = [node("a", env={"NCCL_IB_DISABLE": "1", "NCCL_DEBUG_FILE": "/a"}),
             node("b", env={"NCCL_DEBUG_FILE": "/b"})]  # fmt: skip
    (f,) = run("cluster.nccl-env-differs", nodes)
    assert f.evidence == ["NCCL_IB_DISABLE: a=1, b=(unset)"]


def test_mtu_and_subnet_of_the_interface_in_use():
    (f,) = run("cluster.mtu-differs", [node("a"), node("b", mtu=1500)])
    assert f.evidence == ["1500: b", "9000: a"] and f.severity.value == "fail"
    (f,) = run("cluster.subnet-differs", [node("a"), node("b", address="172.17.0.2/16")])
    assert "172.17.0.0/16: b" in f.evidence


def test_the_master_counts_the_interface_holding_its_address():
    master = node("m", mtu=1500, address="198.18.0.1/24")
    master.network.route_to_master = Route("198.18.0.1", interface="lo", source="198.18.0.1")
    assert run("cluster.mtu-differs", [master, node("b")])
