"""The ``gpuwm`` command.

``gpuwm demo`` runs three pipelines on the embedded Nexmark bid stream in
Spark local mode (``--engine local``: the same operators in process, without
Spark): a Q7-like tumbling count / max price per auction, a Q5-like hopping
count per auction, and the event-time-sorted bid stream. It writes Parquet,
prints a line per micro-batch and a summary, and exits by itself.

``gpuwm run SPEC.json`` runs a pipeline described in a file (see
``gpuwm.spark.front.spec``) in Spark local mode; on a cluster use
``spark-submit --properties-file spark_conf/rapids.conf gpuwm/spark/app.py SPEC.json``.

``gpuwm jars`` fetches the JVM parts from Maven Central (see
:mod:`gpuwm.spark.jvm.jars`).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
from datetime import timedelta
from pathlib import Path

import pyarrow.parquet as pq

from ... import Hop, StreamSort, Tumble, WatermarkFilter, WindowAggregate, get_backend
from ...errors import ConfigError, GpuwmError
from ...nexmark import NexmarkConfig, bids


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
            if start >= args.events:  # the trailing no-data batch has drained with the final watermark
                if f.profile.end_of_input == "all":  # and the end of input is +infinity (flink)
                    w = f.end_input()
                    res = {"q7_tumble": q7.drain(w), "q5_hop": q5.drain(w), "sorted_bids": srt.drain(w)}
                    for name, t in res.items():
                        if t.num_rows:
                            pq.write_table(t, out / name / f"batch-{batch_id:05d}.parquet")
                            emitted[name] += t.num_rows
                    print(f"end of input: emitted {sum(t.num_rows for t in res.values()):,} rows at watermark +inf")
                break
        start = stop
    dt = time.perf_counter() - t_all
    print(f"done: {bid_rows:,} bids in {dt:.2f} s ({bid_rows / dt / 1e6:.2f} M rows/s); late rows dropped "
          f"{f.late_rows:,}; emitted q7 {emitted['q7_tumble']:,} rows, q5 {emitted['q5_hop']:,} rows, "
          f"sorted bids {emitted['sorted_bids']:,} rows; still open: q7 {q7.open_windows} windows, "
          f"sort buffer {srt.buffered_rows:,} rows" + (" (they close when later events arrive)"
                                                         if q7.open_windows or srt.buffered_rows else ""))
    return 0


def _demo_spark(args: argparse.Namespace) -> int:
    import shutil

    from .pipeline import Pipeline
    from .session import local_session, read_nexmark

    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)  # the demo's own folder: a fresh run each time
    opts = dict(totalEvents=args.events, eventsPerBatch=args.batch, eventsPerSecond=args.rate,
                splits=args.splits, outOfOrderFraction=args.out_of_order, maxDelayMs=args.max_delay_ms,
                seed=args.seed)
    print(f"gpuwm demo (Spark local mode): {args.events:,} Nexmark events, {args.batch:,} per micro-batch, "
          f"{args.splits} splits, profile={args.profile}, output -> {out}/ (starting Spark...)", flush=True)
    spark = local_session(app="gpuwm-demo", conf={"spark.gpuwm.backend": args.backend or "auto"},
                          show_start=_DEBUG)
    delay = timedelta(milliseconds=args.delay_ms)
    pipes = []
    for name in ("q7_tumble", "q5_hop", "sorted_bids"):
        ck = str(out / "_checkpoints" / name)
        p = Pipeline(read_nexmark(spark, ck, **opts), ck, verbose=True, name=f"{name:11s}")
        p.watermark("date_time", delay=delay, split="split", profile=args.profile)
        if name == "q7_tumble":
            p.window(Tumble("date_time", "10 seconds"), by=["auction"],
                     aggs={"bids": ("*", "count"), "max_price": ("price", "max")})
        elif name == "q5_hop":
            p.window(Hop("date_time", size="10 seconds", slide="2 seconds"), by=["auction"],
                     aggs={"bids": ("*", "count")})
        else:
            p.sort(key=["event_id"])
        pipes.append((name, p.write_parquet(str(out / name))))
    t0 = time.perf_counter()
    queries = [p.start() for _, p in pipes]
    try:
        for q in queries:
            q.processAllAvailable()
    finally:
        for q in queries:
            q.stop()
    dt = time.perf_counter() - t0
    for q in queries:
        if q.exception() is not None:
            raise q.exception()
    print(f"done in {dt:.1f} s ({len(pipes)} queries over {args.events:,} events each, "
          f"{len(pipes) * args.events / dt:,.0f} events/s in all):")
    for name, p in pipes:
        h = p.history
        print(f"  {name:12s} batches {len(h):3d}  bids {sum(m['input_rows'] for m in h):9,}  "
              f"late {sum(m['late_rows'] for m in h):7,}  emitted {sum(m['rows_emitted'] for m in h):9,}  "
              f"state rows left {h[-1]['state_rows'] if h else 0:8,}  -> {out / name}/")
    spark.stop()
    return 0


def _run_spec(args: argparse.Namespace) -> int:
    from .session import local_session
    from .spec import explain, explain_without_spark, kafka_sources, load_spec, run, spec_conf

    spec = load_spec(args.spec)
    # where the source's schema is known (Nexmark, a declared Parquet schema), the whole pipeline — column
    # names and types included — is checked now, before Spark starts; a dry run then needs no Spark at all
    text = explain_without_spark(spec)
    if args.dry_run and text is not None:
        print(f"{text}\n(spec {args.spec} checked without starting Spark: its source's schema is declared)")
        return 0
    if not _DEBUG:  # a failure is gpuwm's one line; its trace goes to the file that line names
        for name in ("py4j", "SQLQueryContextLogger", "DataFrameQueryContextLogger"):  # pyspark logs its errors
            logging.getLogger(name).setLevel(logging.CRITICAL)  # with their whole Java trace, then raises them
    from ..driver.kafka import probe

    conf = spec_conf(spec)  # (first: a Spark line without a Kafka connector says so before any broker is asked)
    for options in kafka_sources(spec):  # brokers that do not answer, a bad login: one line before Spark starts
        probe(options)
    jars = " (and the jars it needs, fetched once)" if "spark.jars.packages" in conf else ""
    print(f"gpuwm: spec {args.spec} checked; starting Spark in local mode{jars}...", flush=True)
    spark = local_session(app="gpuwm-run", conf=conf, show_start=_DEBUG)
    if not _DEBUG:
        spark.sparkContext.setLogLevel("OFF")
    if args.dry_run:
        print(explain(spark, spec))
    else:
        p = run(spark, spec)
        if p.history:
            print("\n".join(summary(p.history[-1])), flush=True)
        if p.interrupted:
            from ..jvm.jvmstart import hush

            hush()  # the stopped query's threads can print a Java trace after the line below
            spark.stop()
            done = [m["batch_id"] for m in p.history if not m.get("replayed")]
            where = f"after batch {done[-1]}" if done else "before its first batch"
            print(f"gpuwm: stopped {where} (Ctrl-C); the batch in flight was not committed: run the same spec "
                  f"again to continue from the checkpoint {spec.get('checkpoint')}", file=sys.stderr, flush=True)
            return 130
    spark.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Every error ends in one line on stderr, ``gpuwm: error: <message>``:
    exit status 2 for what the user gave (gpuwm's configuration and input
    errors, Spark's analysis and parse errors, a Kafka source that is not
    there), 1 for a failure while running (a batch's task failed: gpuwm's
    own error from inside Spark's exception, or the first line of Spark's).
    ``--debug`` raises instead, with the whole traceback."""
    global _DEBUG
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = _DEBUG = "--debug" in argv
    try:
        return _main([a for a in argv if a != "--debug"])
    except KeyboardInterrupt:  # before a query ran (a running one is stopped in spec.run)
        print("gpuwm: interrupted (Ctrl-C); nothing was committed", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001  classified below
        got = None if debug else one_line(e)
        if got is None:
            raise
        msg, code = got
        if code == 1 and not isinstance(e, GpuwmError):  # Spark's: the whole trace to a file the line names
            import tempfile
            import traceback

            fd, log = tempfile.mkstemp(prefix="gpuwm-error-", suffix=".log")
            with os.fdopen(fd, "w") as fh:
                fh.write("".join(traceback.format_exception(e)))
            msg += f" (the whole trace: {log}; or run again with --debug)"
        print(f"gpuwm: error: {msg}", file=sys.stderr)
        return code


_DEBUG = False  # --debug: Spark's and py4j's own error logs stay on (set by main)


def one_line(e: BaseException) -> tuple[str, int] | None:
    """``(message, exit status)`` for an error a user can cause or meet, or
    None for a bug in gpuwm (whose traceback is wanted)."""
    if isinstance(e, GpuwmError):
        return " ".join(str(e).split()), _status(type(e))
    try:
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import AnalysisException, IllegalArgumentException, ParseException
        from pyspark.errors.exceptions.base import PySparkException
    except ImportError:
        return None
    text = str(e)
    from ..jvm.jvmstart import start_failure

    why = start_failure(e)
    if why is not None:  # Spark's JVM did not start (a package that does not resolve, ...)
        return f"Spark did not start: {why}"[:500], 1
    if isinstance(e, (AnalysisException, IllegalArgumentException, ParseException)):
        return text.strip().splitlines()[0], 2
    if not isinstance(e, (PySparkException, Py4JJavaError)):
        return None
    from ..io import sources  # noqa: F401  (its errors are raised in tasks)

    names = {c.__name__: c for c in _subclasses(GpuwmError)}
    # a gpuwm error raised in a task or in foreachBatch reaches the driver as a line of a Python traceback
    for name, msg in re.findall(r"(?m)^\s*gpuwm(?:\.\w+)*\.(\w+): (.+)$", text):
        if name in names:
            return " ".join(msg.split()), _status(names[name])
    # Spark's own error class (``[FAILED_READ_FILE.NO_HINT] Encountered error while reading file ...``)
    spark = re.search(r"\[([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\] ([^\n]+)", text)
    if spark:
        return f"[{spark.group(1)}] {spark.group(2).split(' SQLSTATE')[0].strip()}"[:500], 1
    # a Python error in a task or in foreachBatch (``OSError: [Errno 28] ... No space left on device``): the last
    # exception line of the tracebacks, Spark's and py4j's wrappers of it left out
    raised = [(n, m) for n, m in re.findall(r"(?m)^\s*((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)): (.+)$",
                                             text) if not n.startswith(("pyspark.", "py4j."))]
    if raised:
        name, msg = raised[-1]
        errno = re.search(r"\[Errno (\d+)\]", msg)
        hint = _ERRNO_HINTS.get(int(errno.group(1))) if errno else None
        return f"{name.rsplit('.', 1)[-1]}: {msg.strip()}"[:500] + (f" ({hint})" if hint else ""), 1
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(
        ("Traceback", "File ", "An exception was raised by the Python Proxy", "at ", "==="))]
    return (lines[0] if lines else type(e).__name__)[:500], 1


