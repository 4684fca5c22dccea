"""The wheel's build hook: compiles nccldoctor/ncclog/_lines.c, the log parser's C speedup.

It builds the extension next to its source (as ``build_ext --inplace`` does), so that an
editable install imports it too, and puts it in the wheel, which is then tagged for this
platform. Without a working C compiler the wheel stays pure Python and the parser uses the same
definition written in Python (``nccldoctor/ncclog/lines.py``), only slower.
"""

from __future__ import annotations

import shlex
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = Path("nccldoctor/ncclog/_lines.c")


def compile_extension(root: Path) -> Path:
    """Compile and link SOURCE with the interpreter's own compiler settings; the built file."""
    target = root / SOURCE.with_name("_lines" + sysconfig.get_config_var("EXT_SUFFIX"))
    link = shlex.split(sysconfig.get_config_var("LDSHARED") or "cc -shared")
    include = sysconfig.get_paths()["include"]
    command = [*link, "-O2", "-fPIC", f"-I{include}", str(root / SOURCE), "-o", str(target)]
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=300)
    return target


class LinesExtensionHook(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        try:
            built = compile_extension(Path(self.root))
        except (OSError, subprocess.SubprocessError) as exc:
            detail = getattr(exc, "stderr", "") or exc
            self.app.display_warning(
                f"nccldoctor: {SOURCE} not compiled, the parser runs in Python: {detail}"
            )
            return
        if version == "editable":  # the install imports the source tree, where it now is
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        build_data["force_include"][str(built)] = str(built.relative_to(self.root))
