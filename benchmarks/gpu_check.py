"""GPU vs CPU: run every operator on both backends over the same random
inputs and require identical output. Needs CuPy and a GPU; no pytest, no
pyspark, no Java. Where cuDF is installed, the GPU runs twice: with cuDF
holding the string columns, and with CuPy alone (``GPUWM_CUDF=0``). Exit
status 0 only if every comparison matched.

Run:  PYTHONPATH=. python benchmarks/gpu_check.py [--rows 200000] [--seeds 5]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gpuwm  # noqa: E402


def stream(n: int, seed: int) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    ts = (np.arange(n) // 10 + rng.integers(-500, 0, n)).astype(np.int64)
    tsa = pa.array(ts, mask=rng.random(n) < 0.01)
    t = pa.table({"t": tsa, "k": rng.integers(0, 1000, n), "s": rng.integers(0, 6, n).astype(np.int32),
                  "v": pa.array(rng.random(n), mask=rng.random(n) < 0.05),
                  "name": pa.array([f"n{i % 37}" for i in range(n)])})
    cuts = np.sort(rng.integers(0, n, 6))
    return [t.slice(a, b - a) for a, b in zip([0, *cuts], [*cuts, n])]


def run_all(backend: str, chunks: list[pa.Table]) -> list:
    outs = []
    for profile in ("risingwave", "spark", "flink"):
        for emit in ("on-batch", "on-event"):
            if profile == "spark" and emit == "on-event":
                continue
            f = gpuwm.WatermarkFilter("t", delay=300, profile=profile, emit=emit, split="s", nulls="keep",
                                      backend=backend)
            outs += [f.process(c).to_pydict() for c in chunks] + [f.watermark, f.late_rows]
    s = gpuwm.StreamSort("t", key=["k", "name"], backend=backend)
    a = gpuwm.WindowAggregate(gpuwm.Hop("t", size=400, slide=100), by=["k"],
                              aggs={"n": ("*", "count"), "s": ("v", "sum"), "m": ("v", "max"), "a": ("v", "mean")},
                              backend=backend)
    u = gpuwm.WindowAggregate(gpuwm.Tumble("t", 250), by=["name"], aggs={"n": ("*", "count")}, emit="on-update",
                              backend=backend)
    g = gpuwm.WindowAggregate(gpuwm.Session("t", 40), by=["k", "name"],
                              aggs={"n": ("*", "count"), "m": ("v", "max"), "lo": ("t", "min")}, backend=backend)
    gp = gpuwm.WindowAggregate(gpuwm.Session("t", 40), by=["k"], aggs={"n": ("*", "count")}, backend=backend)
    gp.FILTER_MIN = 1  # every level of its state searched through a key filter (kernels.key_filter)
    w = 0
    for c in chunks:
        s.push(c)
        a.push(c)
        g.push(c)
        gp.bind(c.schema)
        half = c.num_rows // 2  # partial sessions of two "tasks", merged here
        gp.push_partials(pa.concat_tables([gp.partials(c.slice(0, half)), gp.partials(c.slice(half))]))
        outs.append(u.push(c).to_pydict())
        w += 700
        outs += [s.drain(w).to_pydict(), a.drain(w).to_pydict(), u.drain(w).to_pydict(), g.drain(w).to_pydict(),
                 gp.drain(w).to_pydict(), g.late_rows, gp.late_rows]
    outs.append(s.flush().to_pydict())  # the rest of the sort, as the range exchange's merge releases it
    # the Spark runtime's chain: one copy to the device, a Frame from the filter to the operators
    from gpuwm.frame import Frame

    b = gpuwm.get_backend(backend)
    f = gpuwm.WatermarkFilter("t", delay=300, profile="spark", split="s", backend=backend)
    s = gpuwm.StreamSort("t", key=["name", "k"], profile="spark", backend=backend)
    a = gpuwm.WindowAggregate(gpuwm.Tumble("t", 250), by=["name"], aggs={"n": ("*", "count"), "m": ("v", "min")},
                              profile="spark", backend=backend)
    for c in chunks:
        kept, stats = f.filter_local(Frame.from_arrow(c, b))
        f.advance([stats])
        s.push(kept)
        a.push(kept)
        outs += [stats, s.drain(f.output_watermark).to_pydict(), a.drain(f.output_watermark).to_pydict()]
    return outs


def first_difference(x, y, path: str = "") -> str | None:
    """Where the CPU's output ``x`` and the GPU's ``y`` first differ (a path
    and both values), or None when they are the same; floats to 1e-9."""
    if isinstance(x, dict):
        if not isinstance(y, dict) or x.keys() != y.keys():
            return f"{path}: keys {sorted(x)} vs {type(y).__name__} {sorted(y) if isinstance(y, dict) else ''}"
        return next((d for k in x if (d := first_difference(x[k], y[k], f"{path}.{k}")) is not None), None)
    if isinstance(x, list):
        if not isinstance(y, list) or len(x) != len(y):
            return f"{path}: list of {len(x)} vs {type(y).__name__} of {len(y) if hasattr(y, '__len__') else '?'}"
        return next((d for i, (a, b) in enumerate(zip(x, y))
                     if (d := first_difference(a, b, f"{path}[{i}]")) is not None), None)
    if isinstance(x, float) and isinstance(y, float):
        same = abs(x - y) <= 1e-9 * max(1.0, abs(x)) or (x != x and y != y)
    else:
        same = type(x) is type(y) and x == y
    return None if same else f"{path}: cpu {x!r} ({type(x).__name__}) vs gpu {y!r} ({type(y).__name__})"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    if not gpuwm.gpu_available():
        print("gpu_check: no usable GPU (cupy.is_available() is False)")
        return 2
    variants = ["cupy+cudf", "cupy"] if gpuwm.get_backend("gpu").cudf is not None else ["cupy"]
    print(f"gpu_check: GPU backend variants {variants} (cuDF {'found' if len(variants) == 2 else 'not installed'})")
    bad = runs = 0
    for seed in range(args.seeds):
        chunks = stream(args.rows, seed)
        want = run_all("cpu", chunks)
        for variant in variants:
            os.environ["GPUWM_CUDF"] = "1" if variant == "cupy+cudf" else "0"
            diff = first_difference(want, run_all("gpu", chunks), "out")
            bad += diff is not None
            runs += 1
            print(f"seed {seed} [{variant}]: {'identical' if diff is None else 'MISMATCH at ' + diff[:2000]}")
    os.environ.pop("GPUWM_CUDF", None)
    print(f"gpu_check: {runs - bad} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
