"""The Spark runtime's task functions, called in-process (no JVM): one task
per batch (vnodes=1) and the shuffled path (filter per input partition, then
per vnode) against the engine-independent operators — on the CPU and on the
simulated GPU, where a batch goes to the device once and stays there from
the filter to the drain."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

import gpuwm  # noqa: E402
from gpuwm.session import SessionSpec  # noqa: E402
from gpuwm.sort import SortSpec  # noqa: E402
from gpuwm.spark import Pipeline
from gpuwm.spark.executor import tasks  # noqa: E402
from gpuwm.spark.executor.exchange import FLOW_SCHEMA  # noqa: E402
from gpuwm.spark.executor.plan import Plan, Sink  # noqa: E402
from gpuwm.spark.storage import store
from gpuwm.spark.storage.checkpoint import Checkpoint, Location  # noqa: E402
from gpuwm.watermark import WatermarkSpec  # noqa: E402
from gpuwm.window import WindowSpec  # noqa: E402

from .runtime_replay import NOW, batch_output, commit, mismatch, run_operators, run_tasks  # noqa: E402
from .runtime_replay import batches as _batches  # noqa: E402
from .runtime_replay import pipeline as _pipeline  # noqa: E402


def _plan(tmp_path, spec, schema: pa.Schema) -> Plan:
    """A one-stage plan over ``schema`` (event time ``t``), profile risingwave, on the CPU."""
    return Plan(_ck(tmp_path), "cpu", 1, WatermarkSpec("t", 0), (spec,), Sink("console"), schema)


@pytest.mark.parametrize("vnodes", [1, 3])
@pytest.mark.parametrize("op", ["window", "tumble", "session", "sort", "chain", "dedup"])
def test_tasks_equal_operators(backend, op, vnodes, tmp_path, monkeypatch):
    import gpuwm.spark.executor.device as device

    monkeypatch.setattr(device, "use_task_gpu", lambda b: None)  # gpu-sim has no CUDA device to pick
    batches = _batches()
    plan = _pipeline(tmp_path, op, backend, vnodes)._plan()
    got, nparts = run_tasks(plan, batches)
    exp = run_operators(op, batches)
    assert mismatch(op, vnodes, got, nparts, exp) is None


@pytest.mark.parametrize("vnodes", [1, 3])
def test_a_toy_operator_runs_through_the_registry_alone(tmp_path, vnodes):
    """tests/toy_operator.py's ``hold`` stage — no file of gpuwm/ names it:
    defining its spec registered the kind — added as the JSON spec's stage
    ``{"hold": {"by": ["auction"]}}``, runs in the Spark tasks (state saved
    every batch, read back from the store every other batch, over 1 and 3
    vnodes) and gives what a row-at-a-time model of it gives: each row the
    filter passed, released in the batch whose watermark reaches it."""
    from datetime import timedelta

    from gpuwm.operator import stage_kinds
    from gpuwm.spark.front.spec import add_stage

    from . import toy_operator

    assert stage_kinds()["hold"] is toy_operator.HoldSpec
    batches = _batches()
    p = _pipeline(tmp_path, "none", "cpu", vnodes)
    add_stage(p, 0, {"hold": {"by": ["auction"]}})
    plan = p._plan()
    assert [s.kind for s in plan.stages] == ["hold"] and plan.segments[0].keys == (("auction",) if vnodes > 1 else ())
    got, _ = run_tasks(plan, batches)

    f = gpuwm.WatermarkFilter("date_time", delay=timedelta(seconds=2), split="split", profile="spark",
                              backend="cpu")
    held, exp, carried = [], [], []
    for parts in batches:
        held += f.process(pa.concat_tables(parts)).to_pylist()
        w = f.output_watermark
        due = [w is not None and r["date_time"] <= w for r in held]
        exp.append(sorted((r for r, d in zip(held, due) if d), key=repr))
        held = [r for r, d in zip(held, due) if not d]
        carried.append(len(held))
    assert sum(map(len, exp)) > 1_000 and min(carried) > 0  # rows held across every batch
    assert [sorted(g.to_pylist(), key=repr) if g is not None else [] for g in got] == exp


def test_a_failed_task_attempt_leaves_no_half_updated_state(backend, tmp_path, monkeypatch):
    """Saving the state fails after the operator took the batch: Spark
    retries the task, which must start again from batch_id - 1, not from the
    operator the failed attempt changed (it stays in executor memory)."""
    import gpuwm.spark.executor.device as device

    monkeypatch.setattr(device, "use_task_gpu", lambda b: None)
    batches = _batches()
    plan = _pipeline(tmp_path, "window", backend, 1)._plan()
    real = store.save_operator
    calls = {"n": 0}

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("disk full")
        return real(*a, **k)

    monkeypatch.setattr(store, "save_operator", flaky)
    fstate, prev, outs = None, None, []
    for batch_id, parts in enumerate(batches):
        for attempt in (1, 2):
            try:
                res = pa.Table.from_batches(list(tasks.single_task(
                    plan, fstate, NOW, batch_id, prev, iter(pa.concat_tables(parts).to_batches()))),
                    schema=FLOW_SCHEMA)
                break
            except OSError:
                assert attempt == 1
        fstate, prev = commit(plan, batch_id, res)
        outs.append(batch_output(plan, batch_id)[0])
    assert calls["n"] > 3
    exp = run_operators("window", batches)
    for g, e in zip(outs, exp):
        assert (g is None and not e.num_rows) or sorted(g.to_pylist(), key=repr) == sorted(e.to_pylist(), key=repr)


def _ck(tmp_path) -> Checkpoint:
    return Checkpoint(Location.of(str(tmp_path)))


def test_window_state_is_saved_incrementally(tmp_path):
    """A window the batch did not touch stays where the previous version
    wrote it (the new version's footer names that place); what is loaded
    back is the operator's whole state."""
    first = pa.table({"t": [1, 2, 15, 25], "k": ["a", "b", "a", "c"], "v": [1, 2, 3, 4]})
    plan = _plan(tmp_path, WindowSpec(gpuwm.Tumble("t", 10), ("k",), {"n": ("*", "count"), "s": ("v", "sum")}),
                 first.schema)
    op = plan.build(0)
    op.push(first)
    v0 = store.save_operator(plan.checkpoint, 0, 0, 0, op, None)
    op.push(pa.table({"t": [16, 17], "k": ["b", "a"], "v": [5, 6]}))  # window 10 only
    v1 = store.save_operator(plan.checkpoint, 1, 0, 0, op, v0.places)
    same = {s: v1.places[f"win.{s}"] == v0.places[f"win.{s}"] for s in (0, 10, 20)}
    assert same == {0: True, 10: False, 20: True}
    assert v1.places["win.10"][0] == v1.name and v1.files == sorted({v0.name, v1.name})
    store._CACHE.clear()
    back, places = store.load_operator(plan, 0, store.Prev(1, {"0/0": v1.name}), 0)
    assert places == v1.places
    assert back.snapshot()["state"].equals(op.snapshot()["state"])
    assert back.drain(30).to_pylist() == op.drain(30).to_pylist()


def _save_and_reload(plan: Plan, op, batch_id: int, places: dict):
    """Save ``op`` as version ``batch_id`` (over the previous one's parts),
    note its parts' places in ``places[batch_id]``, and load it back from the
    store (cache cleared)."""
    saved = store.save_operator(plan.checkpoint, batch_id, 0, 0, op, places.get(batch_id - 1))
    places[batch_id] = saved.places
    store._CACHE.clear()
    back, got = store.load_operator(plan, 0, store.Prev(batch_id, {"0/0": saved.name}), 0)
    assert got == saved.places
    return back


def test_sort_state_is_saved_incrementally(tmp_path):
    """A sort run saved before stays where it was written, not written
    again, until more of it has been drained than is left; the state loaded back from the
    files drains exactly like the operator in memory."""
    plan = _plan(tmp_path, SortSpec("t", ("k",)), pa.schema([("t", pa.int64()), ("k", pa.int64())]))
    op = plan.build(0)
    files = {}

    def save(batch_id):
        back = _save_and_reload(plan, op, batch_id, files)
        assert back.snapshot().equals(op.snapshot())
        return back

    op.push(pa.table({"t": list(range(10, 20)), "k": list(range(10))}))   # run 0: t 10..19
    save(0)
    op.push(pa.table({"t": [30, 5, 31], "k": [1, 2, 3]}))                 # run 1
    assert op.drain(12).column("t").to_pylist() == [5, 10, 11]            # run 0 keeps 8 of 10
    save(1)
    assert files[1]["run.0"] == files[0]["run.0"]                         # kept in place
    assert op.drain(15).column("t").to_pylist() == [12, 13, 14]           # run 0: 5 left, 5 dead
    save(2)
    assert files[2]["run.0"] == files[0]["run.0"]                         # dead == live: still kept
    op.drain(16)                                                           # 6 dead > 4 live: rewritten
    back = save(3)
    assert files[3]["run.0"] != files[0]["run.0"]
    assert files[3]["run.1"] == files[1]["run.1"]
    assert back.drain(40).to_pylist() == op.drain(40).to_pylist()
    assert back.buffered_rows == 0 and back.rows_out == op.rows_out == 13


def test_session_state_is_saved_incrementally(tmp_path, monkeypatch):
    """Session state in the store: an older level's sessions stay where
    they were written while only its alive bits change; what is loaded back from the files
    (cache cleared) drains like the operator in memory, at every version."""
    from gpuwm.session import SessionAggregate

    monkeypatch.setattr(SessionAggregate, "MERGE_RATIO", 0)  # a level per push, never merged
    plan = _plan(tmp_path, SessionSpec(gpuwm.Session("t", 5), ("k",), {"n": ("*", "count"), "s": ("v", "sum")}),
                 pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.int64())]))
    op = plan.build(0)
    inode = {}

    def save(batch_id):
        back = _save_and_reload(plan, op, batch_id, inode)
        assert back.snapshot()["state"].equals(op.snapshot()["state"]) and back.state_rows == op.state_rows
        return back

    op.push(pa.table({"t": [1, 3, 4], "k": ["a", "b", "c"], "v": [1, 2, 3]}))  # level 0
    save(0)
    op.push(pa.table({"t": [6], "k": ["d"], "v": [4]}))  # a new key: level 1, level 0 untouched
    save(1)
    assert inode[1]["sessions.0"] == inode[0]["sessions.0"]                  # kept in place
    assert inode[1]["sessions.0.alive"] == inode[0]["sessions.0.alive"]
    op.push(pa.table({"t": [5], "k": ["b"], "v": [5]}))  # b's session leaves level 0: a bit flips
    save(2)
    assert inode[2]["sessions.0"] == inode[0]["sessions.0"]
    assert inode[2]["sessions.0.alive"] != inode[1]["sessions.0.alive"]
    assert inode[2]["sessions.1"] == inode[1]["sessions.1"]
    assert op.drain(6).num_rows == 1  # a's [1, 6) from level 0: 2 of 3 dead, compacted into a new level
    back = save(3)
    assert "sessions.0" not in inode[3] and "sessions.3" in inode[3]
    assert back.drain(30).to_pylist() == op.drain(30).to_pylist() and back.state_rows == 0


