"""The software probe: versions read from the real libraries here, and from names under a root."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import pytest

from nccldoctor.probes import software
from nccldoctor.probes.python_env import dist_version

FIXTURES = Path(__file__).parent / "fixtures" / "hosts"


def test_this_machine():
    facts = software.probe(Path("/"), os.environ)
    assert facts.python == platform.python_version()
    assert facts.kernel == platform.release()
    assert facts.torch_version == dist_version(Path("/"), "torch")
    assert facts.packages["psutil"] == dist_version(Path("/"), "psutil")
    wheel = dist_version(Path("/"), "nvidia-nccl-cu12")
    if wheel:
        libs = [lib for lib in facts.nccl_libraries if lib.origin == "nvidia wheel"]
        assert libs and libs[0].version == wheel and libs[0].error is None
        assert libs[0].path.endswith("nvidia/nccl/lib/libnccl.so.2")


def test_preloaded_library_is_listed_first(tmp_path):
    wheel = [
        lib for lib in software.probe(Path("/"), {}).nccl_libraries if lib.origin == "nvidia wheel"
    ]
    if not wheel:
        pytest.skip("the nvidia-nccl-cu12 wheel is not installed")
    facts = software.probe(Path("/"), {"LD_PRELOAD": wheel[0].path})
    assert facts.nccl_libraries[0].origin == "LD_PRELOAD"
    assert facts.nccl_libraries[0].version == wheel[0].version
    assert len(facts.nccl_libraries) == len(wheel)  # the same file is listed once


def test_broken_library_records_the_error(tmp_path):
    (tmp_path / "libnccl.so.2").write_text("not an ELF\n")
    facts = software.probe(Path("/"), {"LD_LIBRARY_PATH": str(tmp_path)})
    broken = facts.nccl_libraries[0]
    assert (broken.origin, broken.version) == ("LD_LIBRARY_PATH", None)
    assert broken.error.startswith("OSError: ")


def test_versions_from_file_names_under_a_root(tmp_path):
    lib = tmp_path / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / "libnccl.so.2.21.5").write_bytes(b"\x7fELF")
    (lib / "libnccl.so.2").symlink_to("libnccl.so.2.21.5")
    cuda = tmp_path / "usr/local/cuda/lib64"
    cuda.mkdir(parents=True)
    (cuda / "libcudart.so.12.4.127").write_bytes(b"\x7fELF")
    (cuda / "libcudart.so.12").symlink_to("libcudart.so.12.4.127")
    facts = software.probe(tmp_path, {})
    assert [(x.path, x.origin, x.version) for x in facts.nccl_libraries] == [
        ("/usr/lib/x86_64-linux-gnu/libnccl.so.2", "system", "2.21.5")
    ]
    assert facts.cuda_runtime == "12.4"
    assert facts.cuda_runtime_path == "/usr/local/cuda/lib64/libcudart.so.12"


def test_docker_bridge_fixture():
    facts = software.probe(FIXTURES / "docker-bridge", {})
    assert facts.os_release == "Ubuntu 22.04.3 LTS"
    assert facts.kernel == "5.15.0-91-generic"
    assert facts.torch_version is None and facts.nccl_libraries == [] and facts.packages == {}
