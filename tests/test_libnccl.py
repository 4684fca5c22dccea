"""libnccl discovery, ncclGetVersion and the ncclGetUniqueId bootstrap probe, on the real wheel."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nccldoctor.probes import libnccl
from nccldoctor.probes.python_env import dist_version


def _wheel_lib() -> Path:
    wheel = [c for c in libnccl.find_libnccl(Path("/"), {}) if c.origin == libnccl.ORIGIN_WHEEL]
    if not wheel:
        pytest.skip("the nvidia-nccl-cu12 wheel is not installed")
    return wheel[0].path


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    env.update(extra)
    return env


@pytest.mark.parametrize(
    ("code", "text"), [(23203, "2.32.3"), (22105, "2.21.5"), (2708, "2.7.8"), (2804, "2.8.4")]
)
def test_decode_version(code, text):
    assert libnccl.decode_version(code) == text


def test_wheel_version_matches_its_metadata():
    version = libnccl.nccl_version(_wheel_lib())
    assert version == dist_version(Path("/"), "nvidia-nccl-cu12")


def test_nccl_version_of_a_non_library_raises_oserror(tmp_path):
    bogus = tmp_path / "libnccl.so.2"
    bogus.write_text("not an ELF file\n")
    with pytest.raises(OSError):
        libnccl.nccl_version(bogus)


def test_bootstrap_on_lo_picks_lo():
    result = libnccl.bootstrap_probe(_wheel_lib(), _env(NCCL_SOCKET_IFNAME="lo"), timeout=30)
    assert result.unique_id_ok and result.rc == 0, result
    assert any(
        "NCCL_SOCKET_IFNAME set by environment to lo" in line for line in result.output_lines
    )
    assert any("Bootstrap: Using lo:127.0.0.1<0>" in line for line in result.output_lines)


def test_bootstrap_on_a_missing_interface_warns():
    result = libnccl.bootstrap_probe(_wheel_lib(), _env(NCCL_SOCKET_IFNAME="nosuchif"), timeout=30)
    assert not result.unique_id_ok
    # ncclInvalidUsage (5) on 2.24+, ncclInternalError (3) before (docs/nccl-log-formats.md#result-codes)
    assert result.rc in (3, 5)
    assert any(
        "NCCL WARN Bootstrap : no socket interface found" in line for line in result.output_lines
    )


def test_bootstrap_overrides_debug_file_and_subsys(tmp_path):
    env = _env(
        NCCL_SOCKET_IFNAME="lo",
        NCCL_DEBUG_FILE=str(tmp_path / "nccl.%p.log"),
        NCCL_DEBUG_SUBSYS="NET",
    )
    result = libnccl.bootstrap_probe(_wheel_lib(), env, timeout=30)
    assert any("Bootstrap: Using lo:" in line for line in result.output_lines)
    assert list(tmp_path.iterdir()) == []


def test_bootstrap_of_a_non_library_reports_the_exit(tmp_path):
    bogus = tmp_path / "libnccl.so.2"
    bogus.write_text("not an ELF file\n")
    result = libnccl.bootstrap_probe(bogus, _env(), timeout=30)
    assert result.rc is None and not result.unique_id_ok
    assert result.error == "the probe exited with 1"
    assert any("OSError" in line for line in result.output_lines)


def test_bootstrap_deadline():
    result = libnccl.bootstrap_probe(_wheel_lib(), _env(), timeout=0.001)
    assert result.rc is None
    assert result.error == "timed out after 0.001s"


def test_find_libnccl_under_a_fixture_root(tmp_path):
    site = tmp_path / "usr/local/lib/python3.10/dist-packages"
    (site / "torch/lib").mkdir(parents=True)
    (site / "torch/__init__.py").write_text("")
    (site / "torch/lib/libnccl.so.2").write_bytes(b"\x7fELF")
    (site / "nvidia/nccl/lib").mkdir(parents=True)
    (site / "nvidia/nccl/lib/libnccl.so.2").write_bytes(b"\x7fELF")
    system = tmp_path / "usr/lib/x86_64-linux-gnu"
    system.mkdir(parents=True)
    (system / "libnccl.so.2.21.5").write_bytes(b"\x7fELF")
    (system / "libnccl.so.2").symlink_to("libnccl.so.2.21.5")
    (system / "libnccl.so").symlink_to("libnccl.so.2")
    extra = tmp_path / "opt/nccl/lib"
    extra.mkdir(parents=True)
    (extra / "libnccl.so.2").write_bytes(b"\x7fELF")
    (tmp_path / "etc/ld.so.conf.d").mkdir(parents=True)
    (tmp_path / "etc/ld.so.conf.d/nccl.conf").write_text("# NCCL\n/opt/nccl/lib\n")

    found = libnccl.find_libnccl(tmp_path, {"LD_PRELOAD": "/opt/nccl/lib/libnccl.so.2"})

    assert [(c.path.relative_to(tmp_path).as_posix(), c.origin) for c in found] == [
        ("opt/nccl/lib/libnccl.so.2", "LD_PRELOAD"),
        ("usr/local/lib/python3.10/dist-packages/torch/lib/libnccl.so.2", "torch"),
        (
            "usr/local/lib/python3.10/dist-packages/nvidia/nccl/lib/libnccl.so.2",
            "nvidia wheel",
        ),
        ("usr/lib/x86_64-linux-gnu/libnccl.so.2", "system"),
    ]


def test_preload_by_bare_name_and_missing_preload(tmp_path):
    lib = tmp_path / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / "libnccl.so.2").write_bytes(b"\x7fELF")
    by_name = libnccl.find_libnccl(tmp_path, {"LD_PRELOAD": "libnccl.so.2"})
    assert [(c.path, c.origin) for c in by_name] == [(lib / "libnccl.so.2", "LD_PRELOAD")]
    missing = libnccl.find_libnccl(tmp_path, {"LD_PRELOAD": "/opt/gone/libnccl.so.2"})
    assert [c.origin for c in missing] == ["system"]


def test_find_libnccl_on_an_empty_root(tmp_path):
    assert libnccl.find_libnccl(tmp_path, {"LD_LIBRARY_PATH": ":/nowhere:"}) == []


@pytest.mark.parametrize(
    ("name", "version"),
    [("libnccl.so.2.21.5", "2.21.5"), ("libnccl.so.2", None), ("libnccl.so.2.x", None)],
)
def test_version_in_name(tmp_path, name, version):
    (tmp_path / name).write_bytes(b"")
    (tmp_path / "link").symlink_to(name)
    assert libnccl.version_in_name(tmp_path / "link", "libnccl") == version
