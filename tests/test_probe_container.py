"""The container probe on captured hosts, on this machine, and on garbled trees."""

from __future__ import annotations

import os
import resource
from pathlib import Path

from nccldoctor.probes import container

FIXTURES = Path(__file__).parent / "fixtures" / "hosts"
DOCKER_DEFAULT_CAPS = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_RAW",
    "CAP_SYS_CHROOT",
    "CAP_MKNOD",
    "CAP_AUDIT_WRITE",
    "CAP_SETFCAP",
]


def test_docker_bridge_container():
    facts = container.probe(FIXTURES / "docker-bridge", {})
    assert facts.runtime == "docker"
    cid = "3f4e5d6c7b8a9f0e1d2c3b4a59687766554433221100ffeeddccbbaa99887766"
    assert facts.runtime_evidence == [
        "/.dockerenv exists",
        f"/proc/1/cgroup: 12:pids:/docker/{cid}",
        "mountinfo: / is overlay with layers under /var/lib/docker/",
        f"mountinfo: /etc/resolv.conf is bound from /var/lib/docker/containers/{cid}/resolv.conf",
    ]
    assert facts.network_mode == "bridge"
    assert facts.network_evidence == [
        "eth0 is one end of a veth pair (iflink 10 != ifindex 9)",
        "eth0 is on 172.17.0.0/16, the subnet of Docker's default bridge",
        "default route via 172.17.0.1 dev eth0",
    ]
    assert facts.shm_size_bytes == 64 * 2**20 and facts.shm_source == "mountinfo size=65536k"
    assert facts.shm_writable is True
    assert (facts.ipc_namespace, facts.ipc_host) == ("ipc:[4026532179]", False)
    assert (facts.memlock_soft, facts.memlock_hard) == (8388608, 8388608)
    assert (facts.nofile_soft, facts.nofile_hard) == (1048576, 1048576)
    assert facts.cap_eff == "00000000a80425fb"
    assert facts.capabilities == DOCKER_DEFAULT_CAPS
    assert not facts.dev_infiniband_present and facts.dev_infiniband == []


def test_bare_cpu_host():
    facts = container.probe(FIXTURES / "cpu-host", {})
    assert facts.runtime is None and facts.runtime_evidence == []
    assert facts.network_mode == "host" and facts.network_evidence == []
    assert facts.default_interface == "eth0"
    assert facts.ipc_host is True
    assert "CAP_IPC_LOCK" in facts.capabilities and "CAP_SYS_NICE" in facts.capabilities


def test_kubernetes_from_env_and_podman_from_marker(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run/.containerenv").write_text('engine="podman-4.9.3"\n')
    (tmp_path / "proc/self/ns").mkdir(parents=True)
    (tmp_path / "proc/self/ns/pid").symlink_to("pid:[4026532301]")
    assert container.probe(tmp_path, {}).runtime == "podman"
    k8s = container.probe(tmp_path, {"KUBERNETES_SERVICE_HOST": "10.96.0.1"})
    assert k8s.runtime == "kubernetes"
    assert k8s.runtime_evidence[0] == "KUBERNETES_SERVICE_HOST=10.96.0.1"


def test_docker_container_whose_default_route_is_a_bridge_is_on_the_host_network(tmp_path):
    """--network host on a server whose uplink is br0: a bridge lives on the host, never in a
    bridge-network container (that gets a veth end)."""
    (tmp_path / ".dockerenv").write_text("")
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text("0::/docker/3f4e5d6c7b8a\n")
    (tmp_path / "proc/net").mkdir(parents=True)
    (tmp_path / "proc/net/route").write_text(
        "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\n"
        "eth0\t00000000\t010912C6\t0003\t0\t0\t0\t00000000\n"
    )
    for name, value in (("ifindex", "5"), ("iflink", "5")):
        (tmp_path / "sys/class/net/eth0/bridge").mkdir(parents=True, exist_ok=True)
        (tmp_path / f"sys/class/net/eth0/{name}").write_text(value + "\n")
    facts = container.probe(tmp_path, {})
    assert facts.runtime == "docker" and facts.network_mode == "host"
    assert facts.network_evidence == [
        "eth0, on the default route, is a bridge: the host's own interface"
    ]
    (tmp_path / "sys/class/net/eth0/bridge").rmdir()
    assert container.probe(tmp_path, {}).network_mode == "unknown"


def test_marker_file_alone_in_the_host_pid_namespace_is_no_container(tmp_path):
    (tmp_path / ".dockerenv").write_text("")
    (tmp_path / "proc/self/ns").mkdir(parents=True)
    (tmp_path / "proc/self/ns/pid").symlink_to("pid:[4026531836]")
    facts = container.probe(tmp_path, {})
    assert facts.runtime is None
    assert facts.runtime_evidence[-1] == "but /proc/self/ns/pid is pid:[4026531836], the host's"


def test_decode_capabilities():
    assert container.decode_capabilities(0x00000000A80425FB) == DOCKER_DEFAULT_CAPS
    assert container.decode_capabilities(1 << 14 | 1 << 23) == ["CAP_IPC_LOCK", "CAP_SYS_NICE"]
    assert container.decode_capabilities(1 << 45) == ["CAP_45"]


def test_garbled_and_missing_files_do_not_crash(tmp_path):
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/net").mkdir(parents=True)
    (tmp_path / "proc/self/mountinfo").write_bytes(b"\x00\xff garbage - \n27 1 / / rw - overlay\n")
    (tmp_path / "proc/self/limits").write_text("Max locked memory  lots  of bytes\n")
    (tmp_path / "proc/self/status").write_text("CapEff:\tzzzz\n")
    (tmp_path / "proc/net/route").write_text("Iface\nbad line here\neth0 XYZ\n")
    facts = container.probe(tmp_path, {})
    assert facts.runtime is None
    assert facts.memlock_soft is None and facts.cap_eff is None
    assert facts.shm_size_bytes is None and facts.shm_writable is False
    assert facts.default_interface is None


def test_this_machine():
    facts = container.probe(Path("/"), os.environ)
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    assert facts.memlock_soft == (-1 if soft == resource.RLIM_INFINITY else soft)
    assert facts.memlock_hard == (-1 if hard == resource.RLIM_INFINITY else hard)
    st = os.statvfs("/dev/shm")
    assert facts.shm_size_bytes == st.f_blocks * st.f_frsize and facts.shm_source == "statvfs"
    assert facts.shm_writable is True
    assert facts.ipc_namespace == os.readlink("/proc/self/ns/ipc")
    assert not [p for p in os.listdir("/dev/shm") if p.startswith("nccldoctor-")]
