"""The hardware floors of #17 and every operator's time as a fraction of its
floor, in one run.

Floors, measured here at the batch's size (best of ``--runs``):

* host->device and device->host copies from pageable NumPy memory and from
  page-locked memory (``cupyx.empty_pinned``), in GB/s;
* device-to-device copy, counted as bytes read plus bytes written per second
  (the device-memory bandwidth an operator's passes share).

Each operator runs on ``--rows`` events (ts, k, v, split: 28 bytes a row) in
two modes, and its time is compared with the time its bytes need at the
floor:

* ``resident``: the input already a device Frame (moved untimed). Floor:
  the bytes it must touch (read its input columns once, write its output
  once) at the device copy bandwidth. A sort's drain returns host Arrow,
  so its floor adds the output's pinned device->host copy.
* ``host``: Arrow in host memory in and out, as Spark hands it over. Floor:
  the input's bytes at the pinned host->device bandwidth plus the output's
  at the pinned device->host bandwidth.

``fraction of floor`` = floor time / measured time (1.0: at the hardware's
limit). On the CPU backend (no GPU) the device floor is a host memory copy
and the transfer floors do not apply; that mode keeps this script tested.

    python benchmarks/gpu_floors.py --backend gpu [--rows 10000000] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _bench import write_results  # noqa: E402
from bench_operators import bench_filter, bench_session, bench_sort, bench_window, sync  # noqa: E402

import gpuwm  # noqa: E402

ROW_BYTES = 28  #: ts (8) + k (8) + v (8) + split (4)


def best(backend, fn, runs: int) -> float:
    """Fastest of ``runs`` synchronised calls, after one warm-up."""
    times = []
    for i in range(runs + 1):
        sync(backend)
        t0 = time.perf_counter()
        fn()
        sync(backend)
        if i:
            times.append(time.perf_counter() - t0)
    return min(times)


def floors(backend, nbytes: int, runs: int) -> dict:
    """Copy bandwidths in bytes/s at ``nbytes`` a copy."""
    xp = backend.xp
    src = xp.arange(nbytes // 8, dtype=xp.int64)
    dst = xp.empty_like(src)
    out = {"bytes": int(src.nbytes)}
    out["device_copy"] = 2 * src.nbytes / best(backend, lambda: dst.__setitem__(Ellipsis, src), runs)
    if not backend.is_gpu:
        return out
    import cupyx

    stream = xp.cuda.get_current_stream()
    pageable = np.arange(src.size, dtype=np.int64)
    pinned = cupyx.empty_pinned(src.shape, dtype=np.int64)
    pinned[...] = pageable
    out["h2d_pageable"] = src.nbytes / best(backend, lambda: dst.set(pageable), runs)
    out["d2h_pageable"] = src.nbytes / best(backend, lambda: dst.get(out=pageable), runs)
    out["h2d_pinned"] = src.nbytes / best(backend, lambda: dst.set(pinned, stream=stream), runs)
    out["d2h_pinned"] = src.nbytes / best(backend, lambda: dst.get(out=pinned, stream=stream), runs)
    return out


#: name -> (bench call, input bytes a row it must read, output bytes a row of output)
def cases(n: int):
    return {
        "filter on-batch": (lambda b, r, res: bench_filter(b, n, r, "on-batch", True, resident=res), ROW_BYTES),
        "filter on-event": (lambda b, r, res: bench_filter(b, n, r, "on-event", True, resident=res), ROW_BYTES),
        "sort push+drain": (lambda b, r, res: bench_sort(b, n, r, resident=res), ROW_BYTES),
        "tumble": (lambda b, r, res: bench_window(b, n, r, False, resident=res), 24),
        "hop": (lambda b, r, res: bench_window(b, n, r, True, resident=res), 24),
        "session": (lambda b, r, res: bench_session(b, n, r, resident=res), 24),
    }


def output_rows(name: str, n: int, extra: dict) -> int:
    if name.startswith("filter"):
        return n - extra.get("late_rows", 0)
    if name.startswith("sort"):
        return extra["released"]
    return extra["groups"]


OUT_ROW_BYTES = {"filter": ROW_BYTES, "sort": ROW_BYTES, "tumble": 40, "hop": 40, "session": 40}


def case_args(doc: str, runs: int, out: str) -> argparse.Namespace:
    """The command line of a script that runs :func:`cases` (this one, ``gpu_profile.py``)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--backend", default="gpu", choices=["cpu", "gpu"])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=runs)
    ap.add_argument("--only", default="", help="only the operators whose name contains this")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / out))
    return ap.parse_args()