#: what to do about an OS error a batch met (the batch is not committed: a rerun does it again)
_ERRNO_HINTS = {
    28: "a file system the batch writes to is full: free space, then run the same spec again to continue; the "
        "failed batch was not committed",
    30: "a file system the batch writes to is read-only: make it writable, then run the same spec again to "
        "continue; the failed batch was not committed",
    13: "permission denied where the batch writes: fix it, then run the same spec again to continue; the failed "
        "batch was not committed",
}


def _subclasses(cls: type) -> list[type]:
    return [cls] + [s for c in cls.__subclasses__() for s in _subclasses(c)]


def _status(cls: type) -> int:
    """2: what the user gave is wrong; 1: something failed while running."""
    return 1 if cls.runtime else 2


def _main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    ap = parser()
    args = ap.parse_args(argv)
    if args.cmd == "run" or args.cmd == "demo" and args.engine != "local":  # (a Spark gpuwm does not support: one line)
        from ..jvm.versions import line

        line()
    if args.cmd == "demo":
        if args.events <= 0 or args.batch <= 0:
            ap.error("--events and --batch must be > 0")
        return _demo(args) if args.engine == "local" else _demo_spark(args)
    if args.cmd == "run":
        return _run_spec(args)
    if args.cmd == "jars":
        from ..jvm.jars import fetch, rapids_jar
        from ..jvm.versions import kafka_connector

        if args.app_path:  # spark-submit's application file, from any directory (not imported: it imports us)
            print(Path(__file__).resolve().parents[1] / "app.py")
        elif args.conf_path:
            print(conf_path(args.conf_path))
        elif args.rapids_path:
            print(rapids_jar())
        elif args.kafka_coordinate:
            print(kafka_connector())
        else:
            fetch(rapids=not args.no_rapids)
        return 0
    if args.cmd == "status":
        print(status(args.checkpoint, args.conf))
        return 0
    return 2


