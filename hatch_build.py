"""The wheel's build hook: compiles the C speedups, nccldoctor/ncclog/_lines.c (the log parser's
innermost loop) and nccldoctor/forensics/_pickscan.c (the Flight Recorder loader's scan).

It builds each extension next to its source (as ``build_ext --inplace`` does), so that an
editable install imports it too, and puts it in the wheel, which is then tagged for this
platform. Without a working C compiler the wheel stays pure Python and each uses the same
definition written in Python (``nccldoctor/ncclog/lines.py``, ``nccldoctor/forensics/pickscan.py``),
only slower.
"""

from __future__ import annotations

import shlex
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCES = (Path("nccldoctor/ncclog/_lines.c"), Path("nccldoctor/forensics/_pickscan.c"))


def compile_extension(root: Path, source: Path) -> Path:
    """Compile and link ``source`` with the interpreter's own compiler settings; the built file."""
    target = root / source.with_suffix(sysconfig.get_config_var("EXT_SUFFIX"))
    link = shlex.split(sysconfig.get_config_var("LDSHARED") or "cc -shared")
    include = sysconfig.get_paths()["include"]
    command = [*link, "-O2", "-fPIC", f"-I{include}", str(root / source), "-o", str(target)]
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=300)
    return target


class SpeedupsHook(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        for source in SOURCES:
            try:
                built = compile_extension(Path(self.root), source)
            except (OSError, subprocess.SubprocessError) as exc:
                detail = getattr(exc, "stderr", "") or exc
                self.app.display_warning(
                    f"nccldoctor: {source} not compiled, its Python twin serves: {detail}"
                )
                continue
            if version == "editable":  # the install imports the source tree, where it now is
                continue
            build_data["pure_python"] = False
            build_data["infer_tag"] = True
            build_data["force_include"][str(built)] = str(built.relative_to(self.root))
