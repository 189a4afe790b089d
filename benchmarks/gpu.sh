#!/usr/bin/env bash
# GPU tests + benchmarks in one command, on a machine with CUDA, CuPy, NumPy,
# PyArrow and pandas (no pyspark, Java or cuDF needed). Installs nothing; the
# source tree goes on PYTHONPATH. Results land in $1 (default below).
#   bash benchmarks/gpu.sh [OUT_DIR] [STEPS]
# STEPS, comma-separated (default all): tests, check, tasks, floors, profile, time, time10m, operators.
# A device call is 10 minutes at most; on an H200 (2026-11-28) tests took 75 s, check 60 s,
# tasks 16 s, floors 47 s, profile ~60 s, time 190 s (9 cases), time10m ~330 s (4 cases), operators ~6 min.
# So: "tests,check,tasks,floors,profile,time" in one call, "time10m" in a second, "operators" in a third.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
out=${1:-benchmarks/results/operators-gpu}
steps=",${2:-tests,check,tasks,floors,profile,time,time10m,operators},"
want() { [[ $steps == *",$1,"* ]]; }
mkdir -p "$out"
# the interpreter that has CuPy (GPU images often have python3 only); PYTHON=... to pick another
py=${PYTHON:-$(command -v python3 || command -v python)}
python() { "$py" "$@"; }
export PYTHONUNBUFFERED=1
"$py" - <<'PY'
import cupy
assert cupy.is_available(), "no usable GPU"
p = cupy.cuda.runtime.getDeviceProperties(0)
print("GPU:", p["name"].decode(), "| CuPy", cupy.__version__)
PY
status=0
# 1. the operator tests' GPU parametrisation, when pytest + hypothesis exist here
if ! want tests; then :
elif python -c "import pytest, hypothesis" 2>/dev/null; then
  # (test_kafkawire imports test-only codecs, lz4 among them, that a GPU image lacks; it has no GPU test)
  # pytest-xdist, where installed, spreads the test bodies over processes sharing the one GPU
  par=()
  if python -c "import xdist" 2>/dev/null; then par=(-n "$(( $(nproc) < 8 ? $(nproc) : 8 ))"); fi
  python -m pytest -q -p no:cacheprovider -m gpu "${par[@]}" tests \
    --ignore=tests/test_kafkawire.py 2>&1 | tee "$out/pytest-gpu.txt" || status=1
else
  echo "pytest/hypothesis not installed: skipping the pytest GPU run (gpu_check below still compares CPU vs GPU)" \
    | tee "$out/pytest-gpu.txt"
fi
# 2. CPU vs GPU on the same random inputs, every operator (no pytest needed)
want check && { python benchmarks/gpu_check.py 2>&1 | tee "$out/gpu_check.txt" || status=1; }
# 3. Spark's task functions on the GPU (no JVM): plans built here where pyspark is installed, else
#    pickled on another machine (python benchmarks/gpu_spark_tasks.py --save-plans F) and named in GPUWM_PLANS
#    (each --time case warms up at its size first; 1 M rows: 3 batches, 10 M rows: 2, the one-vnode cases)
if [ -n "${GPUWM_PLANS:-}" ]; then plans=(--plans "$GPUWM_PLANS")
elif python -c "import pyspark" 2>/dev/null; then plans=()
else plans=(none); fi
if [ "${plans[*]}" = none ]; then
  echo "no pyspark and no GPUWM_PLANS: skipping Spark's task functions on the GPU" | tee "$out/spark_tasks.txt"
else
  tasks() { python benchmarks/gpu_spark_tasks.py "${plans[@]}" "$@"; }
  want tasks && { tasks 2>&1 | tee "$out/spark_tasks.txt" || status=1; }
  want time && { tasks --time --per 1000000 --nbatches 3 --out "$out/tasks_1m.json" 2>&1 \
    | tee "$out/tasks_1m.txt" || status=1; }
  want time10m && { tasks --time --per 10000000 --nbatches 2 --cases window-1,tumble-1,session-1,sort-1 \
    --out "$out/tasks_10m.json" 2>&1 | tee "$out/tasks_10m.txt" || status=1; }
fi
# 4. the floors (pageable/pinned transfers, device copy) and every operator's fraction of its floor,
#    device-resident and with host Arrow in/out, and the on-batch filter against this machine's CPU (#17)
want floors && { python benchmarks/gpu_floors.py --backend gpu --out "$out/floors" 2>&1 | tee "$out/floors.txt" \
  || status=1; }
# 4b. where each resident operator's time goes: the device's busy time against the call's wall time,
#     per kernel (torch's profiler, CUPTI, where the image has torch), and the host's Python (cProfile)
want profile && { python benchmarks/gpu_profile.py --out "$out/profile" 2>&1 | tee "$out/profile.txt" || status=1; }
# 5. operator benchmarks on the GPU backend, and on the CPU of the same machine
if want operators; then
python benchmarks/bench_operators.py --backend gpu --out "$out" 2>&1 | tee "$out/bench.txt" || status=1
#    (the CPU at 10 M rows only: its 100 M-row sweep alone outlasts a 10-minute slot)
python benchmarks/bench_operators.py --backend cpu --sizes "" --out "$out/cpu-same-machine" 2>&1 \
  | tee "$out/bench-cpu.txt" || status=1
fi
exit $status