def conf_path(name: str) -> Path:
    """``spark_conf/<name>.conf`` of gpuwm's source tree (an editable install's)."""
    import gpuwm

    path = Path(gpuwm.__file__).resolve().parents[1] / "spark_conf" / f"{name}.conf"
    if not path.is_file():
        raise ConfigError(f"{path} is not there: spark_conf/ comes with gpuwm's source tree (pip install -e)")
    return path


def summary(m: dict) -> list[str]:
    """What a query did, from its last batch's metrics (the totals every
    commit carries): batches, rows in and out, the rows dropped and why,
    what stays in state and the watermark it waits behind."""
    from ..driver.loop import client_ranges, show_time

    t = m.get("totals")
    if t is None:  # a commit written before gpuwm kept totals
        return [f"gpuwm: batch {m['batch_id']}: {m['input_rows']:,} rows in, {m['rows_emitted']:,} out"]
    dropped = [f"{t['late_rows']:,} late", f"{t['duplicate_rows']:,} duplicate",
               f"{t['null_rows']:,} with a null event time"]
    dropped += [f"{t[k]:,} {what}" for k, what in (("malformed_rows", "malformed (nulls)"),
                                                   ("offsets_lost", "Kafka offsets lost")) if t[k]]
    out = m.get("output")
    lines = [f"gpuwm: {t['batches']:,} batches to batch {m['batch_id']}: {t['input_rows']:,} rows in "
             f"({', '.join(dropped)}), {t['rows_emitted']:,} rows out{f' -> {out}' if out else ''}"]
    wm = show_time(m.get("output_watermark"), m.get("time_kind"))
    if m["state_rows"]:
        lines.append(f"gpuwm: {m['state_rows']:,} rows stay in state, behind watermark {wm}: each is emitted or "
                     "dropped when a later batch's watermark passes its window or time (more input moves it); "
                     "a dedup's keys without an event time stay for good")
    else:
        lines.append(f"gpuwm: nothing left in state; watermark {wm}")
    if t.get("kafka_client_ranges"):  # gpuwm's own fetch did not take them: slower, and the reason to fix
        lines.append(f"gpuwm: {client_ranges(t['kafka_client_ranges'], t.get('kafka_client_why', {}))}")
    return lines


