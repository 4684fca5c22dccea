"""The catalogue against what the real libnccl.so.2 (the nvidia-nccl-cu12 wheel) prints: run
``ncclGetUniqueId`` (no GPU needed) under bad settings and match every line it wrote."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from checks.signatures import match_line
from nccldoctor.probes import libnccl


def _wheel_lib() -> Path:
    wheel = [c for c in libnccl.find_libnccl(Path("/"), {}) if c.origin == libnccl.ORIGIN_WHEEL]
    if not wheel:
        pytest.skip("the nvidia-nccl-cu12 wheel is not installed")
    return wheel[0].path


def _ids_printed(**settings: str) -> tuple[list[str], set[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    env.update({"NCCL_DEBUG": "INFO", **settings})
    result = libnccl.bootstrap_probe(_wheel_lib(), env, timeout=60)
    assert result.output_lines, result
    return result.output_lines, {
        m.signature.id for line in result.output_lines for m in match_line(line)
    }


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"NCCL_SOCKET_IFNAME": "nosuchif"}, "nccl.bootstrap-no-interface"),
        ({"NCCL_SOCKET_IFNAME": "=nosuchif"}, "nccl.bootstrap-no-interface"),
        # an IPv6 form without ']': a parse error (a bare name would make NCCL ask DNS)
        ({"NCCL_COMM_ID": "[::1"}, "nccl.comm-id-invalid"),
        # a subnet no interface of this machine is in (198.18.0.0/15 is the tests' range)
        ({"NCCL_COMM_ID": "198.19.254.1:29600"}, "nccl.comm-id-no-listening-interface"),
    ],
)
def test_real_nccl_warnings_are_recognised(settings: dict[str, str], expected: str) -> None:
    lines, ids = _ids_printed(**settings)
    assert expected in ids, lines


def test_a_healthy_real_bootstrap_matches_nothing() -> None:
    lines, ids = _ids_printed(NCCL_SOCKET_IFNAME="lo")
    assert any("Bootstrap: Using lo" in line for line in lines), lines
    assert ids == set(), lines
