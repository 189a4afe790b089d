"""Deduplication within the watermark against the row-at-a-time reference
(Spark's dropDuplicatesWithinWatermark), on every backend, with
snapshot/restore through the state store's parts at any point."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpuwm
from gpuwm.dedup import Dedup
from gpuwm.keys import KeyCodec
from kernels.dedup import lookup

from .reference import RefDedup

rows_st = st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 60)), st.one_of(st.none(), st.integers(0, 6)),
                             st.integers(0, 2)), max_size=30)
ops_st = st.lists(st.one_of(st.tuples(st.just("push"), rows_st), st.tuples(st.just("drain"), st.integers(0, 12))),
                  max_size=14)


def _table(rows, keys: str) -> pa.Table:
    k = pa.array([None if r[1] is None else f"key{r[1]}" for r in rows], pa.string()) if keys == "str" else \
        pa.array([r[1] for r in rows], pa.int64())
    return pa.table({"t": pa.array([r[0] for r in rows], pa.int64()), "k": k,
                     "k2": pa.array([r[2] for r in rows], pa.int16())})


def _key_cols(keys: str) -> list[str]:
    return ["k", "k2"] if keys == "two" else ["k"]


def _rows(t: pa.Table, keys: str) -> list[tuple]:
    conv = (lambda k: None if k is None else int(k.removeprefix("key"))) if keys == "str" else (lambda k: k)
    return [(r["t"], conv(r["k"]), r["k2"]) for r in t.to_pylist()]


def _through_store(d: Dedup, backend: str) -> Dedup:
    """What the Spark runtime does between batches: save the small tables and
    every part, load them into a fresh operator."""
    parts = {name: d.snapshot_part(name) for name in d.state_parts()}
    tables = d.state_tables()
    d.mark_saved(list(parts))
    return Dedup(d.key, d.column, d.spec.delay, backend=backend).load_state(tables, parts)


@pytest.mark.parametrize("keys,delay", [("int", 15), ("str", 15), ("two", 15), ("two", None), ("str", None)])
@pytest.mark.parametrize("max_runs,ratio,freeze", [(1, 4, 1 << 20), (3, 0, 1 << 20), (8, 4, 1 << 20), (8, 4, 3)])
@given(ops=ops_st, stop=st.integers(0, 14))
def test_dedup_matches_reference(backend, keys, delay, max_runs, ratio, freeze, ops, stop, monkeypatch):
    """max_runs=1 merges runs at every drain, ratio 0 the smallest pairs
    beyond 3 runs, (8, 4) in size tiers, and with runs frozen at 3 keys;
    string keys compact their dictionary at every drain; the operator is
    saved and reloaded before op ``stop``, and a snapshot() round trip is
    checked too. ``delay`` None: every key held forever (dropDuplicates
    without the event time)."""
    monkeypatch.setattr(Dedup, "MAX_RUNS", max_runs)
    monkeypatch.setattr(Dedup, "MERGE_RATIO", ratio)
    monkeypatch.setattr(Dedup, "FREEZE_MIN", freeze)
    monkeypatch.setattr(KeyCodec, "COMPACT_MIN", 0)
    cols = _key_cols(keys)
    d = Dedup(cols, "t", delay=delay, backend=backend)
    ref = RefDedup(delay, (lambda r: (r[1], r[2])) if keys == "two" else (lambda r: (r[1],)))
    w = 0
    for i, (op, arg) in enumerate(ops):
        if i == stop:
            d = _through_store(d, backend)
        if op == "push":
            assert _rows(d.push(_table(arg, keys)), keys) == ref.push(arg)
        else:
            w += arg
            assert d.drain(w).num_rows == 0
            ref.drain(w)
        assert d.state_rows == len(ref.held)
    assert (d.duplicate_rows, d.null_rows) == (ref.dups, ref.nulls)
    w += 10**9  # far past every event time: a delay's keys all expire, forever's all stay
    d.drain(w)
    ref.drain(w)
    assert d.state_rows == len(ref.held)
    twin = Dedup(cols, "t", delay=delay, backend=backend).restore(d.snapshot())
    probe = [(w + 1, k, k2) for k in (None, *range(7)) for k2 in range(3)]
    assert _rows(twin.push(_table(probe, keys)), keys) == _rows(d.push(_table(probe, keys)), keys) == ref.push(probe)


def test_spark_semantics_vector():
    """Spark's StreamingDeduplicationWithinWatermarkSuite shape: delay 10 s;
    a key is held until its first event time + 10 s <= the watermark."""
    T = pa.timestamp("us", tz="UTC")
    d = Dedup(["id"], "ts", delay="10 seconds", backend="cpu")
    mk = lambda ids, secs: pa.table({"id": ids, "ts": pa.array([s * 1_000_000 for s in secs], pa.int64()).cast(T)})  # noqa: E731
    assert d.push(mk(["a", "a", "b"], [1, 2, 3])).column("id").to_pylist() == ["a", "b"]
    d.drain(pa.scalar(10_000_000, T).as_py())  # W = 10 s: a expires at 11 s, b at 13 s, both held
    assert d.push(mk(["a", "b"], [12, 13])).num_rows == 0
    d.drain(pa.scalar(11_000_000, T).as_py())  # W = 11 s: a's 1 s + 10 s <= 11 s, forgotten
    assert d.push(mk(["a", "b"], [14, 14])).column("id").to_pylist() == ["a"]
    assert (d.duplicate_rows, d.state_rows) == (4, 2)


def test_state_is_bounded_by_the_watermark():
    """Keys stream past; what the dedup holds stays about delay / step keys,
    in a bounded number of runs."""
    d = Dedup(["id"], "t", delay=1_000, backend="cpu")
    for i in range(60):
        ids = np.arange(i * 500, (i + 1) * 500)
        d.push(pa.table({"id": ids, "t": ids}))
        d.drain(int(ids[-1]))
        assert d.state_rows <= 1_000 and len(d._runs) <= 4
    assert d.rows_out == 30_000 and d.duplicate_rows == 0


def test_kernels_against_python():
    rng = np.random.default_rng(0)
    for _ in range(50):
        k1, k2 = rng.integers(0, 5, 40), rng.integers(-3, 3, 40)
        run = sorted({(int(a), int(b)) for a, b in zip(rng.integers(0, 5, 15), rng.integers(-3, 3, 15))})
        r1, r2 = np.array([a for a, _ in run]), np.array([b for _, b in run])
        got = lookup(np, [r1, r2], [k1, k2]).tolist()
        assert got == [run.index(k) if k in run else -1 for k in zip(k1.tolist(), k2.tolist())]
        one = np.unique(r1)
        assert lookup(np, [one], [k1]).tolist() == [int(np.flatnonzero(one == k)[0]) if k in one else -1
                                                    for k in k1.tolist()]


def test_dedup_errors():
    with pytest.raises(gpuwm.ConfigError, match="dedup needs key columns"):
        Dedup([], "t", 5)
    with pytest.raises(gpuwm.ConfigError, match="delay must be >= 0"):
        Dedup(["k"], "t", -1)
    with pytest.raises(gpuwm.SchemaError, match="dedup key column 'nope' not found"):
        Dedup(["nope"], "t", 5).push(pa.table({"t": [1], "k": [1]}))
    d = Dedup(["k"], "t", 5)
    d.push(pa.table({"t": [1], "k": [1]}))
    with pytest.raises(gpuwm.StateError, match="not of a Dedup"):
        Dedup(["k"], "t", 5).restore({"state": pa.table({"x": [1]})})
    with pytest.raises(gpuwm.StateError, match="missing its part"):
        Dedup(["k"], "t", 5).load_state(d.state_tables(), {})
