"""StreamSort: the RisingWave vector, the reference on random streams, state."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpuwm
from gpuwm.keys import KeyCodec

from .reference import RefSort


def test_risingwave_sort_vector(backend):
    s = gpuwm.StreamSort("ts", key=["pk"], profile="risingwave", backend=backend)
    s.push(pa.table({"pk": [1, 2, 3, 4], "ts": [1, 2, 6, 7]}))
    assert s.drain(3).to_pydict() == {"pk": [1, 2], "ts": [1, 2]}
    s.push(pa.table({"pk": [98, 37, 60], "ts": [4, 5, 8]}))
    assert s.drain(7).to_pydict() == {"pk": [98, 37, 3], "ts": [4, 5, 6]}
    assert s.buffered_rows == 2


op_st = st.one_of(
    st.tuples(st.just("push"), st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 40)),
                                                   st.integers(-3, 3)), max_size=20)),
    st.tuples(st.just("drain"), st.integers(0, 8)),
)
ops_st = st.lists(op_st, max_size=14)


# the same, with flushes (release everything: the end of an input, or a merge of ordered pieces)
ops_flush_st = st.lists(st.one_of(op_st, st.just(("flush", 0))), max_size=14)


@pytest.mark.parametrize("profile", ["risingwave", "spark"])
@pytest.mark.parametrize("keytype", ["int", "str", "none"])
@given(ops=ops_flush_st)
def test_sort_matches_reference(backend, profile, keytype, ops, monkeypatch):
    monkeypatch.setattr(KeyCodec, "COMPACT_MIN", 0)  # compact string keys at every drain that can
    key = [] if keytype == "none" else ["k"]
    s = gpuwm.StreamSort("t", key=key, profile=profile, backend=backend)
    ref = RefSort(inclusive=profile == "spark", key_of=(lambda r: ()) if keytype == "none" else (lambda r: (r[1],)))
    w, ids = 0, 0
    kt = pa.string() if keytype == "str" else pa.int64()
    conv = (lambda k: f"k{k + 3}") if keytype == "str" else (lambda k: k)
    for op, arg in ops:
        if op == "push":
            rows = [(t, conv(k), ids + i) for i, (t, k) in enumerate(arg)]
            ids += len(rows)
            s.push(pa.table({"t": pa.array([r[0] for r in rows], pa.int64()),
                             "k": pa.array([r[1] for r in rows], kt),
                             "id": pa.array([r[2] for r in rows], pa.int64())}))
            ref.push(rows)
        else:
            if op == "flush":
                out, exp = s.flush(), ref.flush()
                w = max(w, ref.drained or 0)  # later drains start from there
            else:
                w += arg
                out, exp = s.drain(w), ref.drain(w)
            got = out.column("id").to_pylist() if out.num_columns else []
            assert got == [r[2] for r in exp]
    assert s.late_rows == ref.late and s.null_rows == ref.nulls


def _save_parts(s, store: dict) -> dict:
    """What an incremental store keeps: parts written when the sort asks for
    it, the earlier version's file otherwise."""
    new = {n: (s.snapshot_part(n) if must else store[n]) for n, must in s.state_parts().items()}
    s.mark_saved([n for n, must in s.state_parts().items() if must])
    return new


@given(ops=ops_st, stop=st.integers(0, 14), by_parts=st.booleans())
def test_sort_snapshot_restore(backend, ops, stop, by_parts):
    """Restored whole, or from parts saved after every step (most of them
    linked from the step before), the sort goes on as if never stopped."""
    mk = lambda: gpuwm.StreamSort("t", key=["k"], backend=backend)  # noqa: E731
    a, b = mk(), mk()
    w, store = 0, {}
    for i, (op, arg) in enumerate(ops):
        store = _save_parts(b, store)
        if i == stop:
            b = mk().restore(b.snapshot(rows=False), store) if by_parts else mk().restore(b.snapshot())
        if op == "push":
            t = pa.table({"t": pa.array([x for x, _ in arg], pa.int64()), "k": pa.array([k for _, k in arg], pa.int64())})
            a.push(t)
            b.push(t)
        else:
            w += arg
            assert a.drain(w).to_pydict() == b.drain(w).to_pydict()
    assert (a.buffered_rows, a.late_rows, a.null_rows) == (b.buffered_rows, b.late_rows, b.null_rows)


def test_timestamp_sort_and_multi_key_with_nulls_in_key(backend):
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    s = gpuwm.StreamSort("ts", key=["a", "b"], profile="spark", backend=backend)
    ts = [t0 + timedelta(seconds=x) for x in [3, 1, 1, 1, 2]]
    s.push(pa.table({"ts": pa.array(ts, pa.timestamp("ms", tz="UTC")),
                     "a": pa.array([1, 2, None, 2, 0], pa.int32()),
                     "b": pa.array([0.5, -1.5, 9.0, -2.5, 0.0])}))
    out = s.drain(t0 + timedelta(seconds=2))
    assert out["a"].to_pylist() == [None, 2, 2, 0]
    assert out["b"].to_pylist() == [9.0, -2.5, -1.5, 0.0]


def test_drain_cost_independent_of_buffer_uses_runs():
    # a large far-future buffer stays untouched: only released rows are sorted
    s = gpuwm.StreamSort("t")
    s.push(pa.table({"t": np.arange(1_000_000, 2_000_000, dtype=np.int64)}))
    s.push(pa.table({"t": np.array([5, 3, 4], dtype=np.int64)}))
    assert s.drain(10)["t"].to_pylist() == [3, 4, 5]
    assert s.buffered_rows == 1_000_000


def test_sort_errors():
    s = gpuwm.StreamSort("t", key=["pk"])
    with pytest.raises(gpuwm.SchemaError, match="sort key column 'pk' not found"):
        s.push(pa.table({"t": [1]}))
    s = gpuwm.StreamSort("t")
    s.push(pa.table({"t": [1, 5]}))
    s.drain(3)
    with pytest.raises(gpuwm.WatermarkError, match="backwards"):
        s.drain(2)
    with pytest.raises(gpuwm.SchemaError, match="schema changed"):
        s.push(pa.table({"t": pa.array([1], pa.int32())}))


def test_string_key_dictionary_stays_bounded(backend, monkeypatch):
    monkeypatch.setattr(KeyCodec, "COMPACT_MIN", 64)
    s = gpuwm.StreamSort("t", key=["k"], backend=backend)
    for i in range(100):
        t = [i * 10 + j % 10 for j in range(40)]
        k = [f"session-{i}-{j}" for j in range(40)]
        s.push(pa.table({"t": t, "k": k}))
        out = s.drain(i * 10 - 20)
        if i >= 3:  # rows of batch i-3 (t in [i*10-30, i*10-20)) come out, by (t, k)
            exp = sorted((tt, kk) for tt, kk in zip([(i - 3) * 10 + j % 10 for j in range(40)],
                                                    [f"session-{i - 3}-{j}" for j in range(40)]))
            assert list(zip(out.column("t").to_pylist(), out.column("k").to_pylist())) == exp
        assert len(s._codecs[0]) <= max(64, 2 * s.buffered_rows) + 40
