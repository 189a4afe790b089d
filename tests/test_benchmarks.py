"""The GPU benchmarks' scripts stay runnable on machines without a GPU:
``benchmarks/gpu_floors.py`` on the CPU backend, at a small size (its
operator calls check their own results, and a wrong one fails the run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_floors_benchmark_runs_on_cpu(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_floors.py"), "--backend", "cpu",
                           "--rows", "50000", "--runs", "1", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["floors"]["device_copy"] > 0 and "h2d_pinned" not in res["floors"]  # no transfers on a CPU
    ops = {r["operator"] for r in res["rows"]}
    assert ops == {"filter on-batch", "filter on-event", "sort push+drain", "tumble", "hop", "session"}
    for r in res["rows"]:
        assert r["mode"] == "resident" and r["seconds"] > 0 and 0 < r["fraction_of_floor"]
    assert "fraction of floor" in (tmp_path / "results.md").read_text()


def test_spark_task_timing_runs_on_gpu_sim(monkeypatch, capsys, tmp_path):
    """``gpu_spark_tasks.py --time`` (GPU vs CPU per batch, Parquet read in
    the timing, time per step) on the simulated GPU backend, small: it runs,
    checks, and charges each step where it happens."""
    import pytest

    pytest.importorskip("pyspark")
    import gpuwm

    from .conftest import HostGpu

    monkeypatch.setattr(gpuwm.backend, "gpu_available", lambda: True)
    monkeypatch.setattr(gpuwm.backend, "_gpu_backend", lambda: HostGpu("gpu", __import__("numpy"), None))
    from gpuwm.spark.executor import device

    monkeypatch.setattr(device, "use_task_gpu", lambda b: None)  # gpu-sim has no CUDA device to pick
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import gpu_spark_tasks

    out_json = tmp_path / "steps.json"
    assert gpu_spark_tasks.time_tasks(gpu_spark_tasks.build_plans(), per=4_000, nbatches=5, out=str(out_json)) == 0
    out = capsys.readouterr().out
    assert out.count("(target >= 3x)") == len(gpu_spark_tasks.CASES) and "MISMATCH" not in out
    cases = json.loads(out_json.read_text())["cases"]
    assert len(cases) == len(gpu_spark_tasks.CASES)
    for case, r in cases.items():  # each step was seen where it happens, on both backends
        for backend in ("gpu", "cpu"):
            steps = r["steps_ms"][backend]
            assert steps["read (Parquet decode)"] > 0 and steps["state save"] > 0, (case, steps)
            assert r["task_ms_per_batch"][backend] < r["ms_per_batch"][backend]
            if case.startswith("sort"):
                assert steps["sink write (Parquet)"] > 0, (case, steps)
        assert r["steps_ms"]["gpu"]["host -> device copy"] > 0 and "host -> device copy" not in r["steps_ms"]["cpu"]


def test_gpu_profile_runs_on_cpu(tmp_path):
    """``gpu_profile.py`` (the resident operators' wall time against the
    device's busy time) runs on the CPU backend: wall times and the host's
    profile, no device part."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_profile.py"), "--backend", "cpu",
                           "--rows", "20000", "--runs", "1", "--only", "tumble", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = json.loads((tmp_path / "profile.json").read_text())
    assert list(rep) == ["tumble"] and rep["tumble"]["wall_ms"] > 0 and "busy_ms" not in rep["tumble"]
    assert "_finalize" in (tmp_path / "profile.md").read_text()  # the drain's host step is in the profile


def test_gpu_profile_reads_a_chrome_trace(tmp_path):
    """The device summary of a Chrome trace: busy time is the union of the
    kernels' and copies' intervals (overlaps counted once), launches and
    synchronising calls counted by name."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_profile import device_summary

    ev = [
        {"ph": "X", "cat": "kernel", "name": "k1", "ts": 0, "dur": 10},
        {"ph": "X", "cat": "kernel", "name": "k1", "ts": 5, "dur": 10},  # overlaps the first: 0..15
        {"ph": "X", "cat": "kernel", "name": "k2", "ts": 30, "dur": 5},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH", "ts": 40, "dur": 4, "args": {"bytes": 800}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0, "dur": 1},
        {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "ts": 2, "dur": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": 45, "dur": 3},
        {"ph": "i", "cat": "kernel", "name": "instant", "ts": 1},
    ]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    s = device_summary(str(p))
    assert s["kernel_count"] == 3 and s["kernel_ms"] == 0.025 and s["busy_ms"] == 0.024
    assert s["copy_count"] == 1 and s["copy_bytes"] == 800 and s["launches"] == 2
    assert s["syncing_calls"] == {"cudaStreamSynchronize": {"count": 1, "ms": 0.003}}
    assert s["top_kernels"][0][1:] == (2, "k1")
