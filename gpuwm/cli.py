"""The ``gpuwm`` command.

``gpuwm demo`` runs the operators over the embedded Nexmark bid stream, in
process, micro-batch by micro-batch: a watermark filter per split, a Q7-like
tumbling max price / count per auction, a Q5-like hopping count per auction,
and the event-time-sorted bid stream; it writes Parquet and prints a line per
micro-batch and a summary.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from datetime import timedelta
from pathlib import Path

import pyarrow.parquet as pq

from . import Hop, StreamSort, Tumble, WatermarkFilter, WindowAggregate, get_backend
from .nexmark import NexmarkConfig, bids


def _demo(args: argparse.Namespace) -> int:
    backend = get_backend(args.backend)
    cfg = NexmarkConfig(events_per_second=args.rate, splits=args.splits, seed=args.seed,
                        out_of_order_fraction=args.out_of_order, max_delay_ms=args.max_delay_ms)
    out = Path(args.out)
    for sub in ("q7_tumble", "q5_hop", "sorted_bids"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    p = args.profile
    f = WatermarkFilter("date_time", delay=timedelta(milliseconds=args.delay_ms), profile=p,
                        split="split", backend=backend.name)
    q7 = WindowAggregate(Tumble("date_time", "10 seconds"), by=["auction"],
                         aggs={"bids": ("*", "count"), "max_price": ("price", "max")},
                         profile=p, backend=backend.name)
    q5 = WindowAggregate(Hop("date_time", size="10 seconds", slide="2 seconds"), by=["auction"],
                         aggs={"bids": ("*", "count")}, profile=p, backend=backend.name)
    srt = StreamSort("date_time", key=["event_id"], profile=p, backend=backend.name)
    print(f"gpuwm demo: {args.events:,} Nexmark events, {args.batch:,} per micro-batch, "
          f"{args.splits} splits, profile={p}, backend={backend.name}, output -> {out}/")
    emitted = {"q7_tumble": 0, "q5_hop": 0, "sorted_bids": 0}
    t_all = time.perf_counter()
    bid_rows = 0
    batch_id = 0
    start = 0
    while True:
        stop = min(start + args.batch, args.events)
        t0 = time.perf_counter()
        table = bids(cfg, start, stop) if stop > start else bids(cfg, 0, 0)
        kept = f.process(table)
        for op in (q7, q5):
            op.push(kept)
        srt.push(kept)
        w = f.output_watermark
        res = {"q7_tumble": q7.drain(w), "q5_hop": q5.drain(w), "sorted_bids": srt.drain(w)}
        for name, t in res.items():
            if t.num_rows:
                pq.write_table(t, out / name / f"batch-{batch_id:05d}.parquet")
                emitted[name] += t.num_rows
        dt = time.perf_counter() - t0
        bid_rows += table.num_rows
        print(f"batch {batch_id:3d}: rows {table.num_rows:8,}  late {f.late_rows:7,}  "
              f"watermark {w}  state rows {q7.state_rows + q5.state_rows + srt.buffered_rows:9,}  "
              f"{table.num_rows / dt / 1e6 if dt else 0:6.2f} M rows/s")
        batch_id += 1
        if stop >= args.events:
            if start >= args.events:
                break  # the trailing no-data batch has drained with the final watermark
        start = stop
    dt = time.perf_counter() - t_all
    print(f"done: {bid_rows:,} bids in {dt:.2f} s ({bid_rows / dt / 1e6:.2f} M rows/s); late rows dropped "
          f"{f.late_rows:,}; emitted q7 {emitted['q7_tumble']:,} rows, q5 {emitted['q5_hop']:,} rows, "
          f"sorted bids {emitted['sorted_bids']:,} rows; still open: q7 {q7.open_windows} windows, "
          f"sort buffer {srt.buffered_rows:,} rows (they close when later events arrive)")
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    ap = argparse.ArgumentParser(prog="gpuwm", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="run the operators on the embedded Nexmark source")
    d.add_argument("--events", type=int, default=2_000_000, help="total events (default 2,000,000)")
    d.add_argument("--batch", type=int, default=250_000, help="events per micro-batch")
    d.add_argument("--rate", type=int, default=50_000, help="events per second of event time")
    d.add_argument("--splits", type=int, default=4)
    d.add_argument("--delay-ms", type=int, default=4_000, help="watermark delay (bounded out-of-orderness)")
    d.add_argument("--out-of-order", type=float, default=0.1, help="fraction of events delayed")
    d.add_argument("--max-delay-ms", type=int, default=6_000, help="largest delay of a delayed event")
    d.add_argument("--profile", default="risingwave", choices=["risingwave", "spark", "flink"])
    d.add_argument("--backend", default=None, choices=["auto", "cpu", "gpu"])
    d.add_argument("--seed", type=int, default=42)
    d.add_argument("--out", default="gpuwm-out", help="output folder (Parquet per operator)")
    args = ap.parse_args(argv)
    if args.cmd == "demo":
        if args.events <= 0 or args.batch <= 0:
            ap.error("--events and --batch must be > 0")
        return _demo(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
