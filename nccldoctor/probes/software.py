"""Probe: Python, torch, CUDA runtime, NCCL library, OS and kernel."""

from __future__ import annotations

import platform
from collections.abc import Mapping
from pathlib import Path

from nccldoctor.facts import SoftwareFacts
from nccldoctor.probes.sysfs import read_line, read_text


def probe(root: Path, env: Mapping[str, str]) -> SoftwareFacts:
    facts = SoftwareFacts(python=platform.python_version(), platform=platform.platform())
    facts.kernel = read_line(root, "/proc/sys/kernel/osrelease")
    for line in (read_text(root, "/etc/os-release") or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            facts.os_release = line.split("=", 1)[1].strip().strip('"')
    return facts
