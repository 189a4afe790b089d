"""Operator benchmarks without Spark: watermark filter, range-drain sort,
tumbling/hopping/session window aggregation, and the sort drain's cost vs buffer size.

Run:  python benchmarks/bench_operators.py [--backend cpu|gpu] [--rows 10000000] [--sizes 1e6,1e8] [--out DIR]
      [--only session]

Every figure is the median of ``--runs`` timed runs after one warm-up, on
fresh random out-of-order input per run, with the spread (min..max) beside
it, and the memory-copy floor measured in the same run (numpy copy on CPU,
cupy copy on GPU, synchronised). Each benchmarked result is checked once per
run against an independent computation; a wrong answer aborts the run.
Every operator is also timed at the chunk sizes of ``--sizes`` (default
1 M and 100 M rows; a size is skipped where the operator's measured peak
memory per row would not fit). Writes ``results.json`` and ``results.md``
(and ``drain_flat.png``, ``sizes.png`` when matplotlib is installed) to
``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gpuwm  # noqa: E402


def sync(backend) -> None:
    if backend.is_gpu:
        backend.xp.cuda.Device().synchronize()  # the current device: every queued kernel has finished


def timed(backend, fn, runs: int, setup=None):
    """Median/min/max seconds of fn(setup()) over runs, after one warm-up."""
    times = []
    result = None
    for i in range(runs + 2):  # two warm-ups: the memory pools reach steady state
        result = None  # free the previous output first, as a stream would
        arg = setup() if setup else None
        sync(backend)
        t0 = time.perf_counter()
        result = fn(arg)
        sync(backend)
        if i > 1:
            times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times), result


def events(n: int, seed: int, keys: int = 100_000, disorder: int = 2_000, per_ms: int = 100) -> pa.Table:
    """n events, ``per_ms`` per millisecond of event time (100 k/s), each
    delayed by up to ``disorder`` ms, over ``keys`` random keys."""
    rng = np.random.default_rng(seed)
    ts = np.arange(n, dtype=np.int64) // per_ms + 1_700_000_000_000 - rng.integers(0, disorder, n)
    return pa.table({
        "ts": pa.array(ts, pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
        "k": rng.integers(0, keys, n),
        "v": rng.random(n),
        "split": rng.integers(0, 8, n).astype(np.int32),
    })


def backend_free_bytes(backend) -> int:
    """Memory the benchmark may use: free device memory on the GPU, else
    available host memory."""
    if backend.is_gpu:
        import cupy

        return int(cupy.cuda.runtime.memGetInfo()[0])
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def copy_floor(backend, n: int, runs: int) -> float:
    """Rows/s of copying one int64 column of n rows (read + write)."""
    xp = backend.xp
    a = xp.arange(n, dtype=xp.int64)
    med, _, _, _ = timed(backend, lambda _: a.copy(), runs)
    return n / med


def transfer_floor(backend, n: int, runs: int) -> float | None:
    """GPU only: rows/s of one int64 column host -> device -> host (pageable
    NumPy memory, as the operators' Arrow input and output are): the floor
    of an operator that takes and returns host Arrow tables."""
    if not backend.is_gpu:
        return None
    host = np.arange(n, dtype=np.int64)
    med, _, _, _ = timed(backend, lambda _: backend.to_numpy(backend.asarray(host)), runs)
    return n / med


def feed(backend, t: pa.Table, resident: bool):
    """What an operator is given: the host Arrow table, or (``resident``) the
    same rows already on the backend's device as a Frame, moved untimed."""
    return gpuwm.frame.Frame.from_arrow(t, backend) if resident else t


def bench_filter(backend, n, runs, emit, split, resident=False):
    def setup():
        t = events(n, seed=int(time.time_ns() % 2**31))
        if not split:
            t = t.select(["ts", "k", "v"])
        f = gpuwm.WatermarkFilter("ts", delay="1 second", profile="risingwave", emit=emit,
                                  split="split" if split else None, backend=backend.name)
        f.process(t.slice(0, 1000))  # a watermark exists: late rows are real
        f.late_rows = 0  # count only the timed chunk's late rows
        return f, t, feed(backend, t, resident)

    med, lo, hi, (f, t, out) = timed(backend, lambda a: (a[0], a[1], a[0].process(a[2])), runs, setup)
    # check: on-batch single split = plain numpy rule against the prior watermark
    if emit == "on-batch" and not split:
        ts = t.column("ts").cast(pa.int64()).to_numpy()
        w0 = int(ts[:1000].max()) - 1000
        assert out.num_rows == int(np.count_nonzero(ts >= w0)), "filter result is wrong"
    else:
        assert out.num_rows + f.late_rows == n, "filter lost or invented rows"
    return med, lo, hi, {"late_rows": int(f.late_rows)}


def bench_sort(backend, n, runs, resident=False):
    def setup():
        t = events(n, seed=int(time.time_ns() % 2**31))
        s = gpuwm.StreamSort("ts", key=["k"], backend=backend.name)
        ts = t.column("ts").cast(pa.int64()).to_numpy()
        return s, ts, int(ts.max()) - 2_000, feed(backend, t, resident)  # release all but the last ~2 s

    def run(a):  # the drain's bound comes with the input (a watermark): not timed
        s, ts, w, x = a
        s.push(x)
        return s, ts, w, s.drain(w)

    med, lo, hi, (s, ts, w, out) = timed(backend, run, runs, setup)
    o = out.column("ts").cast(pa.int64()).to_numpy()
    assert out.num_rows == int(np.count_nonzero(ts < w)) and bool(np.all(o[1:] >= o[:-1])), "sort result is wrong"
    return med, lo, hi, {"released": int(out.num_rows), "buffered": int(s.buffered_rows)}


def bench_window(backend, n, runs, hop, resident=False):
    def setup():
        t = events(n, seed=int(time.time_ns() % 2**31))
        win = gpuwm.Hop("ts", size="10 seconds", slide="5 seconds") if hop else gpuwm.Tumble("ts", "10 seconds")
        a = gpuwm.WindowAggregate(win, by=["k"], aggs={"n": ("*", "count"), "m": ("v", "max")},
                                  backend=backend.name)
        return a, t, feed(backend, t, resident), int(pc.max(t.column("ts").cast(pa.int64())).as_py()) + 10_000

    def run(a):  # the drain's bound (closing every window) comes with the input: not timed
        agg, t, x, w = a
        agg.push(x)
        return agg, t, agg.drain(w)

    med, lo, hi, (agg, t, out) = timed(backend, run, runs, setup)
    counts = out.column("n").to_numpy()
    assert int(counts.sum()) == n * (2 if hop else 1), "window counts are wrong"
    if not hop:
        ts = t.column("ts").cast(pa.int64()).to_numpy()
        if n <= 10_000_000:  # pandas' groupby as the reference
            df = t.to_pandas()
            df["w"] = ts - ts % 10_000
            ref = df.groupby(["w", "k"], sort=True)["v"].max().to_numpy()
        else:  # too big for pandas here: a dense (window, key) grid and np.maximum.at
            w = (ts - ts % 10_000 - ts.min() + ts.min() % 10_000) // 10_000
            k = t.column("k").to_numpy()
            grid = np.full((int(w.max()) + 1) * 100_000, -np.inf)
            np.maximum.at(grid, w * 100_000 + k, t.column("v").to_numpy())
            ref = grid[np.isfinite(grid)]
        assert np.array_equal(ref, out.column("m").to_numpy()), "window max is wrong"
    return med, lo, hi, {"groups": int(out.num_rows)}


def bench_session(backend, n, runs, gap_ms=2_000, resident=False):
    """Session windows (gap 2 s) over 100 k keys: each key sees an event
    about every second, so most rows extend a session and a key has a new
    one every ~7 s."""
    def setup():
        t = events(n, seed=int(time.time_ns() % 2**31))
        a = gpuwm.WindowAggregate(gpuwm.Session("ts", timedelta(milliseconds=gap_ms)), by=["k"],
                                  aggs={"n": ("*", "count"), "m": ("v", "max")}, backend=backend.name)
        w = int(pc.max(t.column("ts").cast(pa.int64())).as_py()) + 10 * gap_ms  # close every session
        return a, t, feed(backend, t, resident), w

    def run(a):  # the drain's bound comes with the input: not timed
        agg, t, x, w = a
        agg.push(x)
        return agg, t, agg.drain(w)

    med, lo, hi, (agg, t, out) = timed(backend, run, runs, setup)
    # reference: NumPy's lexsort by (key, ts); a new session where the gap to the key's previous row exceeds gap_ms
    ts = t.column("ts").cast(pa.int64()).to_numpy()
    k = t.column("k").to_numpy()
    o = np.lexsort((ts, k))
    sk, st = k[o], ts[o]
    first = np.ones(n, bool)
    first[1:] = (sk[1:] != sk[:-1]) | (st[1:] > st[:-1] + gap_ms)
    starts = np.flatnonzero(first)
    ref_n = np.diff(np.append(starts, n))
    ref_m = np.maximum.reduceat(t.column("v").to_numpy()[o], starts)
    # gpuwm's output is ordered by (start, key); the reference by (key, start)
    got = out.sort_by([("k", "ascending"), ("window_start", "ascending")])
    assert got.num_rows == starts.shape[0], "session count is wrong"
    assert np.array_equal(got.column("n").to_numpy(), ref_n), "session sizes are wrong"
    assert np.array_equal(got.column("m").to_numpy(), ref_m), "session max is wrong"
    return med, lo, hi, {"groups": int(out.num_rows)}


def bench_drain_flat(backend, sizes, release, runs):
    """Drain time of `release` rows while `size` rows stay buffered."""
    rows = []
    rng = np.random.default_rng(1)
    for size in sizes:
        times = []
        for r in range(runs + 1):
            s = gpuwm.StreamSort("t", backend=backend.name)
            far = rng.integers(10**12, 2 * 10**12, size)  # stays buffered
            near = rng.integers(0, 10**9, release)  # released
            s.push(pa.table({"t": np.concatenate([far, near])}))
            sync(backend)
            t0 = time.perf_counter()
            out = s.drain(10**9)
            sync(backend)
            if r:
                times.append(time.perf_counter() - t0)
            assert out.num_rows == release and s.buffered_rows == size
        rows.append({"buffered": size, "released": release, "median_s": statistics.median(times),
                     "min_s": min(times), "max_s": max(times)})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "operators-cpu"))
    ap.add_argument("--sizes", default="1000000,100000000",
                    help="further chunk sizes to time every operator at (besides --rows), where memory allows")
    ap.add_argument("--sweep-runs", type=int, default=3)
    ap.add_argument("--only", default="", help="time only the operators whose name contains this")
    args = ap.parse_args()
    backend = gpuwm.get_backend(args.backend)
    n = args.rows
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    floor = copy_floor(backend, n, args.runs)
    machine = platform.processor() or platform.machine()
    if backend.is_gpu:
        import cupy

        machine = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    results = []

    def record(name, med, lo, hi, extra, target=None):
        rate = n / med
        row = {"benchmark": name, "rows": n, "median_s": med, "min_s": lo, "max_s": hi,
               "rows_per_s": rate, "copy_floor_rows_per_s": floor, "fraction_of_copy": rate / floor,
               "target_rows_per_s": target, **extra}
        results.append(row)
        tgt = f"  target {target / 1e6:.0f} M/s {'OK' if target is None or rate >= target else 'MISSED'}" \
            if target else ""
        print(f"{name:34s} {rate / 1e6:8.1f} M rows/s  (median {med * 1e3:7.1f} ms, "
              f"{lo * 1e3:.1f}..{hi * 1e3:.1f})  {100 * rate / floor:5.1f}% of copy{tgt}", flush=True)

    print(f"backend={backend.name} device={machine} rows={n:,} copy floor {floor / 1e6:.0f} M rows/s (int64)")
    xfer = transfer_floor(backend, n, args.runs)
    if xfer:
        print(f"host -> device -> host floor {xfer / 1e6:.0f} M rows/s (one int64 column, pageable memory)")
    # name, run(size, runs), target, peak bytes per row (the process's peak RSS / rows, measured at 10 M)
    ops = [("filter on-batch, 1 split", lambda m, r: bench_filter(backend, m, r, "on-batch", False), 150e6, 100),
           ("filter on-batch, 8 splits", lambda m, r: bench_filter(backend, m, r, "on-batch", True), None, 110),
           ("filter on-event, 1 split", lambda m, r: bench_filter(backend, m, r, "on-event", False), None, 100),
           ("filter on-event, 8 splits", lambda m, r: bench_filter(backend, m, r, "on-event", True), None, 100),
           ("sort push+drain (ts, k)", lambda m, r: bench_sort(backend, m, r), 15e6, 110),
           ("tumble 10s, 100k keys, push+drain", lambda m, r: bench_window(backend, m, r, False), 15e6, 140),
           ("hop 10s/5s, 100k keys, push+drain", lambda m, r: bench_window(backend, m, r, True), None, 160),
           ("session 2s, 100k keys, push+drain", lambda m, r: bench_session(backend, m, r), None, 120)]
    ops = [o for o in ops if args.only in o[0]]
    for name, run, target, _ in ops:
        record(name, *run(n, args.runs), target=target)
    sweep = [{"benchmark": r["benchmark"], "rows": n, "rows_per_s": r["rows_per_s"], "median_s": r["median_s"],
              "min_s": r["min_s"], "max_s": r["max_s"]} for r in results]
    free = backend_free_bytes(backend)
    for m in sorted(int(float(x)) for x in args.sizes.split(",") if x.strip()):
        if m == n:
            continue
        for name, run, _, per_row in ops:
            if m * per_row > 0.8 * free:
                print(f"{name:34s} at {m:>11,} rows: skipped, needs ~{m * per_row / 2**30:.0f} GiB "
                      f"of {free / 2**30:.0f} free", flush=True)
                continue
            med, lo, hi, _ = run(m, args.sweep_runs)
            sweep.append({"benchmark": name, "rows": m, "rows_per_s": m / med, "median_s": med, "min_s": lo, "max_s": hi})
            print(f"{name:34s} at {m:>11,} rows: {m / med / 1e6:8.1f} M rows/s (median {med * 1e3:.0f} ms, "
                  f"{lo * 1e3:.0f}..{hi * 1e3:.0f})", flush=True)
    sizes = [1_000, 10_000, 100_000, 1_000_000, 10_000_000]
    flat = bench_drain_flat(backend, sizes, release=100_000, runs=args.runs)
    for r in flat:
        print(f"sort drain of 100k rows with {r['buffered']:>10,} buffered: {r['median_s'] * 1e3:7.2f} ms "
              f"({r['min_s'] * 1e3:.2f}..{r['max_s'] * 1e3:.2f})")
    meta = {"backend": backend.name, "device": machine, "python": platform.python_version(),
            "numpy": np.__version__, "pyarrow": pa.__version__, "date": time.strftime("%Y-%m-%d"),
            "copy_floor_rows_per_s": floor, "transfer_floor_rows_per_s": xfer}
    (out / "results.json").write_text(json.dumps({"meta": meta, "operators": results, "drain_flat": flat,
                                                  "sizes": sweep}, indent=2))
    md = [f"# Operator benchmarks ({backend.name}, {machine}, {meta['date']})", "",
          f"{n:,} rows per chunk; median of {args.runs} runs (min..max); copy floor "
          f"{floor / 1e6:.0f} M rows/s (one int64 column)"
          + (f"; host -> device -> host {xfer / 1e6:.0f} M rows/s (one int64 column)." if xfer else "."), "",
          "| benchmark | M rows/s | median ms | spread ms | % of copy | target |", "|---|---|---|---|---|---|"]
    for r in results:
        tgt = "" if not r["target_rows_per_s"] else f"{r['target_rows_per_s'] / 1e6:.0f} M/s"
        md.append(f"| {r['benchmark']} | {r['rows_per_s'] / 1e6:.1f} | {r['median_s'] * 1e3:.1f} | "
                  f"{r['min_s'] * 1e3:.1f}..{r['max_s'] * 1e3:.1f} | {100 * r['fraction_of_copy']:.1f} | {tgt} |")
    md += ["", "Sort drain of 100 k released rows vs rows left buffered:", "",
           "| buffered rows | drain ms (median) | spread ms |", "|---|---|---|"]
    md += [f"| {r['buffered']:,} | {r['median_s'] * 1e3:.2f} | {r['min_s'] * 1e3:.2f}..{r['max_s'] * 1e3:.2f} |"
           for r in flat]
    sizes = sorted({r["rows"] for r in sweep})
    md += ["", "Every operator by chunk size (M rows/s, median; sizes other than "
           f"{n:,} use {args.sweep_runs} runs; blank: not enough memory):", "",
           "| benchmark | " + " | ".join(f"{m:,} rows" for m in sizes) + " |", "|---" * (len(sizes) + 1) + "|"]
    for name, *_ in ops:
        by = {r["rows"]: r for r in sweep if r["benchmark"] == name}
        md.append(f"| {name} | " + " | ".join(f"{by[m]['rows_per_s'] / 1e6:.1f}" if m in by else "" for m in sizes) + " |")
    (out / "results.md").write_text("\n".join(md) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot([r["buffered"] for r in flat], [r["median_s"] * 1e3 for r in flat], "o-")
        ax.set_xscale("log")
        ax.set_ylim(bottom=0)
        ax.set_xlabel("rows left buffered")
        ax.set_ylabel("drain time of 100 k rows (ms)")
        ax.set_title(f"StreamSort drain cost vs buffer size ({backend.name})")
        fig.tight_layout()
        fig.savefig(out / "drain_flat.png", dpi=110)
        fig, ax = plt.subplots(figsize=(9, 4))
        for name, *_ in ops:
            r = sorted((x for x in sweep if x["benchmark"] == name), key=lambda x: x["rows"])
            ax.plot([x["rows"] for x in r], [x["rows_per_s"] / 1e6 for x in r], "o-", label=name)
        ax.axhline(floor / 1e6 / 10, color="grey", ls=":", lw=1, label="10% of the copy floor")
        ax.set(xscale="log", yscale="log", xlabel="rows per chunk", ylabel="M rows/s",
               title=f"gpuwm operators by chunk size ({backend.name})")
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        fig.tight_layout()
        fig.savefig(out / "sizes.png", dpi=110)
    except ImportError:
        pass
    print(f"wrote {out}/results.json, results.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
