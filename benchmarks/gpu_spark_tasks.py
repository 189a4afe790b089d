"""Spark's task functions on a real GPU, with no JVM: the same in-process
replay as ``tests/test_runtime.py`` (one task per batch, or a filter task per
input partition + a task per vnode + the sort's range merge; the executor's
memory dropped every other batch so state comes back from the checkpoint),
with the plan's backend ``gpu`` and the real per-task device choice
(``gpuwm.spark.executor.device.use_task_gpu``). Each query's output must equal the
CPU operators' over the same batches. Exit status 0 only if all four match.

The plans are built with pyspark (the schema is Spark's). A GPU machine
without pyspark runs plans pickled elsewhere (they hold only Python and
PyArrow objects):

    python benchmarks/gpu_spark_tasks.py --save-plans plans.pkl   # where pyspark is
    PYTHONPATH=. python benchmarks/gpu_spark_tasks.py --plans plans.pkl   # on the GPU machine

``--time`` times instead (#17): the same task functions per batch on the GPU
and on the CPU backend of the same machine, over larger batches
(``--per`` rows, ``--nbatches`` of them) written to Parquet first and read
back inside the timing with PyArrow (decoded on the host by its thread
pool), as a task's direct read does; the output must still match. Each
case runs once on small batches first, untimed, so that CuPy's kernel
compilation is not counted (a first case would otherwise carry it).
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
from gpuwm.spark.storage import store  # noqa: E402
from tests.runtime_replay import batches, mismatch, pipeline, run_operators, run_tasks  # noqa: E402

CASES = [(op, vnodes) for op in ("window", "sort", "chain") for vnodes in (1, 3)]
ROOT = "/@gpuwm-plan-root@"  # replaced by a fresh directory per run


def build_plans() -> dict:
    return {f"{op}-{v}": pipeline(ROOT, op, "gpu", v)._plan() for op, v in CASES}


def relocate(plan, root: str):
    from dataclasses import replace

    from gpuwm.spark.storage.checkpoint import Checkpoint, Location

    loc = plan.checkpoint.loc
    return replace(plan, checkpoint=Checkpoint(Location(loc.uri.replace(ROOT, root), loc.options)),
                   sink=replace(plan.sink, path=plan.sink.path.replace(ROOT, root)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plans", help="pickled plans from --save-plans (else built here, with pyspark)")
    ap.add_argument("--save-plans", help="write the plans to this file and stop")
    ap.add_argument("--time", action="store_true", help="time GPU vs CPU per batch (see the module doc)")
    ap.add_argument("--per", type=int, default=1_000_000, help="--time: rows a batch")
    ap.add_argument("--nbatches", type=int, default=5, help="--time: batches")
    ap.add_argument("--profile", help="--time: only this case (e.g. sort-1), its GPU run under cProfile")
    args = ap.parse_args()
    if args.save_plans:
        Path(args.save_plans).write_bytes(pickle.dumps(build_plans()))
        print(f"wrote {len(CASES)} plans to {args.save_plans}")
        return 0
    if not gpuwm.gpu_available():
        print("gpu_spark_tasks: no usable GPU (cupy.is_available() is False)")
        return 2
    plans = pickle.loads(Path(args.plans).read_bytes()) if args.plans else build_plans()
    if args.time:
        return time_tasks(plans, args.per, args.nbatches, args.profile)
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
            held = sorted({entry[2]._backend.name for entry in store._CACHE.values()})
            why = mismatch(op, vnodes, got, nparts, run_operators(op, data))
        bad += why is not None
        rows = sum(g.num_rows for g in got if g is not None)
        print(f"{op}, vnodes={vnodes}: {'identical' if why is None else 'MISMATCH: ' + why} "
              f"({len(data)} batches, {rows:,} rows out, {took:.2f} s; operators held on {held})")
    print(f"gpu_spark_tasks: {len(CASES) - bad} passed, {bad} failed")
    return 1 if bad else 0


def time_tasks(plans: dict, per: int, nbatches: int, profile: str | None = None) -> int:
    """Per-batch time of Spark's task functions, GPU vs CPU backend, reading
    each batch's partitions from Parquet inside the timing. ``profile``
    (a case, e.g. ``sort-1``): that case alone, its GPU run under cProfile."""
    import cProfile
    import pstats
    from contextlib import nullcontext
    from dataclasses import replace

    import pyarrow.parquet as pq

    data = batches(nbatches, per)
    warm = batches(3, 2_000)
    bad = 0
    with tempfile.TemporaryDirectory() as src:
        files = []
        for i, parts in enumerate(data):
            files.append([])
            for j, t in enumerate(parts):
                files[-1].append(f"{src}/b{i}-p{j}.parquet")
                pq.write_table(t, files[-1][-1])
        print(f"{nbatches} batches of {per:,} rows ({len(files[0])} partitions each), Parquet read inside the timing")
        for op, vnodes in [c for c in CASES if profile in (None, f"{c[0]}-{c[1]}")]:
            took = {}
            for name in ("gpu", "cpu"):
                base = replace(plans[f"{op}-{vnodes}"], backend=name)
                with tempfile.TemporaryDirectory() as tmp:  # untimed: CuPy compiles its kernels on first use
                    store._CACHE.clear()
                    run_tasks(relocate(base, tmp), warm)
                with tempfile.TemporaryDirectory() as tmp:
                    plan = relocate(base, tmp)
                    store._CACHE.clear()
                    prof = cProfile.Profile() if profile and name == "gpu" else None
                    t0 = time.perf_counter()
                    with prof or nullcontext():
                        got, nparts = run_tasks(plan, [[pq.read_table(f) for f in b] for b in files])
                    took[name] = (time.perf_counter() - t0) / nbatches
                    if prof:
                        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
                    if name == "gpu":
                        why = mismatch(op, vnodes, got, nparts, run_operators(op, data))
                        bad += why is not None
            print(f"{op}, vnodes={vnodes}: GPU {took['gpu'] * 1e3:.1f} ms/batch, CPU {took['cpu'] * 1e3:.1f} "
                  f"ms/batch: {took['cpu'] / took['gpu']:.2f}x (target >= 5x)"
                  f"{'' if why is None else '  MISMATCH: ' + why}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
