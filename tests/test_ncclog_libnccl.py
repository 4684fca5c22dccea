"""Real NCCL output: the nvidia-nccl-cu12 wheel's libnccl runs ncclGetUniqueId without a GPU
(bootstrap interface selection, docs/nccl-log-formats.md#interface-selection) and the parser reads what it printed."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from nccldoctor.explain import explain
from nccldoctor.ncclog import expand_inputs

LIBNCCL = Path(sysconfig.get_paths()["purelib"]) / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
pytestmark = pytest.mark.skipif(not LIBNCCL.is_file(), reason="nvidia-nccl-cu12 is not installed")
# NCCL logs to stdout (its bootstrap-root thread too); the result code goes to stderr so that
# it cannot interleave with NCCL's lines.
_PROBE = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
version = ctypes.c_int()
lib.ncclGetVersion(ctypes.byref(version))
rc = lib.ncclGetUniqueId(ctypes.create_string_buffer(128))
sys.stdout.flush()
sys.stderr.write(f"{version.value} {rc}")
"""


def _explain(tmp_path: Path, ifname: str | None, **more_env: str):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    env.update(more_env)
    if ifname is not None:
        env["NCCL_SOCKET_IFNAME"] = ifname
    env.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,BOOTSTRAP,ENV")
    log = tmp_path / f"probe-{ifname}.log"
    with log.open("wb") as out:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE, str(LIBNCCL)],
            env=env,
            stdout=out,
            stderr=subprocess.PIPE,
            timeout=60,
            check=True,
        )
    version, rc = map(int, done.stderr.split()[-2:])
    assert version >= 21800
    extra, findings = explain(expand_inputs([str(log)]))
    (proc,) = extra["nccl"]["processes"]
    return rc, extra, proc, findings


@pytest.mark.parametrize("ifname", ["lo", "=lo"])
def test_loopback_by_prefix_and_exact_name(tmp_path, ifname):
    rc, extra, proc, findings = _explain(tmp_path, ifname)
    assert rc == 0
    assert proc["bootstrap"] == {"ifname": "lo", "address": "127.0.0.1"}
    assert proc["env"]["NCCL_SOCKET_IFNAME"] == ifname
    assert extra["interfaces"] == ["lo"]
    assert extra["nccl"]["lines"]["garbled"] == 0
    assert "bootstrap on lo:127.0.0.1" in extra["nccl"]["answer"]
    assert not [f for f in findings if f.severity.value == "fail"]


def test_exclusion_and_one_letter_value(tmp_path):
    _, _, default, _ = _explain(tmp_path, None)
    _, _, excluded, _ = _explain(tmp_path, "^lo")
    _, _, one_letter, _ = _explain(tmp_path, "l")
    assert excluded["bootstrap"]["ifname"] != "lo"
    assert (Path("/sys/class/net") / excluded["bootstrap"]["ifname"]).is_dir()
    # NCCL ignores a one-character NCCL_SOCKET_IFNAME (misc/socket.cc): the default choice stands
    assert one_letter["bootstrap"] == default["bootstrap"]
    assert "NCCL_SOCKET_IFNAME" not in one_letter["env"]


def test_missing_interface_warns(tmp_path):
    rc, _, proc, findings = _explain(tmp_path, "nosuch")
    assert rc != 0 and proc["bootstrap"] is None
    (warn,) = proc["warnings"]
    assert warn["message"] == "Bootstrap : no socket interface found"
    assert warn["file"] == "bootstrap.cc" and warn["line"] > 0
    assert proc["error_code"] == rc
    assert any("no socket interface found" in " ".join(f.evidence) for f in findings)
    assert any(f.id == "logs.nccl-error" for f in findings)
    assert any(f.severity.value == "fail" for f in findings)


def test_missing_interface_matches_the_catalogue(tmp_path):
    pytest.importorskip("checks.signatures")
    _, _, _, findings = _explain(tmp_path, "nosuch")
    found = {f.id: f for f in findings}
    sig = found["nccl.bootstrap-no-interface"]
    assert sig.severity.value == "fail" and sig.category == "interface_selection"
    assert "bootstrap.cc:" in sig.evidence[0]  # the whole WARN line, file:line included
    assert found["logs.nccl-error"].severity.value == "info"  # the cause is named already
    assert "logs.nccl-warning" not in found


@pytest.mark.parametrize("stamp", ["", "%H:%M:%S.%3f_", "<%s> ", "[%F %T] "])
def test_timestamped_lines(tmp_path, stamp):
    """NCCL_DEBUG_TIMESTAMP_FORMAT (2.26+) on every level: any strftime text before the host."""
    rc, _, proc, _ = _explain(
        tmp_path, "nosuch", NCCL_DEBUG_TIMESTAMP_LEVELS="ALL", NCCL_DEBUG_TIMESTAMP_FORMAT=stamp
    )
    assert rc != 0
    assert proc["env"] == {"NCCL_SOCKET_IFNAME": "nosuch"}
    assert proc["warnings"][0]["message"] == "Bootstrap : no socket interface found"
    assert proc["backtrace"] and proc["error_code"] == rc


def test_processes_interleaved_in_one_file(tmp_path):
    """Three real processes write to one file at once, as a launcher's combined stdout does."""
    log = tmp_path / "all.log"
    base = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    base.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,BOOTSTRAP,ENV")
    with log.open("ab") as out:
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _PROBE, str(LIBNCCL)],
                env={**base, "NCCL_SOCKET_IFNAME": ifname},
                stdout=out,
                stderr=subprocess.DEVNULL,
            )
            for ifname in ("lo", "=lo", "nosuch")
        ]
        for proc in procs:
            proc.wait(timeout=60)
    extra, _ = explain(expand_inputs([str(log)]))
    by_pid = {p["pid"]: p for p in extra["nccl"]["processes"]}
    assert sorted(by_pid) == sorted(p.pid for p in procs)
    chosen = [by_pid[p.pid]["bootstrap"] for p in procs]
    assert chosen[:2] == [{"ifname": "lo", "address": "127.0.0.1"}] * 2 and chosen[2] is None
    assert [len(by_pid[p.pid]["warnings"]) for p in procs] == [0, 0, 1]
