"""The live network probe inside a real network namespace: the kernel's route, not a guess.

Two namespaces joined by a veth pair on 198.18.1.0/24; the probe runs in one of them
(`ip netns exec`) with the other as the master.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

WORKTREE = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture
def netns_pair() -> Iterator[tuple[str, str]]:
    """(namespace to probe in, its veth name); the master is 198.18.1.1 in the peer namespace."""
    tag = f"{os.getpid() % 100000}"
    node, master = f"nb-node-{tag}", f"nb-master-{tag}"
    veth, peer = f"nbv{tag}", f"nbp{tag}"
    try:
        _ip("netns", "add", node)
        _ip("netns", "add", master)
        _ip(
            "link",
            "add",
            veth,
            "netns",
            node,
            "type",
            "veth",
            "peer",
            "name",
            peer,
            "netns",
            master,
        )
        _ip("-n", node, "addr", "add", "198.18.1.2/24", "dev", veth)
        _ip("-n", master, "addr", "add", "198.18.1.1/24", "dev", peer)
        for ns, dev in ((node, veth), (node, "lo"), (master, peer), (master, "lo")):
            _ip("-n", ns, "link", "set", dev, "up")
        yield node, veth
    finally:  # deleting a namespace deletes the veth end inside it
        for ns in (node, master):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def _preflight_in(ns: str, env: dict[str, str]) -> dict:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "GLOO_", "MASTER_"))}
    result = subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, "-m", "nccldoctor", "preflight", "--json",
         "--master", "198.18.1.1"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, "PYTHONPATH": str(WORKTREE), **env},
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


def test_live_route_names_the_veth(netns_pair):
    ns, veth = netns_pair
    report = _preflight_in(ns, {})
    net = report["nodes"][0]["network"]
    assert net["live"] and net["address_source"] == "psutil"
    route = net["route_to_master"]
    assert (route["interface"], route["source"], route["method"]) == (veth, "198.18.1.2", "kernel")
    assert net["nccl_default_pick"] == veth  # the only interface besides lo
    kinds = {i["name"]: i["kind"] for i in net["interfaces"]}
    assert kinds == {"lo": "loopback", veth: "veth"}
    ids = {f["id"] for f in report["findings"]}
    assert not ids & {"socket.default-pick-differs", "socket.pick-virtual", "master.no-route"}


def test_missing_ifname_in_the_namespace(netns_pair):
    ns, veth = netns_pair
    report = _preflight_in(ns, {"NCCL_SOCKET_IFNAME": "eth9"})
    (finding,) = [f for f in report["findings"] if f["id"] == "socket.ifname-missing"]
    assert finding["severity"] == "fail"
    assert f"export NCCL_SOCKET_IFNAME=={veth}" in finding["fix"]
    assert report["exit_code"] == 1
