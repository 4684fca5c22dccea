"""The Facts a log shows of each host, judged by the network rules `check` runs on live nodes.

The logs here are real lines from public threads, kept as they came; a log of two hosts is two
real logs put together (each host's lines in one piece, as several nodes' logs concatenated).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from checks.signatures import identify
from nccldoctor.cli.app import app
from nccldoctor.explain import judge_log_network
from nccldoctor.model import Severity
from nccldoctor.ncclog import parse_source
from nccldoctor.ncclog.hostfacts import address_facts, log_hosts

REAL = Path(__file__).parent / "fixtures" / "real"

# NVIDIA/nccl#367 (NCCL 2.4–2.7's list form) and ROCm/rccl#1055 (RCCL 2.17): two containers, each
# the first on its host's default Docker bridge, both eth0:172.17.0.2
TWO_CONTAINERS = """\
26a46eb2b1d3:111329:111329 [0] NCCL INFO Bootstrap : Using [0]eth0:172.17.0.2<0>
26a46eb2b1d3:111329:111329 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so).

26a46eb2b1d3:111329:111329 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]
26a46eb2b1d3:111329:111329 [0] NCCL INFO NET/Socket : Using [0]eth0:172.17.0.2<0>
9cce34ff6c6c:504930:504930 [0] NCCL INFO Bootstrap : Using eth0:172.17.0.2<0>
9cce34ff6c6c:504930:504930 [0] NCCL INFO NET/Plugin : No plugin found, using internal implementation
9cce34ff6c6c:504930:505428 [0] NCCL INFO NET/IB : No device found.
9cce34ff6c6c:504930:505428 [0] NCCL INFO NET/Socket : Using [0]eth0:172.17.0.2<0>
9cce34ff6c6c:504930:505428 [0] NCCL INFO Using network Socket
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.log"
    path.write_text(text)
    return path


def test_two_hosts_advertising_one_address_are_the_docker_bridge(tmp_path):
    logs = parse_source(str(_write(tmp_path, TWO_CONTAINERS)), identify=identify)
    hosts = {h.facts.node: h for h in log_hosts(logs)}
    assert set(hosts) == {"26a46eb2b1d3", "9cce34ff6c6c"}
    for host in hosts.values():
        net = host.facts.network
        assert (net.nccl_pick, net.nccl_pick_address) == ("eth0", "172.17.0.2")
        assert host.facts.multi_node  # the log shows another host's lines
        assert host.facts.container.network_mode == "bridge"
    found = {f.id: f for f in judge_log_network(logs)}
    shared = found["cluster.advertised-address-shared"]
    assert shared.severity == Severity.FAIL
    assert "172.17.0.2" in shared.title and "--network host" in shared.fix
    assert (
        "log: 26a46eb2b1d3:111329:111329 [0] NCCL INFO Bootstrap : Using [0]eth0:172.17.0.2<0>"
        in (shared.evidence)
    )
    bridge = found["container.bridge-network"]
    assert bridge.severity == Severity.FAIL and "--network host" in bridge.fix
    assert any(e.startswith("log: ") and "Bootstrap" in e for e in bridge.evidence)


def test_the_first_line_names_the_bridge_and_its_fix(tmp_path):
    result = CliRunner().invoke(app, ["explain", str(_write(tmp_path, TWO_CONTAINERS))])
    first = result.stdout.splitlines()[0]
    assert first.startswith("✗ Problems found: docker container on a bridge network"), first
    assert first.endswith("→ run the containers with --network host"), first
    assert result.exit_code == 1


def test_one_container_on_the_default_bridge_is_no_longer_healthy():
    """NVIDIA/nccl#1504: a container's id as host name, eth0 on 172.17/16, one host shown:
    judged as one host of several, a warning that says so."""
    logs = parse_source(str(REAL / "nccl-1504-v2.21.5-docker-eth0" / "log.txt"))
    (finding,) = judge_log_network(logs)
    assert finding.id == "container.bridge-network" and finding.severity == Severity.WARN
    assert finding.evidence[0].startswith("judged as one host of several")
    assert "log: 678c7278cb2d:26023:26023 [0] NCCL INFO Bootstrap : Using eth0:172.17.2.7<0>" in (
        finding.evidence
    )


