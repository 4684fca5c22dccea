"""Bad input ends in a finding and a normal exit of `nccldoctor preflight --json`, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from hostfacts import HOSTS, copy_host

WORKTREE = Path(__file__).resolve().parents[1]


def preflight(root: Path, *args: str, env: dict[str, str] | None = None) -> tuple[dict, int]:
    """Run the real CLI in a subprocess; return the JSON report and the exit code."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "GLOO_", "MASTER_"))}
    result = subprocess.run(
        [sys.executable, "-m", "nccldoctor", "preflight", "--root", str(root), "--json", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, "PYTHONPATH": str(WORKTREE), **(env or {})},
    )
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    assert result.returncode in (0, 1), result.stderr
    report = json.loads(result.stdout)
    assert not [f["id"] for f in report["findings"] if f["id"].endswith(".crashed")]
    assert not report["nodes"][0]["probe_errors"]
    return report, result.returncode


def _ids(report: dict) -> set[str]:
    return {f["id"] for f in report["findings"]}


def test_garbled_tree(tmp_path: Path):
    root = copy_host("ib-two-hca", tmp_path)
    port = root / "sys/class/infiniband/mlx5_0/ports/1"
    for name in ("state", "phys_state", "link_layer"):
        (port / name).unlink()
    (port / "gids/0").write_bytes(b"\xff\xfe\x00junk")
    (root / "proc/modules").write_bytes(bytes(range(256)) * 4)
    (root / "run/nccldoctor/ip-addr.json").write_bytes(b'[{"ifname": 7, "addr_info": "x"')
    (root / "proc/net/route").write_bytes(b"Iface\n\x00\x01\x02 zz yy\n")
    (root / "etc/hosts").write_bytes(b"\x00\xff 127.0.1.1\n::::: nothing\n")
    (root / "sys/class/net/eno1/mtu").write_text("a lot\n")
    report, _ = preflight(root, "--master", "198.18.10.12")
    assert "rdma.sysfs-unreadable" in _ids(report)
    net = report["nodes"][0]["network"]
    assert any("ip-addr.json" in e for e in net["read_errors"])
    assert net["route_to_master"]["error"]


def test_unresolvable_master_in_a_tree():
    report, code = preflight(HOSTS / "ib-two-hca", "--master", "nowhere.invalid")
    assert code == 1 and "master.unresolvable" in _ids(report)


def test_unresolvable_master_live_has_a_deadline():
    started = time.monotonic()
    report, code = preflight(Path("/"), "--master", "nccldoctor-test.invalid")
    assert code == 1 and "master.unresolvable" in _ids(report)
    assert time.monotonic() - started < 30


def test_weird_socket_ifname():
    report, _ = preflight(HOSTS / "ib-two-hca", env={"NCCL_SOCKET_IFNAME": "^,=,"})
    (finding,) = [f for f in report["findings"] if f["id"] == "env.malformed-value"]
    assert "every interface matches" in " ".join(finding["evidence"])