def test_checkpoint_and_sinks_are_uris_as_spark_takes_them(tmp_path):
    """A checkpoint or sink is a local path or a URI of any file system
    (kept as Spark takes it); ``file:`` names a local path; a scheme no file
    system serves is refused in one line when the location is first used."""
    from gpuwm.errors import ConfigError

    p = _pipeline(tmp_path, "sort", "cpu", 1)
    assert str(Pipeline(p.df, "s3a://bucket/ck/").checkpoint) == "s3a://bucket/ck"
    assert p.write_parquet("gs://b/out")._sink.path == "gs://b/out"
    assert str(Pipeline(p.df, f"file://{tmp_path}/ck").checkpoint) == f"{tmp_path}/ck"
    assert p.write_parquet(f"file:{tmp_path}/o")._sink.path == f"{tmp_path}/o"
    with pytest.raises(ConfigError, match="names no bucket"):
        Pipeline(p.df, "s3a:///ck")
    with pytest.raises(ConfigError, match=r"^checkpoint location 'nosuchfs://x/ck' cannot be used: no file system "
                                          r"for nosuchfs: URIs"):
        Location.of("nosuchfs://x/ck").probe("checkpoint location")


def test_a_task_uses_its_gpu_and_allocates_from_rmm_where_installed(monkeypatch):
    """``use_task_gpu`` on stand-ins for CuPy, RMM and the task context (no
    GPU here): the task's ``gpu`` resource picks the device, and where
    ``rmm`` is importable (RAPIDS Python workers) CuPy's allocator becomes
    RMM's — once per device — so gpuwm's kernels draw from the pool
    ``spark.rapids.python.memory.gpu.allocFraction`` sizes; without RMM
    CuPy keeps its own."""
    import sys
    import types

    import gpuwm.spark.executor.device as device

    used, allocators = [], []
    cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=lambda: 4),
                                 Device=lambda d: types.SimpleNamespace(use=lambda: used.append(d)),
                                 set_allocator=allocators.append)
    fake_cupy = types.ModuleType("cupy")
    fake_cupy.cuda = cuda
    rmm_alloc = object()
    fake_rmm = types.ModuleType("rmm.allocators.cupy")
    fake_rmm.rmm_cupy_allocator = rmm_alloc

    class Ctx:
        def resources(self):
            return {"gpu": types.SimpleNamespace(addresses=["2"])}

        def partitionId(self):
            return 7

    import pyspark

    monkeypatch.setattr(pyspark.TaskContext, "get", staticmethod(lambda: Ctx()))
    monkeypatch.setattr("gpuwm.backend.gpu_available", lambda: True)
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(device, "_CONFIGURED", set())
    # no RMM: the device is chosen, CuPy's allocator left alone
    monkeypatch.setitem(sys.modules, "rmm", None)
    device.use_task_gpu("gpu")
    assert used == [2] and allocators == []
    # RMM installed: its allocator, set once for the device
    monkeypatch.setattr(device, "_CONFIGURED", set())
    for name in ("rmm", "rmm.allocators"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "rmm.allocators.cupy", fake_rmm)
    device.use_task_gpu("gpu")
    device.use_task_gpu("gpu")
    assert used == [2, 2, 2] and allocators == [rmm_alloc]
    device.use_task_gpu("cpu")  # the CPU backend touches no device
    assert used == [2, 2, 2]


