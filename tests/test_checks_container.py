"""Container checks on the captured docker-bridge and cpu-host trees (plus a GPU/HCA where needed)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from fake_nvml import FakeNvml

from checks import get_check
from nccldoctor.facts import NodeFacts
from nccldoctor.facts.rdma import Hca, IbPort, RdmaFacts
from nccldoctor.model import Finding, Severity
from nccldoctor.probes import container, gpu

FIXTURES = Path(__file__).parent / "fixtures" / "hosts"
HCAS = RdmaFacts(hcas=[Hca("mlx5_0", ports=[IbPort(1, state="ACTIVE", link_layer="InfiniBand")])])


def host(name: str, *, gpus: int = 0, multi_node: bool = False, hcas: bool = False) -> NodeFacts:
    facts = NodeFacts(
        node=name, container=container.probe(FIXTURES / name, {}), multi_node=multi_node
    )
    if gpus:
        nvml = FakeNvml()
        nvml.gpus = nvml.gpus[:gpus]
        facts.gpu = gpu.probe(Path("/"), {}, nvml=nvml)
    if hcas:
        facts.rdma = HCAS
    return facts


def run(check_id: str, facts: NodeFacts) -> list[Finding]:
    return get_check(check_id).run(facts, node=facts.node)


def test_bridge_network_fires_on_a_multi_node_job():
    (finding,) = run("container.bridge-network", host("docker-bridge", multi_node=True))
    assert finding.severity is Severity.FAIL and finding.category == "docker_network"
    assert finding.title == "docker container on a bridge network in a multi-node job"
    assert "eth0 is on 172.17.0.0/16, the subnet of Docker's default bridge" in finding.evidence
    assert "docker run --network host" in finding.fix


def test_bridge_network_quiet():
    assert run("container.bridge-network", host("docker-bridge", multi_node=False)) == []
    assert run("container.bridge-network", host("cpu-host", multi_node=True)) == []


def test_shm_small_warns_for_docker_default():
    (finding,) = run("container.shm-small", host("docker-bridge", gpus=1))
    assert finding.severity is Severity.WARN and finding.category == "shm_docker"
    assert finding.title == "/dev/shm is only 64 MiB"
    assert finding.evidence[0] == "/dev/shm: 64 MiB (mountinfo size=65536k)"
    assert "docker run --shm-size=1g" in finding.fix


def test_shm_small_is_info_on_a_cpu_node():
    (finding,) = run("container.shm-small", host("docker-bridge"))
    assert finding.severity is Severity.INFO


def test_shm_small_fails_with_several_local_gpus():
    (finding,) = run("container.shm-small", host("docker-bridge", gpus=2))
    assert finding.severity is Severity.FAIL


def test_shm_small_warns_for_several_local_ranks_on_a_cpu_node():
    facts = host("docker-bridge")
    facts.local_ranks = 2
    (finding,) = run("container.shm-small", facts)
    assert finding.severity is Severity.WARN
    assert finding.title == "/dev/shm is only 64 MiB for 2 local ranks"
    assert "64 MiB holds 6 of them" in finding.evidence[-2]
    assert finding.evidence[-1].startswith("no GPU here: the 2 local ranks run gloo")


def test_shm_small_counts_the_ranks_the_run_starts_not_only_the_gpus():
    facts = host("docker-bridge", gpus=1)
    facts.local_ranks = 2
    (finding,) = run("container.shm-small", facts)
    assert finding.severity is Severity.FAIL and "for 2 local ranks" in finding.title
    assert not any(e.startswith("no GPU here") for e in finding.evidence)


def test_shm_small_quiet_on_the_host():
    assert run("container.shm-small", host("cpu-host", gpus=2)) == []


def test_shm_not_writable_fires():
    facts = host("docker-bridge")
    facts.container.shm_writable = False
    (finding,) = run("container.shm-not-writable", facts)
    assert finding.severity is Severity.FAIL and "chmod 1777 /dev/shm" in finding.fix


def test_shm_not_writable_from_a_read_only_mount(tmp_path):
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/mountinfo").write_text(
        "1463 1452 0:72 / /dev/shm ro,nosuid,nodev,noexec,relatime - tmpfs shm ro,size=65536k\n"
    )
    facts = NodeFacts(container=container.probe(tmp_path, {}))
    assert [f.id for f in run("container.shm-not-writable", facts)] == [
        "container.shm-not-writable"
    ]


def test_shm_not_writable_quiet():
    assert run("container.shm-not-writable", host("docker-bridge")) == []


def test_private_ipc_multi_gpu_fires():
    (finding,) = run("container.private-ipc-multi-gpu", host("docker-bridge", gpus=2))
    assert finding.severity is Severity.INFO
    assert finding.evidence == [
        "/proc/self/ns/ipc: ipc:[4026532179] (the host's is ipc:[4026531839])"
    ]
    assert "docker run --ipc=host" in finding.fix


def test_private_ipc_multi_gpu_quiet():
    assert run("container.private-ipc-multi-gpu", host("docker-bridge", gpus=1)) == []
    assert run("container.private-ipc-multi-gpu", host("cpu-host", gpus=2)) == []


def test_memlock_limited_fires_with_hcas():
    (finding,) = run("container.memlock-limited", host("docker-bridge", hcas=True))
    assert finding.severity is Severity.FAIL and finding.category == "ib_memlock"
    assert finding.title == "Locked memory is limited to 8192 KiB with 1 HCA(s) present"
    assert finding.evidence[0] == "/proc/self/limits: Max locked memory 8388608 8388608 bytes"
    assert "--ulimit memlock=-1:-1" in finding.fix


def test_memlock_limited_quiet():
    assert run("container.memlock-limited", host("docker-bridge", hcas=False)) == []
    unlimited = host("docker-bridge", hcas=True)
    unlimited.container = replace(unlimited.container, memlock_soft=-1, memlock_hard=-1)
    assert run("container.memlock-limited", unlimited) == []


def test_dev_infiniband_missing_fires():
    (finding,) = run("container.dev-infiniband-missing", host("docker-bridge", hcas=True))
    assert finding.severity is Severity.FAIL and finding.category == "ib_error"
    assert finding.evidence == ["HCAs: mlx5_0", "/dev/infiniband: missing"]
    assert "--device=/dev/infiniband" in finding.fix


def test_dev_infiniband_missing_quiet(tmp_path):
    assert run("container.dev-infiniband-missing", host("docker-bridge")) == []
    (tmp_path / "dev/infiniband").mkdir(parents=True)
    for name in ("rdma_cm", "uverbs0"):
        (tmp_path / "dev/infiniband" / name).write_text("")
    facts = NodeFacts(container=container.probe(tmp_path, {}), rdma=HCAS)
    assert facts.container.dev_infiniband == ["rdma_cm", "uverbs0"]
    assert run("container.dev-infiniband-missing", facts) == []


def test_cap_ipc_lock_missing_fires():
    (finding,) = run("container.cap-ipc-lock-missing", host("docker-bridge", hcas=True))
    assert finding.severity is Severity.INFO
    assert finding.evidence == ["/proc/self/status CapEff: 00000000a80425fb (IPC_LOCK is bit 14)"]


def test_cap_ipc_lock_missing_quiet():
    assert run("container.cap-ipc-lock-missing", host("cpu-host", hcas=True)) == []
    assert run("container.cap-ipc-lock-missing", host("docker-bridge")) == []


def test_cap_sys_nice_missing_fires():
    (finding,) = run("container.cap-sys-nice-missing", host("docker-bridge", gpus=2))
    assert finding.severity is Severity.INFO
    assert "docker run --cap-add SYS_NICE" in finding.fix


def test_cap_sys_nice_missing_quiet():
    assert run("container.cap-sys-nice-missing", host("docker-bridge", gpus=1)) == []
    assert run("container.cap-sys-nice-missing", host("cpu-host", gpus=2)) == []


def test_nofile_low_fires():
    facts = host("cpu-host")
    facts.container = replace(facts.container, nofile_soft=1024, nofile_hard=524288)
    (finding,) = run("container.nofile-low", facts)
    assert finding.title == "Open files are limited to 1024"
    assert "ulimit -n 524288" in finding.fix


def test_nofile_low_quiet():
    assert run("container.nofile-low", host("docker-bridge")) == []
