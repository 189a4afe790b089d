"""Online rescale (gpuwm.partition.rescale): operators whose state was
spread over N vnodes go on over M vnodes, their state re-partitioned by key,
and the output equals a run that never rescaled."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpuwm
from gpuwm.partition import rescale, vnode_of

OPS = {
    "tumble": lambda b: gpuwm.WindowAggregate(gpuwm.Tumble("ts", 10), by=["k"],
                                              aggs={"n": ("*", "count"), "s": ("v", "sum"), "m": ("v", "max")},
                                              backend=b),
    "hop": lambda b: gpuwm.WindowAggregate(gpuwm.Hop("ts", 20, 10), by=["k", "g"], aggs={"n": ("*", "count")},
                                           backend=b),
    "session": lambda b: gpuwm.WindowAggregate(gpuwm.Session("ts", gap=6), by=["g"],
                                               aggs={"n": ("*", "count"), "m": ("v", "min")}, backend=b),
    "sort": lambda b: gpuwm.StreamSort("ts", key=["id"], profile="risingwave", backend=b),
    "dedup": lambda b: gpuwm.Dedup(["k", "g"], "ts", 15, backend=b),
}

batches_st = st.lists(st.lists(st.tuples(st.integers(0, 150), st.integers(0, 9), st.sampled_from(["a", "b", "c"]),
                                         st.integers(-5, 5)), max_size=30), min_size=2, max_size=8)


def _table(rows: list[tuple], first_id: int) -> pa.Table:
    return pa.table({"ts": pa.array([r[0] for r in rows], pa.int64()), "k": pa.array([r[1] for r in rows], pa.int64()),
                     "g": pa.array([r[2] for r in rows], pa.string()), "v": pa.array([r[3] for r in rows], pa.int64()),
                     "id": pa.array(range(first_id, first_id + len(rows)), pa.int64())})


def _stored(op, make):
    """The operator through the state store's round trip (tables and parts)."""
    fresh = make()
    return fresh.load_state(op.state_tables(), {n: op.snapshot_part(n) for n in op.state_parts()})


def _rows(tables) -> list:
    out = [t for t in tables if t is not None and t.num_rows]
    if not out:
        return []
    t = pa.concat_tables(out)
    return sorted(tuple(r.values()) for r in t.select(sorted(t.column_names)).to_pylist())


@pytest.mark.parametrize("kind", sorted(OPS))
@pytest.mark.parametrize("n,m", [(1, 3), (3, 1), (2, 5), (4, 2)])
@settings(max_examples=25)
@given(batches=batches_st, cut=st.integers(1, 7), delay=st.integers(0, 20))
def test_rescaled_operators_equal_a_run_that_never_rescaled(backend, kind, n, m, batches, cut, delay):
    """N vnodes for the first ``cut`` batches, then the state of all N
    re-partitioned over M (through the store's round trip); the rows emitted
    (push and drain) and the counters equal one operator over every row."""
    make = lambda: OPS[kind](backend)  # noqa: E731
    cut = min(cut, len(batches) - 1)  # a rescale happens in every example
    whole = make()
    ops = [make() for _ in range(n)]
    got, want, w, ids = [], [], None, 0
    for i, rows in enumerate(batches):
        t = _table(rows, ids)
        ids += len(rows)
        if rows:
            top = max(r[0] for r in rows) - delay
            w = top if w is None else max(w, top)
        if i == cut:  # rescale N -> M between two batches
            olds = [_stored(o, make) for o in ops]
            keys = whole.spec.vnode_keys(m)
            ops = [rescale(olds, make().bind(t.schema), keys, m, v) for v in range(m)]
        keys = whole.spec.vnode_keys(len(ops))
        vn = vnode_of(t, keys, len(ops))
        for v, op in enumerate(ops):
            got += [op.push(t.filter(pa.array(vn == v))), op.drain(w)]
        want += [whole.push(t), whole.drain(w)]
    assert _rows(got) == _rows(want)
    for c in ("rows_in", "rows_out", "late_rows", "null_rows"):
        assert sum(op.counters()[c] for op in ops) == whole.counters()[c], c
    assert sum(op.state_rows for op in ops) == whole.state_rows


def test_rescale_keeps_each_key_on_one_vnode():
    """Every window state row lands on the vnode its key hashes to, once."""
    make = lambda: OPS["tumble"]("cpu")  # noqa: E731
    t = _table([(s, s % 7, "a", 1) for s in range(60)], 0)
    ops = [make() for _ in range(2)]
    vn = vnode_of(t, ["k"], 2)
    for v, op in enumerate(ops):
        op.push(t.filter(pa.array(vn == v)))
    new = [rescale(ops, make().bind(t.schema), ["k"], 3, v) for v in range(3)]
    for v, op in enumerate(new):
        rows = op.rescale_rows()
        assert (vnode_of(rows, ["k"], 3) == v).all()
    assert sum(op.state_rows for op in new) == sum(op.state_rows for op in ops) == 42
