#!/usr/bin/env bash
# nccldoctor's NCCL paths run once on this machine, everything they printed kept in ONE archive:
#   bash scripts/gpu-verify.sh OUTDIR [--cpu] [--budget-s S]
# leaves OUTDIR/gpu-verify-gpu.tar.gz (CUDA here) or OUTDIR/gpu-verify-cpu.tar.gz (gloo, no NVML:
# the dry run tests/test_gpu_verify.py runs). What each step does: scripts/gpu_verify.py.
# It installs nothing: nccldoctor runs from this checkout (PYTHONPATH) on the Python that has
# torch, psutil, nvidia-ml-py, typer, rich and jinja2, as the lent GPU machine's image does.
#
# On a task lent the H200 (the device tool's `status` says can_start_another true), one call:
#   run(command="bash scripts/gpu-verify.sh $OUT 2>&1", timeout_s=420)
# (no carry: the checkout travels as it is). The whole run keeps to --budget-s 400 and writes
# the archive before it; about 4 of the 15 device minutes stay for one rerun. Then:
#   mkdir -p tests/fixtures/gpu && cp <files_at>/gpu-verify-gpu.tar.gz tests/fixtures/gpu/
# add tests/fixtures/gpu/README.md (machine, driver, torch and NCCL versions: the archive's
# gpu-verify/machine/), and run python -m pytest tests/test_gpu_verify.py: its replay tests then
# read that archive, the GPU-only ones included.
set -euo pipefail
out=${1:?usage: scripts/gpu-verify.sh OUTDIR [--cpu] [--budget-s S]}
shift
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
# found, not imported: importing torch twice would cost seconds of the run
"$python" - <<'PY' || exit 2
import importlib.util, sys
missing = [m for m in ("torch", "psutil", "pynvml", "typer", "rich", "jinja2")
           if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"gpu-verify: {sys.executable} lacks {', '.join(missing)}")
PY
exec "$python" "$repo/scripts/gpu_verify.py" "$out" "$@"
