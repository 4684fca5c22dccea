"""Time `nccldoctor preflight --json` against a bare `python -c "import psutil, typer, rich"`.

Both run as fresh processes, interleaved, in the same run, so machine load affects both alike;
the medians' ratio is printed (target: at most 2.0). Also checks, through `-X importtime`, that
preflight never imports torch. Exit 0 when both hold, 1 otherwise.

    python bench/preflight.py [--repeats 9]
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_RATIO = 2.0
PREFLIGHT = [sys.executable, "-m", "nccldoctor", "preflight", "--json"]
BASELINE = [sys.executable, "-c", "import psutil, typer, rich"]


def _env() -> dict[str, str]:
    """This checkout first on the path, so the bench measures it and not an installed copy."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


def compile_checkout() -> None:
    """Write the checkout's bytecode, as `pip install` does for an installed package: with
    PYTHONDONTWRITEBYTECODE set, every start would otherwise measure Python's compiler."""
    for package in ("nccldoctor", "checks"):
        compileall.compile_dir(REPO / package, quiet=1)


def _run(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, timeout=120, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr.decode()}")
    return elapsed


def imported_modules(env: dict[str, str]) -> set[str]:
    """Every module `nccldoctor preflight --json` imports, from Python's own -X importtime log."""
    cmd = [sys.executable, "-X", "importtime", *PREFLIGHT[1:]]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)
    return {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    } - {"imported package"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    env = _env()
    compile_checkout()
    _run(PREFLIGHT, env), _run(BASELINE, env)  # warm the page cache and the .pyc files
    preflight, baseline = [], []
    for _ in range(args.repeats):
        preflight.append(_run(PREFLIGHT, env))
        baseline.append(_run(BASELINE, env))
    p, b = statistics.median(preflight), statistics.median(baseline)
    ratio = p / b
    torch = sorted(m for m in imported_modules(env) if m == "torch" or m.startswith("torch."))
    print(f"preflight --json   median {p:.3f} s  ({args.repeats} runs)")
    print(f"import psutil, typer, rich median {b:.3f} s")
    print(f"ratio {ratio:.2f} (target <= {TARGET_RATIO})")
    print(f"torch imported: {'yes: ' + ', '.join(torch[:3]) if torch else 'no'}")
    return 0 if ratio <= TARGET_RATIO and not torch else 1


if __name__ == "__main__":
    sys.exit(main())
