"""Alignment (max_drift) with one split running ahead: state and latency.

Run:  .venv/bin/python benchmarks/bench_align.py

Operators only (no Spark), the CPU backend. Four splits, each 25 k events
per batch; splits 0-2 move 1 s of event time per batch, split 3 (a backlog
being caught up, say) moves ``--speed`` s per batch, so it runs further
ahead every batch. Watermark: ts - 1 s, risingwave profile (min over the
splits), on-event. Two pipelines after the filter: a stream sort (rows wait
for the watermark) and a 1 s tumbling count over 1000 keys. Each runs
without alignment and with ``max_drift`` = ``--drift`` s, for ``--batches``
batches; then the input ends (flush, final drain).

Measured per batch: rows waiting (held by the filter + the operator's
state rows) and their bytes, seconds per batch (filter + push + drain);
for the sort, each row's latency in batches (the batch that released it
minus the batch it arrived in), split 3 apart from the others.

The floor for the state: every row behind the slowest split's watermark
can be released; split 3's rows ahead of it must wait somewhere — in the
operator's state without alignment, in the filter's with it — because a
Spark source cannot be paused per split, so the rows keep arriving.
Writes ``results/align/results.{json,md}``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _bench import write_results  # noqa: E402

import gpuwm  # noqa: E402

SEC = 1000  # event time in ms (an integer column)


def batches(n: int, rows: int, speed: int, seed: int = 3):
    rng = np.random.default_rng(seed)
    for b in range(n):
        parts = []
        for s in range(4):
            rate = speed if s == 3 else 1
            ts = (b * rate * SEC + np.arange(rows) * rate * SEC // rows
                  - rng.integers(0, SEC // 2, rows)).clip(0)  # in order, up to half a second behind
            parts.append(pa.table({"ts": pa.array(ts, pa.int64()), "p": pa.array(np.full(rows, s), pa.int64()),
                                   "k": pa.array(rng.integers(0, 1000, rows), pa.int64()),
                                   "arrived": pa.array(np.full(rows, b), pa.int64())}))
        yield pa.concat_tables(parts)


def run(kind: str, drift: int | None, args) -> dict:
    f = gpuwm.WatermarkFilter("ts", SEC, profile="risingwave", emit="on-event", split="p", backend="cpu",
                              max_drift=None if drift is None else drift * SEC)
    if kind == "sort":
        op = gpuwm.StreamSort("ts", key=["p", "k"], profile="risingwave", backend="cpu")
    else:
        op = gpuwm.WindowAggregate(gpuwm.Tumble("ts", SEC), by=["k"], aggs={"n": ("*", "count")},
                                   profile="risingwave", backend="cpu")
    waiting, nbytes, secs, lat_fast, lat_slow = [], [], [], [], []
    emitted = 0

    def step(kept, b):
        nonlocal emitted
        op.push(kept)
        out = op.drain(f.output_watermark)
        if out is not None and out.num_rows:
            emitted += out.num_rows
            if kind == "sort":
                lat = b - out.column("arrived").to_numpy()
                fast = out.column("p").to_numpy() == 3
                lat_fast.append(lat[fast])
                lat_slow.append(lat[~fast])

    for b, t in enumerate(batches(args.batches, args.rows, args.speed)):
        t0 = time.perf_counter()
        step(f.process(t), b)
        secs.append(time.perf_counter() - t0)
        held = f.held_table()
        waiting.append(f.held_rows + op.state_rows)
        nbytes.append((0 if held is None else held.nbytes) + op.state_bytes)
    kept = f.flush()  # the end of the input: every held row, then the final drain
    f.end_input()
    step(kept, args.batches)
    res = {"pipeline": kind, "max_drift_s": drift, "emitted": emitted, "late_rows": f.late_rows, "peak_waiting_rows": max(waiting),
           "last_waiting_rows": waiting[-1], "peak_waiting_mb": max(nbytes) / 2 ** 20,
           "median_batch_s": statistics.median(secs)}
    if kind == "sort":
        fast, slow = np.concatenate(lat_fast), np.concatenate(lat_slow)
        res.update(latency_split3_mean=float(fast.mean()), latency_split3_p99=float(np.percentile(fast, 99)),
                   latency_others_mean=float(slow.mean()), latency_others_p99=float(np.percentile(slow, 99)),
                   released=int(fast.shape[0] + slow.shape[0]))
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--rows", type=int, default=25_000, help="events per split per batch")
    ap.add_argument("--speed", type=int, default=3, help="seconds of event time split 3 moves per batch")
    ap.add_argument("--drift", type=int, default=5, help="max_drift in seconds")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "align"))
    args = ap.parse_args()
    rows = []
    for kind in ("sort", "window"):
        for drift in (None, args.drift):
            r = run(kind, drift, args)
            rows.append(r)
            print(r, flush=True)
    md = [f"# Alignment with one split running ahead ({args.batches} batches, 4 splits x {args.rows:,} events "
          f"per batch, split 3 at {args.speed} s per batch, the others 1 s)", "",
          "| pipeline | max_drift | peak rows waiting | rows waiting at the end | peak MiB | median s/batch | "
          "sort latency split 3 (mean / p99 batches) | others (mean / p99) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lat = (f"{r['latency_split3_mean']:.1f} / {r['latency_split3_p99']:.0f}",
               f"{r['latency_others_mean']:.2f} / {r['latency_others_p99']:.0f}") if r["pipeline"] == "sort" \
            else ("-", "-")
        md.append(f"| {r['pipeline']} | {'none' if r['max_drift_s'] is None else str(r['max_drift_s']) + ' s'} | "
                  f"{r['peak_waiting_rows']:,} | {r['last_waiting_rows']:,} | {r['peak_waiting_mb']:.1f} | "
                  f"{r['median_batch_s']:.3f} | {lat[0]} | {lat[1]} |")
    write_results(args.out, {"date": time.strftime("%Y-%m-%d"), "args": vars(args), "results": rows}, md)
    print("\n".join(md))


if __name__ == "__main__":
    main()
