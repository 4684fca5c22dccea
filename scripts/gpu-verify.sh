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
# no carry: the checkout travels as it is, and the machine's python3 has every package. The
# script keeps to its --budget-s (360 s: every step's deadline inside it, SIGTERM then SIGKILL to
# one that overruns) and writes the archive before the call's limit; the steps it expects to
# take about 3 minutes. Where a rerun is needed, the same call again while `status` leaves
# budget_left_s > 480 (a machine's start costs a minute or two). Then:
#   mkdir -p tests/fixtures/gpu && cp <files_at>/gpu-verify-gpu.tar.gz tests/fixtures/gpu/
# add tests/fixtures/gpu/README.md (the machine, driver, torch and NCCL versions: the archive's
# gpu-verify/machine/ and preflight/preflight.json; the manifest's "numbers": busbw against the
# TCP probe, the check's wall time against the bare job's), and run
# python -m pytest tests/test_gpu_verify.py: its replay tests then read that archive, the
# GPU-only ones included, and every mismatch they find is fixed in the code, not the fixture.
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
