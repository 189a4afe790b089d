"""Spark's task functions on a real GPU, with no JVM: the same in-process
replay as ``tests/test_runtime.py`` (one task per batch, or a filter task per
input partition + a task per vnode + the sort's range merge; the executor's
memory dropped every other batch so state comes back from the checkpoint),
with the plan's backend ``gpu`` and the real per-task device choice
(``gpuwm.spark.executor.device.use_task_gpu``). Each query's output must equal the
CPU operators' over the same batches. Exit status 0 only if all of them match.

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
case runs once untimed on two batches of the timed size (CuPy compiles
its kernels and sizes its pools then), then twice timed: plain, and with
each step's time (Parquet decode, host <-> device copies, Arrow <-> Frame,
state load and save, sink write, the operators' own work) charged to it
with the device synchronised at each step's edges (#51). ``--cpu-only``
runs the timing on the CPU backend alone, so this script is checked
where there is no GPU.
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

CASES = [(op, vnodes) for op in ("window", "tumble", "session", "sort", "dedup", "chain") for vnodes in (1, 3)]
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
    ap.add_argument("--cases", help="--time: only these cases, comma-separated (e.g. window-1,sort-3)")
    ap.add_argument("--out", help="--time: also write the figures to this JSON file")
    ap.add_argument("--cpu-only", action="store_true",
                    help="--time on the CPU backend alone (checks this script where there is no GPU)")
    args = ap.parse_args()
    if args.save_plans:
        Path(args.save_plans).write_bytes(pickle.dumps(build_plans()))
        print(f"wrote {len(CASES)} plans to {args.save_plans}")
        return 0
    plans = pickle.loads(Path(args.plans).read_bytes()) if args.plans else build_plans()
    cases = args.cases.split(",") if args.cases else None
    if args.time and args.cpu_only:
        return time_tasks(plans, args.per, args.nbatches, None, cases, args.out, backends=("cpu",))
    if not gpuwm.gpu_available():
        print("gpu_spark_tasks: no usable GPU (cupy.is_available() is False)")
        return 2
    if args.time:
        return time_tasks(plans, args.per, args.nbatches, args.profile, cases, args.out)
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


class Steps:
    """Exclusive wall time per named step: a step's time excludes the steps
    timed inside it. On the GPU each step synchronises the device at its
    start and end, so queued kernels are charged to the step that queued
    them (this costs some overlap: the untimed total is printed beside)."""

    def __init__(self, backend: str):
        cuda = getattr(gpuwm.backend.get_backend(backend).xp, "cuda", None)  # None: NumPy (the CPU, gpu-sim)
        self.sync = cuda.Device().synchronize if cuda else (lambda: None)
        self.took: dict[str, float] = {}
        self._inner: list[float] = []

    def span(self, step: str):
        from contextlib import contextmanager

        @contextmanager
        def timed():
            self.sync()
            t0 = time.perf_counter()
            self._inner.append(0.0)
            try:
                yield
            finally:
                self.sync()
                took, inner = time.perf_counter() - t0, self._inner.pop()
                self.took[step] = self.took.get(step, 0.0) + took - inner
                if self._inner:
                    self._inner[-1] += took
        return timed()

    def wrap(self, step: str, fn):
        def timed(*a, **k):
            with self.span(step):
                return fn(*a, **k)
        return timed


#: (module or class, attribute, step): what --time charges to each step besides the operators' own work
def _step_points():
    import tests.runtime_replay as replay
    from gpuwm import staging
    from gpuwm.frame import Frame
    from gpuwm.spark.executor import tasks
    from gpuwm.spark.io import sinks
    from gpuwm.spark.storage.checkpoint import Checkpoint

    return [(staging, "upload", "host -> device copy"), (staging, "download", "device -> host copy"),
            (Frame, "from_arrow", "Arrow -> Frame (host side)"), (Frame, "to_arrow", "Frame -> Arrow (host side)"),
            (store, "load_operator", "state load"), (store, "save_operator", "state save"),
            (tasks, "_write_held", "state save"), (Checkpoint, "write_filter", "state save"),
            (tasks, "write_output", "sink write (Parquet)"), (tasks, "write_late", "sink write (Parquet)"),
            (sinks, "write_output", "sink write (Parquet)"),  # the sort's range merge imports it when it runs
            (replay, "commit", "driver commit (replay)"), (replay, "batch_output", "output read back (replay)")]


def _instrument(steps: Steps) -> list:
    """Wrap each step point with ``steps``; the undo list for :func:`_restore`."""
    import tests.runtime_replay as replay

    undo = [(replay, "span", replay.__dict__["span"])]
    replay.span = steps.span
    for owner, name, step in _step_points():
        orig = owner.__dict__[name]
        undo.append((owner, name, orig))
        if isinstance(orig, classmethod):
            setattr(owner, name, classmethod(steps.wrap(step, orig.__func__)))
        else:
            setattr(owner, name, steps.wrap(step, orig))
    return undo


def _restore(undo: list) -> None:
    for owner, name, orig in reversed(undo):
        setattr(owner, name, orig)


REPLAY = ("exchange", "driver commit (replay)", "output read back (replay)")


def time_tasks(plans: dict, per: int, nbatches: int, profile: str | None = None,
               cases: list[str] | None = None, out: str | None = None, backends=("gpu", "cpu")) -> int:
    """Per-batch time of Spark's task functions, GPU vs CPU backend, reading
    each batch's partitions from Parquet inside the timing, per step
    (:class:`Steps`). Each case first runs untimed on two batches of the
    same size (CuPy compiles its kernels and fills its memory pools on first
    use), then twice timed: plain, and step by step. ``profile`` (a case, e.g. ``sort-1``): that case alone, its
    GPU run under cProfile."""
    import cProfile
    import json
    import pstats
    from contextlib import nullcontext
    from dataclasses import replace

    import pyarrow.parquet as pq

    data = batches(nbatches, per)
    bad, results = 0, {}
    wanted = [c for c in CASES if (cases is None or f"{c[0]}-{c[1]}" in cases)
              and profile in (None, f"{c[0]}-{c[1]}")]
    with tempfile.TemporaryDirectory() as src:
        files = []
        for i, parts in enumerate(data):
            files.append([])
            for j, t in enumerate(parts):
                files[-1].append(f"{src}/b{i}-p{j}.parquet")
                pq.write_table(t, files[-1][-1])
        rows_in = sum(t.num_rows for parts in data for t in parts) / nbatches
        print(f"{nbatches} batches of {rows_in:,.0f} rows ({len(files[0])} Parquet partitions each), read inside "
              "the timing; ms per batch", flush=True)
        for op, vnodes in wanted:
            case, took, by_step, why = f"{op}-{vnodes}", {}, {}, None
            for name in backends:
                base = replace(plans[case], backend=name)
                with tempfile.TemporaryDirectory() as tmp:  # untimed, at the timed shape
                    store._CACHE.clear()
                    run_tasks(relocate(base, tmp), data[:2])
                for mode in ("plain", "steps"):
                    with tempfile.TemporaryDirectory() as tmp:
                        plan = relocate(base, tmp)
                        store._CACHE.clear()
                        steps = Steps(name)
                        undo = _instrument(steps) if mode == "steps" else []
                        prof = cProfile.Profile() if profile and name == "gpu" and mode == "plain" else None
                        try:
                            t0 = time.perf_counter()
                            with prof or nullcontext():
                                with steps.span("read (Parquet decode)") if undo else nullcontext():
                                    inputs = [[pq.read_table(f) for f in b] for b in files]
                                got, nparts = run_tasks(plan, inputs)
                            total = time.perf_counter() - t0
                        finally:
                            _restore(undo)
                    if prof:
                        for order in ("tottime", "cumulative"):
                            pstats.Stats(prof).sort_stats(order).print_stats(30)
                    if mode == "plain":
                        took[name] = total / nbatches
                        if name == "gpu":
                            why = mismatch(op, vnodes, got, nparts, run_operators(op, data))
                            bad += why is not None
                    else:
                        st = {k: v / nbatches for k, v in steps.took.items()}
                        st["operators (kernels + Python)"] = total / nbatches - sum(st.values())
                        by_step[name] = st
            task = {n: took[n] - sum(by_step[n].get(k, 0.0) for k in REPLAY) for n in backends}
            results[case] = {"ms_per_batch": {n: took[n] * 1e3 for n in backends},
                             "task_ms_per_batch": {n: task[n] * 1e3 for n in backends},
                             "steps_ms": {n: {k: v * 1e3 for k, v in by_step[n].items()} for n in backends},
                             "rows_per_batch": rows_in, "identical": why is None}
            ratio = f": {task['cpu'] / task['gpu']:.2f}x the CPU (target >= 3x)" if len(backends) == 2 else ""
            print(f"\n{case}: " + ", ".join(f"{n.upper()} {took[n] * 1e3:.1f} ms/batch, task functions "
                                            f"{task[n] * 1e3:.1f}" for n in backends)
                  + ratio + ("" if why is None else "  MISMATCH: " + why), flush=True)
            for k in sorted(set().union(*[by_step[n] for n in backends]),
                            key=lambda k: -by_step[backends[0]].get(k, 0.0)):
                print(f"  {k:32s}" + "".join(f" {n}: {by_step[n].get(k, 0.0) * 1e3:9.2f}" for n in backends))
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps({"per": per, "nbatches": nbatches, "cases": results}, indent=2))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