def parser() -> argparse.ArgumentParser:
    """The command line: every subcommand and option with its help."""
    ap = argparse.ArgumentParser(prog="gpuwm", description="gpuwm: event-time stream operators (watermarks, "
                                 "stream sort, windows) on Spark micro-batches, on GPU or CPU.",
                                 epilog="--debug (anywhere): show the traceback of an error")
    from ... import __version__

    ap.add_argument("--version", action="version", version=f"gpuwm {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="run the operators on the embedded Nexmark source")
    d.add_argument("--events", type=int, default=1_000_000, help="total events (default 1,000,000)")
    d.add_argument("--batch", type=int, default=200_000, help="events per micro-batch")
    d.add_argument("--rate", type=int, default=20_000, help="events per second of event time")
    d.add_argument("--splits", type=int, default=4,
                   help="source splits (Spark input partitions), each with its own watermark (default 4)")
    d.add_argument("--delay-ms", type=int, default=4_000, help="watermark delay (bounded out-of-orderness)")
    d.add_argument("--out-of-order", type=float, default=0.1, help="fraction of events delayed")
    d.add_argument("--max-delay-ms", type=int, default=6_000, help="largest delay of a delayed event")
    d.add_argument("--profile", default="risingwave", choices=["risingwave", "spark", "flink"],
                   help="whose watermark and window conventions to follow (default risingwave)")
    d.add_argument("--backend", default=None, choices=["auto", "cpu", "gpu"],
                   help="where the operators run: auto (the GPU when usable, else the CPU; default), cpu, gpu")
    d.add_argument("--seed", type=int, default=42, help="the generator's seed: the same seed, the same events")
    d.add_argument("--out", default="gpuwm-out", help="output folder (Parquet per operator)")
    d.add_argument("--engine", default="spark", choices=["spark", "local"],
                   help="spark: Spark local mode (default); local: the operators in this process")
    r = sub.add_parser("run", help="run a pipeline described in a JSON spec (Spark local mode)",
                       description="Run the pipeline a JSON spec describes in Spark local mode, a line per "
                       "micro-batch and a summary at the end; Ctrl-C stops it after a committed batch (run again "
                       "to continue). The spec is checked before Spark starts.",
                       epilog='A spec: {"source": {"format": "nexmark" | "kafka" | "parquet" ..., "options": {...}}, '
                       '"checkpoint": path, "watermark": {"column": ..., "delay": "4 seconds", "split": ..., '
                       '"profile": ...}, "stages": [{"window": {"tumble": "10 seconds", "by": [...], "aggs": {...}}}, '
                       '...], "sink": {"parquet": path}}; or Spark SQL: {"sources": {"bids": {"format": ..., '
                       '"watermark": {"column": ..., "delay": ...}}}, "sql": "SELECT ... FROM bids GROUP BY window(...), '
                       '...", "checkpoint": path, "sink": {...}}. The whole format, with every stage kind: the '
                       'docstring of gpuwm/spark/front/spec.py (python -m pydoc gpuwm.spark.front.spec) and '
                       'gpuwm/spark/front/README.md, "Command line and spark-submit".')
    r.add_argument("spec", help="the pipeline spec, a JSON file")
    r.add_argument("--dry-run", action="store_true",
                   help="check the spec and print the plan; run nothing (Spark is not started where the source's "
                        "schema is known: Nexmark, or Parquet with a declared schema)")
    j = sub.add_parser("jars", help="fetch the Kafka connector, a Kafka broker and the RAPIDS jar (Maven Central)")
    j.add_argument("--no-rapids", action="store_true", help="leave out the RAPIDS Accelerator jar (~1 GB)")
    j.add_argument("--rapids-path", action="store_true",
                   help="print only the RAPIDS jar's local path (fetched when not cached): spark-submit --jars")
    j.add_argument("--kafka-coordinate", action="store_true",
                   help="print only the Kafka connector's coordinate for the running Spark: spark-submit --packages")
    j.add_argument("--app-path", action="store_true",
                   help="print only the path of gpuwm/spark/app.py, spark-submit's application file")
    j.add_argument("--conf-path", metavar="NAME", choices=["local", "rapids"],
                   help="print only the path of spark_conf/NAME.conf: spark-submit --properties-file")
    st = sub.add_parser("status", help="the last batches' metrics and the state size of a checkpoint")
    st.add_argument("checkpoint", help="the query's checkpoint location (a path, or a URI: s3a://bucket/ck, ...)")
    st.add_argument("--conf", action="append", default=[], metavar="spark.hadoop.fs.KEY=VALUE",
                    help="a file-system setting of Spark's for the checkpoint (repeatable)")
    return ap


def status(checkpoint: str, conf: list[str] | tuple = ()) -> str:
    """``gpuwm status CHECKPOINT``: the committed batches' metrics that the
    state store keeps (the last two), one row each, and the size of the
    state the last one names — no Spark needed; any location Spark's
    checkpoint may be on, with Spark's settings for it given as ``--conf
    spark.hadoop.fs.s3a.endpoint=...`` (as to spark-submit)."""
    from ..storage.checkpoint import Checkpoint, Location

    opts = []
    for kv in conf:
        k, sep, v = kv.partition("=")
        if not sep or not k.startswith("spark.hadoop.fs."):
            raise ConfigError(f"--conf {kv!r}: give spark.hadoop.fs.<key>=<value>, as Spark takes it")
        opts.append((k.removeprefix("spark.hadoop."), v))
    ck = Checkpoint(Location.of(checkpoint, sorted(opts), "checkpoint"))
    batches = ck.committed_batches()
    if not batches:
        raise GpuwmError(f"no committed gpuwm batch under {ck}/gpuwm: not a gpuwm checkpoint, or no batch ran yet")
    cols = ("batch_id", "input_rows", "late_rows", "rows_emitted", "state_rows", "state_bytes", "watermark",
            "end_of_input", "idle_splits", "wall_s")
    rows = []
    commits = [ck.commit(b) for b in batches]
    ms = [c["metrics"] for c in commits]
    if any(m.get("held_rows") or m.get("rows_released") for m in ms):  # alignment held rows back
        cols = cols[:-1] + ("held_back_splits", "held_rows", "rows_released", "wall_s")
    if any(m.get("kafka_client_ranges") for m in ms):  # ranges gpuwm's own Kafka fetch did not take
        cols = cols[:-1] + ("kafka_client_ranges", "wall_s")
    from ..driver.loop import show_time

    for m in ms:  # the watermark the batch's operators released up to, as `gpuwm run` printed it
        m = {**m, "watermark": show_time(m.get("output_watermark"), m.get("time_kind"))} \
            if "time_kind" in m else m
        rows.append([f"{m.get(c):.3f}" if isinstance(m.get(c), float) else str(m.get(c, "")) for c in cols])
    files = list(commits[-1]["files"]) + [commits[-1]["filter"]]
    infos = ck.loc.fs.get_file_info([ck.loc.path(f) for f in files])
    size = sum(i.size or 0 for i in infos)
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in rows]
    lines.append(f"state of batch {batches[-1]}: {size:,} bytes in {len(files)} file(s) under {ck}/gpuwm/state "
                 f"(a version names the parts it did not change where an older one wrote them)")
    lines += summary(ms[-1])
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