def test_a_planned_task_takes_its_batch_from_the_jobs_local_property(tmp_path, monkeypatch):
    """The job planned once (direct input, one vnode) gets each batch's
    arguments from a local property: the task given them runs that batch as
    ``single_task`` does; a task that finds none fails, naming it."""
    from types import SimpleNamespace

    import pyspark

    plan = _plan(tmp_path, WindowSpec(gpuwm.Tumble("t", 10), ("k",), {"n": ("*", "count")}),
                 pa.schema([("t", pa.int64()), ("k", pa.int64())]))
    rows = pa.record_batch({"t": [1, 12, 25], "k": [1, 1, 2]})

    def ran(batches) -> list:  # each result's counts and watermarks, and the rows it wrote
        out = []
        for r in pa.Table.from_batches(list(batches)).to_pylist():
            m = json.loads(r["__metrics"]) if r["__metrics"] else {}
            keep = ("input_rows", "late_rows", "rows_emitted", "watermark", "output_watermark", "state_rows")
            out.append(({k: m.get(k) for k in keep},
                        plan.checkpoint.loc.read_table(m["output"]).to_pylist() if "output" in m else None))
        return out

    want = ran(tasks.single_task(plan, None, NOW, 0, None, iter([rows])))
    props = {tasks.ARGS_PROPERTY: tasks.job_args(None, NOW, 0, None, None, False)}
    monkeypatch.setattr(pyspark.TaskContext, "get", staticmethod(lambda: SimpleNamespace(getLocalProperty=props.get)))
    got = ran(tasks.planned_single_task(plan, iter([rows])))
    assert got == want and [m["input_rows"] for m, _ in got if m["input_rows"]] == [3], got
    assert any(rows for _, rows in got), got  # window [0, 10) closed
    props.clear()
    with pytest.raises(gpuwm.StateError, match="found no batch arguments in local property 'gpuwm.batch.args'"):
        list(tasks.planned_single_task(plan, iter([rows])))


