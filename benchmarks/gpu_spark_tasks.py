"""Spark's task functions on a real GPU, with no JVM: the same in-process
replay as ``tests/test_runtime.py`` (one task per batch, or a filter task per
input partition + a task per vnode + the sort's range merge; the executor's
memory dropped every other batch so state comes back from the checkpoint),
with the plan's backend ``gpu`` and the real per-task device choice
(``gpuwm.spark.device.use_task_gpu``). Each query's output must equal the
CPU operators' over the same batches. Exit status 0 only if all four match.

The plans are built with pyspark (the schema is Spark's). A GPU machine
without pyspark runs plans pickled elsewhere (they hold only Python and
PyArrow objects):

    python benchmarks/gpu_spark_tasks.py --save-plans plans.pkl   # where pyspark is
    PYTHONPATH=. python benchmarks/gpu_spark_tasks.py --plans plans.pkl   # on the GPU machine
"""

from __future__ import annotations

import argparse
import pickle
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gpuwm  # noqa: E402
from gpuwm.spark import store  # noqa: E402
from tests.runtime_replay import batches, mismatch, pipeline, run_operators, run_tasks  # noqa: E402

CASES = [(op, vnodes) for op in ("window", "sort", "chain") for vnodes in (1, 3)]
ROOT = "/@gpuwm-plan-root@"  # replaced by a fresh directory per run


def build_plans() -> dict:
    return {f"{op}-{v}": pipeline(ROOT, op, "gpu", v)._plan() for op, v in CASES}


def relocate(plan, root: str):
    from dataclasses import replace

    return replace(plan, checkpoint=plan.checkpoint.replace(ROOT, root),
                   sink=replace(plan.sink, path=plan.sink.path.replace(ROOT, root)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plans", help="pickled plans from --save-plans (else built here, with pyspark)")
    ap.add_argument("--save-plans", help="write the plans to this file and stop")
    args = ap.parse_args()
    if args.save_plans:
        Path(args.save_plans).write_bytes(pickle.dumps(build_plans()))
        print(f"wrote {len(CASES)} plans to {args.save_plans}")
        return 0
    if not gpuwm.gpu_available():
        print("gpu_spark_tasks: no usable GPU (cupy.is_available() is False)")
        return 2
    plans = pickle.loads(Path(args.plans).read_bytes()) if args.plans else build_plans()
    data = batches()
    bad = 0
    for op, vnodes in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            plan = relocate(plans[f"{op}-{vnodes}"], tmp)
            assert plan.backend == "gpu"
            store._CACHE.clear()
            t0 = time.perf_counter()
            got, nparts = run_tasks(plan, data)
            took = time.perf_counter() - t0
            held = sorted({o._backend.name for _, o in store._CACHE.values()})
            why = mismatch(op, vnodes, got, nparts, run_operators(op, data))
        bad += why is not None
        rows = sum(g.num_rows for g in got if g is not None)
        print(f"{op}, vnodes={vnodes}: {'identical' if why is None else 'MISMATCH: ' + why} "
              f"({len(data)} batches, {rows:,} rows out, {took:.2f} s; operators held on {held})")
    print(f"gpu_spark_tasks: {len(CASES) - bad} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
