"""Per-batch cost as the state grows: fixed input rate, growing watermark delay.

Run:  .venv/bin/python benchmarks/bench_state.py [--skip-spark]

1. Operators (no Spark): 200 k events per batch (1 s of event time, 0.5 s of
   disorder, 100 k keys). For each delay, batches run until the state is in
   steady state, then 12 batches are timed (push + drain with the watermark;
   median and mean: the mean carries the session state's periodic fold).
   Stream sort: delays 0.05 s .. 50 s -> ~10 k .. 10 M buffered rows;
   tumbling 1 s window count/max: delays 0 .. 100 s -> ~0.1 M .. 9 M state rows;
   session windows (gap 1 s) over 50 M keys, so nearly every event opens a
   session: delays 0 .. 50 s -> ~0.2 M .. 10 M open sessions;
   dedup over the same 50 M keys, each held for the delay: 1 .. 50 s ->
   ~0.2 M .. 10 M held keys;
   interval join (left outer) of two such streams over the 50 M keys,
   ``r.ts BETWEEN l.ts AND l.ts + delay``, the watermark the streams' own
   (no delay): the left side holds ``delay`` of rows, 1 .. 50 s -> ~0.2 M
   .. 10 M rows (events per batch: 200 k per input).
   After each batch the state is saved as the Spark runtime saves it (a new
   version, unchanged parts named in the previous one's objects, then the
   commit and its garbage collection), timed apart: on local disk, or with
   ``--store s3`` on an S3 server on loopback (``tests/s3_server.py``:
   S3Proxy, objects on this machine's disk; every request a real HTTP
   round trip through ``pyarrow.fs.S3FileSystem``).
2. Spark local[2] (unless --skip-spark): the same stream as one Parquet file
   per micro-batch; Spark's native ``withWatermark`` + 1 s tumbling
   ``groupBy`` + append next to gpuwm's pipeline (profile spark), and
   gpuwm's stream sort (Spark has none), delays 1 / 10 / 30 s; median
   ``triggerExecution`` of the last 5 batches.

Each timed result is checked: sort output ordered and below the watermark;
on Spark, gpuwm's open state rows must equal native's (same windows kept),
and the sort's written + buffered + late rows must add up to the input. Writes
``results/state-scaling/results.{json,md}`` and ``state_scaling.png``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _bench import data_progress  # noqa: E402

import gpuwm  # noqa: E402

RATE = 200_000  # events per batch = per second of event time
KEYS = 100_000
SESSION_KEYS = 50_000_000
BASE_MS = 1_767_225_600_000


def batch(i: int, rng, keys: int = KEYS) -> pa.Table:
    ts = BASE_MS + i * 1000 + rng.integers(0, 1000, RATE) - rng.integers(0, 500, RATE)
    return pa.table({"ts": pa.array(ts, pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
                     "k": rng.integers(0, keys, RATE), "price": rng.integers(1, 100_000, RATE)})


def operator_curve(kind: str, delays_ms: list[int], timed: int = 12, s3=None) -> list[dict]:
    """``s3``: an S3 server (``tests.s3_server.S3Server``) the state goes to; None: local disk."""
    from gpuwm.spark.storage import store as state_store  # the state store (no pyspark needed)
    from gpuwm.spark.storage.checkpoint import Checkpoint, Location

    out = []
    for d in delays_ms:
        rng = np.random.default_rng(d)
        if kind == "sort":
            op = gpuwm.StreamSort("ts", key=["k"], backend="cpu")
        elif kind == "session":
            op = gpuwm.WindowAggregate(gpuwm.Session("ts", "1 second"), by=["k"],
                                       aggs={"n": ("*", "count"), "mx": ("price", "max")}, backend="cpu")
        elif kind == "dedup":  # keys held for the delay: the state is every key of the last `delay`
            from datetime import timedelta

            op = gpuwm.Dedup(["k"], "ts", delay=timedelta(milliseconds=d), backend="cpu")
        elif kind == "join":
            from datetime import timedelta

            from gpuwm.join import IntervalJoinSpec, inputs_schema

            spec = IntervalJoinSpec("l", "r", [("k", "rk")], "ts", "rts", timedelta(0), timedelta(milliseconds=d), "left")
            lsch = batch(0, rng, 1).schema
            rsch = pa.schema([("rts", lsch.field("ts").type), ("rk", pa.int64()), ("rprice", pa.int64())])
            op = spec.build("spark", "cpu").bind(inputs_schema({"l": lsch, "r": rsch}))
        else:
            op = gpuwm.WindowAggregate(gpuwm.Tumble("ts", "1 second"), by=["k"],
                                       aggs={"n": ("*", "count"), "mx": ("price", "max")}, backend="cpu")
        warm = int(d / 1000) + 3
        times, saves, state, emitted = [], [], 0, 0
        ck = Checkpoint(Location.of(s3.uri(f"state-{kind}-{d}"), s3.options()) if s3 is not None
                        else Location.of(tempfile.mkdtemp(prefix="gpuwm-store-")))
        places = None
        for i in range(warm + timed):
            t = batch(i, rng, SESSION_KEYS if kind in ("session", "dedup", "join") else KEYS)
            wm = BASE_MS + (i + 1) * 1000 - 500 - d  # max event time - delay
            if kind == "join":
                r = batch(i, rng, SESSION_KEYS).rename_columns(["rts", "rk", "rprice"])
                wm = BASE_MS + (i + 1) * 1000 - 500  # the join's delay is its bound
            t0 = time.perf_counter()
            pushed = op.push({"l": t, "r": r}) if kind == "join" else op.push(t)
            res = op.drain(wm)
            if kind == "dedup":  # a dedup emits on push; its drain forgets expired keys
                res = pushed
            dt = time.perf_counter() - t0
            # what the Spark runtime does next: save the new state version
            saved = state_store.save_operator(ck, i, 0, 0, op, places)
            places = saved.places
            ck.write_commit(i, {"0/0": saved.name}, saved.files, "", {})  # and what no version names goes
            ds = time.perf_counter() - t0 - dt
            if i >= warm:
                times.append(dt)
                saves.append(ds)
                if kind == "join":  # pairs within the bound; the left rows that left unmatched
                    lt, rt = (pa.compute.cast(res.column(c), pa.int64()).to_numpy(zero_copy_only=False)
                              for c in ("ts", "rts"))
                    m = res.column("rk").is_valid().to_numpy(zero_copy_only=False)
                    assert np.all((rt[m] >= lt[m]) & (rt[m] <= lt[m] + d)), "join pair out of bounds"
                    assert np.all(lt[~m] <= wm - d - 1), "unmatched left row emitted early"
                if kind == "sort":
                    ts = res.column("ts").cast(pa.int64()).to_numpy()
                    assert np.all(np.diff(ts) >= 0) and (ts.size == 0 or ts[-1] < wm), "sort output wrong"
            if kind == "dedup":
                emitted += res.num_rows
            if kind == "session":  # closed sessions only, and no row lost: emitted + open + late = pushed
                end = res.column("window_end").cast(pa.int64()).to_numpy()
                assert end.size == 0 or end.max() <= wm, "session emitted before it closed"
                emitted += int(pa.compute.sum(res.column("n")).as_py() or 0)
            state = op.state_rows
        ck.loc.delete_dir("")
        if kind == "session":
            open_rows = int(op.snapshot()["state"].column("acc.n.n").to_numpy().sum())
            assert emitted + open_rows + op.late_rows == (warm + timed) * RATE, "session rows lost"
        if kind == "dedup":  # every row is a first row or a counted duplicate
            assert emitted + op.duplicate_rows == (warm + timed) * RATE and emitted > 0, "dedup rows lost"
        out.append({"operator": kind, "store": "local" if s3 is None else "s3", "delay_ms": d, "state_rows": int(state), "median_s": statistics.median(times),
                    "mean_s": statistics.fmean(times),
                    "min_s": min(times), "max_s": max(times), "save_median_s": statistics.median(saves),
                    "save_mean_s": statistics.fmean(saves),
                    "save_min_s": min(saves), "save_max_s": max(saves)})
        print(f"{kind:6s} delay {d / 1000:7.2f} s  state {state:>10,} rows  per batch {statistics.median(times) * 1e3:7.1f} ms "
              f"(mean {statistics.fmean(times) * 1e3:.1f}) "
              f"({min(times) * 1e3:.1f}..{max(times) * 1e3:.1f})  state save {statistics.median(saves) * 1e3:6.1f} ms "
              f"({min(saves) * 1e3:.1f}..{max(saves) * 1e3:.1f})", flush=True)
    return out


def spark_curve(delays_s: list[int], timed: int = 5, engines: tuple[str, ...] = ("window", "sort")) -> list[dict]:
    from pyspark.sql import functions as F

    from gpuwm.spark import Pipeline, local_session

    spark = local_session(app="gpuwm-state", cores=2)
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    schema = "ts timestamp, k bigint, price bigint"
    rows = []
    for d in delays_s:
        work = tempfile.mkdtemp(prefix="gpuwm-state-")
        src = os.path.join(work, "in")
        os.makedirs(src)
        rng = np.random.default_rng(d)
        n = d + 3 + timed
        t0 = time.time() - 10_000
        for i in range(n):
            p = os.path.join(src, f"part-{i:05d}.parquet")
            pq.write_table(batch(i, rng), p)
            os.utime(p, (t0 + i, t0 + i))
        res = {}
        if "window" in engines:
            nat = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(src)
                   .withWatermark("ts", f"{d} seconds").groupBy(F.window("ts", "1 second"), "k")
                   .agg(F.count("*").alias("n"), F.max("price").alias("mx")))
            q = (nat.writeStream.format("noop").option("checkpointLocation", f"{work}/nck").outputMode("append")
                 .trigger(availableNow=True).start())
            q.awaitTermination()
            prog = [p for p in q.recentProgress if p["numInputRows"] > 0]
            state = [p["stateOperators"][0]["numRowsTotal"] for p in prog]
            res["spark native"] = ([p["durationMs"]["triggerExecution"] / 1000 for p in prog][-timed:], state[-1])
            df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(src)
            pl = (Pipeline(df, f"{work}/gck").watermark("ts", delay=f"{d} seconds", profile="spark")
                  .window(gpuwm.Tumble("ts", "1 second"), by=["k"], aggs={"n": ("*", "count"), "mx": ("price", "max")})
                  .write_parquet(f"{work}/gout"))
            q = pl.start(trigger={"availableNow": True})
            q.awaitTermination()
            prog = data_progress(q, pl)
            res["gpuwm"] = ([p["durationMs"]["triggerExecution"] / 1000 for p in prog][-timed:],
                            pl.history[-1]["state_rows"])
            assert res["gpuwm"][1] == res["spark native"][1], "gpuwm and Spark native keep different state"
        if "sort" in engines:  # Spark has no event-time sort: gpuwm's curve alone
            df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(src)
            pl = (Pipeline(df, f"{work}/sck").watermark("ts", delay=f"{d} seconds", profile="spark")
                  .sort(key=["k"]).write_parquet(f"{work}/sout"))
            q = pl.start(trigger={"availableNow": True})
            q.awaitTermination()
            prog = data_progress(q, pl)
            h = pl.history[-1]
            # check: every input row not late is either written, ordered, or still buffered
            per = [pq.read_table(b, columns=["ts"]).column("ts").cast(pa.int64()).to_numpy()
                   for b in sorted(glob.glob(f"{work}/sout/batch_id=*"), key=lambda b: int(b.rsplit("=", 1)[1]))]
            out_ts = np.concatenate(per) if per else np.zeros(0, np.int64)
            assert np.all(np.diff(out_ts) >= 0), "sorted stream out of order"
            assert out_ts.size + h["state_rows"] + sum(x["late_rows"] for x in pl.history) == n * RATE, "sort lost rows"
            res["gpuwm sort"] = ([p["durationMs"]["triggerExecution"] / 1000 for p in prog][-timed:], h["state_rows"])
        for name, (times, st) in res.items():
            rows.append({"engine": name, "delay_s": d, "state_rows": int(st), "median_s": statistics.median(times),
                         "min_s": min(times), "max_s": max(times)})
            print(f"spark {name:13s} delay {d:3d} s  state {st:>9,} rows  per batch {statistics.median(times):.2f} s "
                  f"({min(times):.2f}..{max(times):.2f})", flush=True)
        shutil.rmtree(work, ignore_errors=True)
    spark.stop()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--skip-spark", action="store_true")
    ap.add_argument("--skip-operators", action="store_true")
    ap.add_argument("--operators", default="sort,window,session,dedup", help="which operator curves to run")
    ap.add_argument("--spark-engines", default="window,sort",
                    help="on Spark: window (native and gpuwm), sort (gpuwm), or both")
    ap.add_argument("--store", choices=("local", "s3"), default="local",
                    help="where the operators' state versions go: local disk or an S3 server on loopback")
    ap.add_argument("--delays", default=None, help="delays in ms for the operator curves (default: per operator)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "state-scaling"))
    args = ap.parse_args()
    delays = {"sort": [50, 500, 5_000, 50_000], "window": [0, 1_000, 10_000, 100_000],
              "session": [0, 1_000, 10_000, 50_000], "dedup": [1_000, 5_000, 20_000, 50_000],
              "join": [1_000, 5_000, 20_000, 50_000]}
    if args.delays:
        delays = {k: [int(x) for x in args.delays.split(",")] for k in delays}
    s3 = None
    if args.store == "s3":
        from tests.s3_server import S3Server

        s3 = S3Server(tempfile.mkdtemp(prefix="gpuwm-s3-")).start()
    try:
        ops = [] if args.skip_operators else [r for k in args.operators.split(",")
                                              for r in operator_curve(k, delays[k], s3=s3)]
    finally:
        if s3 is not None:
            s3.stop()
            shutil.rmtree(s3.dir, ignore_errors=True)
    sp = [] if args.skip_spark else spark_curve([1, 10, 30], engines=tuple(args.spark_engines.split(",")))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"operators": ops, "spark": sp, "date": time.strftime("%Y-%m-%d"),
                                                  "events_per_batch": RATE, "keys": KEYS}, indent=2))
    md = [f"# Per-batch cost vs state size ({time.strftime('%Y-%m-%d')}, 2 cores, {RATE:,} events/batch, "
          f"{KEYS:,} keys)", "", f"## Operators (CPU backend, push + drain per batch; state saved to {args.store})", "",
          "| operator | delay | state rows | median ms | mean ms | spread ms | state save ms: median, mean (spread) |",
          "|---|---|---|---|---|---|---|"]
    md += [f"| {r['operator']} | {r['delay_ms'] / 1000:g} s | {r['state_rows']:,} | {r['median_s'] * 1e3:.1f} | "
           f"{r['mean_s'] * 1e3:.1f} | {r['min_s'] * 1e3:.1f}..{r['max_s'] * 1e3:.1f} | {r['save_median_s'] * 1e3:.1f}, "
           f"{r['save_mean_s'] * 1e3:.1f} "
           f"({r['save_min_s'] * 1e3:.1f}..{r['save_max_s'] * 1e3:.1f}) |" for r in ops]
    if sp:
        md += ["", "## Spark local[2], Parquet file per batch: 1 s tumbling count/max (native, gpuwm), "
               "gpuwm stream sort", "",
               "| engine | delay | state rows | median s per batch | spread s |", "|---|---|---|---|---|"]
        md += [f"| {r['engine']} | {r['delay_s']} s | {r['state_rows']:,} | {r['median_s']:.2f} | "
               f"{r['min_s']:.2f}..{r['max_s']:.2f} |" for r in sp]
    (out / "results.md").write_text("\n".join(md) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker

        fig, axes = plt.subplots(1, 2 if sp else 1, figsize=(11 if sp else 6, 4))
        axes = np.atleast_1d(axes)
        for kind in ("sort", "window", "session", "dedup", "join"):
            r = [x for x in ops if x["operator"] == kind]
            if not r:
                continue
            line, = axes[0].plot([x["state_rows"] for x in r], [x["median_s"] * 1e3 for x in r], "o-", label=kind)
            axes[0].plot([x["state_rows"] for x in r], [x["save_median_s"] * 1e3 for x in r], "s--",
                         color=line.get_color(), label=f"{kind}: save state version")
        axes[0].set(xscale="log", xlabel="rows in state", ylabel="ms per batch (200 k events)",
                    title="gpuwm operators: per-batch time vs state")
        axes[0].set_ylim(bottom=0)
        axes[0].legend()
        if sp:
            for eng in ("spark native", "gpuwm", "gpuwm sort"):
                r = [x for x in sp if x["engine"] == eng]
                if not r:
                    continue
                axes[1].plot([x["state_rows"] for x in r], [x["median_s"] for x in r], "o-", label=eng)
            axes[1].set(xscale="log", xlabel="rows in state", ylabel="s per micro-batch",
                        title="Spark local[2]: native vs gpuwm")
            axes[1].set_ylim(bottom=0)
            axes[1].xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            axes[1].legend()
        fig.tight_layout()
        fig.savefig(out / "state_scaling.png", dpi=110)
    except ImportError:
        pass
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
