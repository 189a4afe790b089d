"""Where a resident operator's time goes on the GPU: the device's busy time
against the call's wall time, per kernel (#51, item 3).

For each case of ``gpu_floors.py`` (10 M events already on the device as a
Frame, as its "resident" mode times them) this runs the operator's timed call
after the same warm-ups, then once more under the torch profiler (CUPTI: it
records every CUDA kernel, copy and runtime/driver call of the process,
CuPy's included) and once under cProfile (the host's Python). It prints:

* wall ms of the call, the device's busy ms (kernels and copies, the union
  of their intervals) and the idle rest, which is host time: Python, launch
  latency and waits on synchronisations;
* how many kernels, copies and synchronising calls the call made;
* the kernels by total time, and the host's functions by own time.

The profiler's trace is parsed from its Chrome-trace export, which keeps to
the trace format rather than to a torch version's Python API.

    python benchmarks/gpu_profile.py [--rows 10000000] [--only tumble] [--out DIR]

Without torch (or on the CPU backend) it prints the wall and cProfile parts.
"""

from __future__ import annotations

import collections
import cProfile
import io
import json
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_operators  # noqa: E402
import gpu_floors  # noqa: E402

import gpuwm  # noqa: E402

#: runtime/driver calls that wait for the device or move data synchronously
SYNCING = ("Synchronize", "cudaMemcpy", "cuMemcpy", "EventQuery", "StreamQuery")


def _busy(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of (start, end) intervals."""
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def device_summary(trace_path: str) -> dict:
    """Kernels, copies and host API calls from a Chrome trace of one call."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    kernels: dict[str, list[float]] = collections.defaultdict(list)
    copies, spans, api = [], [], collections.Counter()
    api_us = collections.Counter()
    for e in events:
        cat, dur = e.get("cat", ""), float(e.get("dur", 0) or 0)
        if e.get("ph") != "X":
            continue
        if cat == "kernel":
            kernels[e["name"]].append(dur)
            spans.append((e["ts"], e["ts"] + dur))
        elif cat in ("gpu_memcpy", "gpu_memset"):
            copies.append((e["name"], dur, (e.get("args") or {}).get("bytes", 0)))
            spans.append((e["ts"], e["ts"] + dur))
        elif cat in ("cuda_runtime", "cuda_driver"):
            api[e["name"]] += 1
            api_us[e["name"]] += dur
    syncing = {k: (v, api_us[k]) for k, v in api.items() if any(s in k for s in SYNCING)}
    launches = sum(v for k, v in api.items() if "Launch" in k)
    return {
        "kernel_count": sum(len(v) for v in kernels.values()),
        "kernel_ms": sum(sum(v) for v in kernels.values()) / 1e3,
        "copy_count": len(copies),
        "copy_ms": sum(c[1] for c in copies) / 1e3,
        "copy_bytes": int(sum(c[2] for c in copies)),
        "busy_ms": _busy(spans) / 1e3,
        "launches": launches,
        "syncing_calls": {k: {"count": v[0], "ms": v[1] / 1e3} for k, v in syncing.items()},
        "top_kernels": sorted(((sum(v) / 1e3, len(v), k[:110]) for k, v in kernels.items()), reverse=True)[:25],
    }


def profiled_timed(backend, report: dict, use_torch: bool):
    """A stand-in for ``bench_operators.timed`` that also profiles one more
    call of ``fn`` after the timed ones, and records it in ``report``."""

    def timed(_backend, fn, runs, setup=None):
        times, result = [], None
        for i in range(runs + 2):  # as bench_operators.timed: two warm-ups
            result = None
            arg = setup() if setup else None
            bench_operators.sync(backend)
            t0 = time.perf_counter()
            result = fn(arg)
            bench_operators.sync(backend)
            if i > 1:
                times.append(time.perf_counter() - t0)
        report["wall_ms"] = statistics.median(times) * 1e3
        if use_torch:
            import torch

            arg = setup() if setup else None
            bench_operators.sync(backend)
            acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
            with torch.profiler.profile(activities=acts) as prof:
                t0 = time.perf_counter()
                fn(arg)
                bench_operators.sync(backend)
                report["profiled_wall_ms"] = (time.perf_counter() - t0) * 1e3
            with tempfile.NamedTemporaryFile(suffix=".json") as tf:
                prof.export_chrome_trace(tf.name)
                try:
                    report.update(device_summary(tf.name))
                except Exception as e:  # a trace format this parser does not know: say what it holds
                    with open(tf.name) as f:
                        cats = collections.Counter(ev.get("cat") for ev in json.load(f).get("traceEvents", []))
                    report["trace_error"] = f"{type(e).__name__}: {e}; categories {dict(cats)}"
                    print(report["trace_error"], flush=True)
        arg = setup() if setup else None
        bench_operators.sync(backend)
        pr = cProfile.Profile()
        pr.enable()
        fn(arg)
        bench_operators.sync(backend)
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
        report["host_profile"] = s.getvalue()
        return statistics.median(times), min(times), max(times), result

    return timed


def main() -> int:
    args = gpu_floors.case_args(__doc__, 3, "gpu-profile")
    backend = gpuwm.get_backend(args.backend)
    try:
        import torch  # noqa: F401

        use_torch = backend.is_gpu
    except ImportError:
        use_torch = False
    reports = {}
    for name, (call, _in_bytes) in gpu_floors.cases(args.rows).items():
        if args.only and args.only not in name:
            continue
        report = reports[name] = {}
        saved = bench_operators.timed
        bench_operators.timed = profiled_timed(backend, report, use_torch)
        try:
            call(backend, args.runs, True)
        finally:
            bench_operators.timed = saved
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# Resident operators, {args.rows:,} rows, backend {backend.name}", ""]
    lines += ["| operator | wall ms | device busy ms | host (idle device) ms | kernels | copies | "
              "copy MB | syncing calls |", "|---|---|---|---|---|---|---|---|"]
    for name, r in reports.items():
        if "busy_ms" in r:
            pw = r["profiled_wall_ms"]
            ns = sum(v["count"] for v in r["syncing_calls"].values())
            lines.append(f"| {name} | {r['wall_ms']:.2f} | {r['busy_ms']:.2f} | {pw - r['busy_ms']:.2f} "
                         f"(profiled wall {pw:.2f}) | {r['kernel_count']} | {r['copy_count']} | "
                         f"{r['copy_bytes'] / 1e6:.1f} | {ns} |")
        else:
            lines.append(f"| {name} | {r['wall_ms']:.2f} | | | | | | |")
    detail = []
    for name, r in reports.items():
        detail += ["", f"## {name}", ""]
        if "top_kernels" in r:
            detail += ["kernels by total time (ms, launches, name):"]
            detail += [f"  {ms:8.3f} {n:5d}  {k}" for ms, n, k in r["top_kernels"]]
            detail += ["syncing calls: " + json.dumps(r["syncing_calls"])]
        detail += ["", r["host_profile"]]
    text = "\n".join(lines + detail)
    (out / "profile.md").write_text(text)
    (out / "profile.json").write_text(json.dumps(
        {k: {kk: vv for kk, vv in v.items() if kk != "host_profile"} for k, v in reports.items()}, indent=1))
    print(text)
    print("\n".join(lines))  # the summary again, last (a device reply keeps the tail)
    return 0


if __name__ == "__main__":
    sys.exit(main())