def test_a_host_in_a_cloud_subnet_of_172_17_is_not_a_container():
    """NVIDIA/nccl#2057: a VM (VM-16-64-ubuntu) whose own network is 172.17.16.0/x."""
    logs = parse_source(str(REAL / "nccl-2057-v2.29.2-no-ib-device" / "log.txt"))
    (host,) = log_hosts(logs)
    assert host.facts.container.network_mode is None
    assert judge_log_network(logs) == []


def test_nccl_2_3_lists_loopback_first_and_bootstraps_on_it():
    """horovod/horovod#584: 2.3 prints each interface; the bootstrap is the socket net's first."""
    logs = parse_source(str(REAL / "horovod-584-v2.3-lo-listed-first-connect-refused" / "log.txt"))
    proc = logs.processes["paigcr-b-gpu-1012:4152"]
    assert proc.bootstrap == {"ifname": "lo", "address": "127.0.0.1"}
    assert [s["ifname"] for s in proc.socket_ifs] == ["lo", "eth0", "eth1"]
    assert proc.connect_errors == {"?": "Connection refused"}
    assert proc.failed_nets == ["Socket"]  # the chain through transport/net_socket.cu
    found = {f.id: f for f in judge_log_network(logs)}
    pick = found["socket.pick-virtual"]
    assert pick.severity == Severity.FAIL and "lo:127.0.0.1" in pick.title
    assert "NCCL_SOCKET_IFNAME==eth0" in pick.fix  # NCCL's own order over what it listed


def test_nccl_2_2_lines_without_nccl_are_read():
    """horovod/horovod#489: "[dev] INFO msg" without "NCCL" (before 2.3)."""
    logs = parse_source(str(REAL / "horovod-489-v2.2-info-without-nccl-ib-16-ranks" / "log.txt"))
    proc = logs.processes["nmyjs-202-75:24503"]
    assert proc.networks == ["IB"]
    assert proc.bootstrap == {"ifname": "eth0", "address": "10.141.202.75"}
    assert proc.ib_oob == "eth0:10.141.202.75"
    assert [d["hca"] for d in proc.ib_devices] == ["mlx4_0"]


@pytest.mark.parametrize(
    ("address", "facts"),
    [
        ("10.0.0.1", {"family": "IPv4", "loopback": False, "link_local": False}),
        ("127.0.0.1", {"family": "IPv4", "loopback": True, "link_local": False}),
        (
            "fe80::215:5dff:fe33:ff6d%eth1",
            {"family": "IPv6", "loopback": False, "link_local": True},
        ),
        ("169.254.3.1", {"family": "IPv4", "loopback": False, "link_local": True}),
        ("not-an-address", {}),
    ],
)
def test_address_facts(address, facts):
    assert address_facts(address) == facts


def test_link_local_bootstrap_across_hosts_is_flagged(tmp_path):
    """An interface with only an IPv6 link-local address picked first, on two hosts."""
    lines = "".join(
        f"{host}:7:7 [0] NCCL INFO Bootstrap : Using bond0:fe80::ae1f:6bff:fe20:f58{n}%bond0<0>\n"
        for n, host in enumerate(("gpu-a", "gpu-b"))
    )
    logs = parse_source(str(_write(tmp_path, lines)))
    found = [f for f in judge_log_network(logs) if f.id == "socket.pick-virtual"]
    assert len(found) == 2 and all("link-local" in " ".join(f.evidence) for f in found)