def main() -> int:
    args = case_args(__doc__, 5, "floors")
    backend = gpuwm.get_backend(args.backend)
    n = args.rows
    fl = floors(backend, n * ROW_BYTES, args.runs)
    print("floors (GB/s):", {k: round(v / 1e9, 2) for k, v in fl.items() if k != "bytes"})
    rows = []
    for name, (call, in_bytes) in cases(n).items():
        if args.only and args.only not in name:
            continue
        for resident in (True, False):
            if not resident and not backend.is_gpu:
                continue  # no transfer on the CPU backend: host and resident are the same
            med, lo, hi, extra = call(backend, args.runs, resident)
            out_b = output_rows(name, n, extra) * OUT_ROW_BYTES[name.split()[0]]
            if resident:
                floor = (n * in_bytes + out_b) / fl["device_copy"]
                if name.startswith("sort") and backend.is_gpu:
                    floor += out_b / fl["d2h_pinned"]  # its drain hands host Arrow back
            else:
                floor = n * ROW_BYTES / fl["h2d_pinned"] + out_b / fl["d2h_pinned"]
            rows.append({"operator": name, "mode": "resident" if resident else "host", "rows": n,
                         "seconds": med, "min": lo, "max": hi, "rows_per_s": n / med,
                         "floor_seconds": floor, "fraction_of_floor": floor / med, **extra})
            print(f"{name:16} {rows[-1]['mode']:8} {n / med / 1e6:9.1f} M rows/s  {med * 1e3:8.2f} ms"
                  f"  floor {floor * 1e3:7.2f} ms  = {floor / med:6.1%} of floor", flush=True)
    cpu_filter = None
    if backend.is_gpu and (not args.only or args.only in "filter on-batch"):
        cpu_filter = bench_filter(gpuwm.get_backend("cpu"), n, args.runs, "on-batch", True)[0]
        gpu_host = next(r["seconds"] for r in rows if r["operator"] == "filter on-batch" and r["mode"] == "host")
        print(f"filter on-batch, host Arrow: GPU {gpu_host * 1e3:.2f} ms vs this machine's CPU backend "
              f"{cpu_filter * 1e3:.2f} ms = {cpu_filter / gpu_host:.2f}x")
    device = platform.processor() or platform.machine()
    if backend.is_gpu:
        device = backend.xp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    md = [f"# Floors and fraction of floor ({device}, {n:,} rows, backend {backend.name})", "",
          "| floor | GB/s |", "|---|---|"]
    md += [f"| {k} | {v / 1e9:.2f} |" for k, v in fl.items() if k != "bytes"]
    md += ["", "| operator | mode | M rows/s | ms | floor ms | fraction of floor |", "|---|---|---|---|---|---|"]
    md += [f"| {r['operator']} | {r['mode']} | {r['rows_per_s'] / 1e6:.1f} | {r['seconds'] * 1e3:.2f} | "
           f"{r['floor_seconds'] * 1e3:.2f} | {r['fraction_of_floor']:.1%} |" for r in rows]
    if cpu_filter is not None:
        md += ["", f"On-batch filter, host Arrow: CPU backend {cpu_filter * 1e3:.2f} ms; GPU/CPU speed-up "
                   f"{cpu_filter / gpu_host:.2f}x (target >= 3x)."]
    out = write_results(args.out, {"device": device, "floors": fl, "rows": rows, "cpu_filter_s": cpu_filter}, md)
    print(f"wrote {out / 'results.md'}")
    print(json.dumps({"floors_gbps": {k: v / 1e9 for k, v in fl.items() if k != "bytes"}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