@pytest.mark.parametrize("gap_s", [0.0, 0.15])
def test_two_drivers_taking_one_checkpoint_at_once_one_wins(tmp_path, monkeypatch, gap_s):
    """Two drivers both find the lease free and both write it: exactly one
    starts, the other is refused in one line. On a slow store (each write
    0.1 s, the other driver's write a further ``gap_s`` later than ours)
    the wait after writing grows with the store's latency, so the later
    write is still seen; a fixed 50 ms wait would miss it."""
    import threading

    from gpuwm.spark.storage.checkpoint import Owner

    ck = Checkpoint(Location.of(str(tmp_path / "ck")))
    read_json, publish_json = Location.read_json, Location.publish_json
    both_read = threading.Barrier(2)
    late = threading.local()

    def read(self, rel):
        got = read_json(self, rel)
        if rel == Checkpoint.OWNER and not getattr(late, "read", False):  # the first read: both find it free
            late.read = True
            both_read.wait(timeout=10)
        return got

    def publish(self, rel, obj):
        if rel == Checkpoint.OWNER:
            time.sleep(0.1 + (gap_s if threading.current_thread().name == "second" else 0.0))
        publish_json(self, rel, obj)

    monkeypatch.setattr(Location, "read_json", read)
    monkeypatch.setattr(Location, "publish_json", publish)
    got: dict[str, object] = {}

    def take(name):
        try:
            got[name] = Owner.take(ck).run
        except gpuwm.ConfigError as e:
            got[name] = e

    threads = [threading.Thread(target=take, args=(n,), name=n) for n in ("first", "second")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    won = [n for n, v in got.items() if isinstance(v, str)]
    lost = [v for v in got.values() if not isinstance(v, str)]
    assert len(won) == 1 and len(lost) == 1, got
    if gap_s:
        assert won == ["second"], got  # the later write
    assert str(lost[0]).startswith(f"checkpoint {ck} was just taken by another query run {got[won[0]]} "), got
    assert "\n" not in str(lost[0])