def test_hosts_bootstrapping_on_different_interfaces():
    """horovod/horovod#636: srv4 on ens5f0.3003, srv5 on ens5f1.3003 (two VLANs, two subnets)."""
    logs = parse_source(str(REAL / "horovod-636-v2.3.7-docker-link-local-two-hosts" / "log.txt"))
    (found,) = [f for f in judge_log_network(logs) if f.id == "cluster.nccl-interface-differs"]
    assert found.severity == Severity.WARN
    assert found.title == (
        "NCCL bootstraps on 2 different interfaces: ens5f0.3003 (srv4), ens5f1.3003 (srv5)"
    )
    assert "ens5f0.3003: srv4 10.1.118.3" in found.evidence


def test_the_same_rule_judges_the_probes_facts():
    """One rule, two sources: the Facts a probe fills on live nodes say the same."""
    from checks import run_checks
    from nccldoctor.facts import NodeFacts

    nodes = []
    for name, pick in (("a", "eth0"), ("b", "eth0"), ("c", "docker0")):
        facts = NodeFacts(node=name)
        facts.network.nccl_pick, facts.network.nccl_pick_address = pick, f"198.18.0.{len(nodes)}"
        nodes.append(facts)
    (found,) = run_checks("cluster", nodes, only=["cluster.nccl-interface-differs"])
    assert found.title == "NCCL bootstraps on 2 different interfaces: docker0 (c), eth0 (a, b)"
    nodes[2].network.nccl_pick = "eth0"
    assert run_checks("cluster", nodes, only=["cluster.nccl-interface-differs"]) == []


# ROCm/rccl#1055: one container on the default bridge runs both ranks, connected by P2P/IPC
ONE_CONTAINER_ALL_RANKS = """\
9cce34ff6c6c:504930:504930 [0] NCCL INFO Bootstrap : Using eth0:172.17.0.2<0>
9cce34ff6c6c:505250:505250 [1] NCCL INFO Bootstrap : Using eth0:172.17.0.2<0>
9cce34ff6c6c:505250:505433 [1] NCCL INFO NET/Socket : Using [0]eth0:172.17.0.2<0>
9cce34ff6c6c:505250:505433 [1] NCCL INFO Using network Socket
9cce34ff6c6c:505250:505433 [1] NCCL INFO Channel 00/0 : 1[3000] -> 0[83000] via P2P/IPC comm 0x1725baa0 nRanks 02
9cce34ff6c6c:504930:505428 [0] NCCL INFO Channel 00/02 :    0   1
9cce34ff6c6c:504930:505428 [0] NCCL INFO Channel 00/0 : 0[83000] -> 1[3000] via P2P/IPC comm 0x154b8e30 nRanks 02
9cce34ff6c6c:505250:505250 [1] NCCL INFO comm 0x1725baa0 rank 1 nranks 2 cudaDev 1 busId 3000 - Abort COMPLETE
9cce34ff6c6c:504930:504930 [0] NCCL INFO comm 0x154b8e30 rank 0 nranks 2 cudaDev 0 busId 83000 - Abort COMPLETE
"""


def test_a_container_that_holds_every_rank_is_not_judged_as_one_of_several(tmp_path):
    """Its ranks connected without the network: the bridge cannot hurt this job."""
    logs = parse_source(str(_write(tmp_path, ONE_CONTAINER_ALL_RANKS)))
    (host,) = log_hosts(logs)
    assert host.alone and not host.facts.multi_node
    assert host.facts.container.network_mode == "bridge"
    assert judge_log_network(logs) == []


def test_a_connect_to_another_hosts_address_shows_the_job_spans_hosts():
    """NVIDIA/nccl#1105: ps-8 (192.168.1.8) connects to 192.168.1.9: its peers are elsewhere,
    so its Facts are judged as one node of several, not as one host alone."""
    logs = parse_source(str(REAL / "nccl-1105-docker-host-network-no-route" / "log.txt"))
    (host,) = log_hosts(logs)
    assert host.facts.multi_node and not host.alone
    assert logs.processes["ps-8:795"].connect_errors == {"192.168.1.9<54263>": "No route to"}
