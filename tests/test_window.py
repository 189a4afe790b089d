"""WindowAggregate: Spark's published vector, the reference on random streams,
on-update emission, snapshot/restore, derived watermarks, errors."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpuwm
from gpuwm.keys import KeyCodec

from .reference import RefWindow

UTC = timezone.utc
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_spark_event_time_watermark_suite_vector(backend):
    """delay 10 s, tumbling 5 s, profile spark, a no-data batch after each."""
    f = gpuwm.WatermarkFilter("ts", delay=timedelta(seconds=10), profile="spark", backend=backend)
    a = gpuwm.WindowAggregate(gpuwm.Tumble("ts", timedelta(seconds=5)), aggs={"count": ("*", "count")},
                              profile="spark", backend=backend)
    typ = pa.timestamp("us", tz="UTC")

    def batch(secs):
        kept = f.process(pa.table({"ts": pa.array([T0 + timedelta(seconds=s) for s in secs], typ)}))
        a.push(kept)
        return a.drain(f.output_watermark)

    outs = []
    for secs in ([10, 11, 12, 13, 14, 15], [], [25], [], [10], []):
        out = batch(secs)
        outs.append([(r["window_start"], r["count"]) for r in out.to_pylist()])
    assert outs == [[], [], [], [(T0 + timedelta(seconds=10), 5)], [], []]
    assert f.late_rows == 1


AGGS = {"n": ("*", "count"), "c": (2, "count"), "s": (2, "sum"), "lo": (2, "min"), "hi": (2, "max"),
        "fi": (2, "first"), "la": (2, "last"), "avg": (2, "mean")}

rows_st = st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 80)), st.integers(0, 3),
                             st.one_of(st.none(), st.integers(-50, 50))), max_size=25)
ops_st = st.lists(st.one_of(st.tuples(st.just("push"), rows_st), st.tuples(st.just("drain"), st.integers(0, 15))),
                  max_size=12)


def _table(rows, keytype):
    conv = (lambda k: f"key{k}") if keytype == "str" else (lambda k: k)
    return pa.table({"t": pa.array([r[0] for r in rows], pa.int64()),
                     "k": pa.array([conv(r[1]) for r in rows], pa.string() if keytype == "str" else pa.int32()),
                     "v": pa.array([r[2] for r in rows], pa.int64())})


def _cmp(got: pa.Table, exp: list[tuple], by: bool, keytype: str, aggs: dict = AGGS):
    names = ["window_start", "window_end"] + (["k"] if by else []) + list(aggs)
    got_rows = [tuple(r[n] for n in names) for r in got.to_pylist()] if got.num_columns else []
    conv = (lambda k: f"key{k}") if keytype == "str" else (lambda k: k)
    exp = [(e[0], e[1], conv(e[2]), *e[3:]) if by else e for e in exp]
    assert len(got_rows) == len(exp)
    for g, e in zip(got_rows, exp):
        assert g[:-1] == e[:-1]
        assert (g[-1] is None and e[-1] is None) or math.isclose(g[-1], e[-1])


@pytest.mark.parametrize("window", [(10, 10), (12, 4), (10, 5)])
@pytest.mark.parametrize("profile", ["risingwave", "flink"])
@pytest.mark.parametrize("emit", ["on-window-close", "on-update"])
@pytest.mark.parametrize("keys", ["int", "str", "none"])
@given(ops=ops_st)
def test_window_matches_reference(backend, window, profile, emit, keys, ops, monkeypatch):
    _matches_reference(backend, window, profile, emit, keys, ops, monkeypatch)


@pytest.mark.parametrize("window,keys", [((10, 10), "str"), ((12, 4), "int"), ((10, 5), "none")])
@given(ops=ops_st)
def test_complete_window_matches_reference(backend, window, keys, ops, monkeypatch):
    """``emit="complete"`` (Spark's complete mode): no row is late, every
    drain gives every window's values so far, the state is kept."""
    _matches_reference(backend, window, "risingwave", "complete", keys, ops, monkeypatch)


def _matches_reference(backend, window, profile, emit, keys, ops, monkeypatch):
    if keys == "str":  # compact the key dictionary at every drain that can
        monkeypatch.setattr(KeyCodec, "COMPACT_MIN", 0)
    size, slide = window
    by = [] if keys == "none" else ["k"]
    spec = gpuwm.Tumble("t", size) if size == slide else gpuwm.Hop("t", size=size, slide=slide)
    a = gpuwm.WindowAggregate(spec, by=by, aggs={n: ("v" if c == 2 else c, fn) for n, (c, fn) in AGGS.items()},
                              emit=emit, profile=profile, backend=backend)
    # reference rows: (t, k, v) -> the key sorts like the column (strings sort like their ints here)
    ref = RefWindow(size=size, slide=slide, close_minus_one=profile == "flink",
                    key_of=(lambda r: (r[1],)) if by else (lambda r: ()), aggs=AGGS, on_update=emit == "on-update",
                    complete=emit == "complete")
    w = 0
    for op, arg in ops:
        if op == "push":
            got = a.push(_table(arg, keys))
            exp = ref.push(arg)
            if emit == "on-update":
                _cmp(got, exp, bool(by), keys)
            else:
                assert got is None
        else:
            w += arg
            _cmp(a.drain(w), ref.drain(w), bool(by), keys)
    assert (a.late_rows, a.null_rows) == (ref.late, ref.nulls)
    assert a.state_rows == len(ref.state)


@given(ops=ops_st, stop=st.integers(0, 12))
@pytest.mark.parametrize("keys", ["int", "str"])
def test_window_snapshot_restore(backend, ops, stop, keys, monkeypatch):
    monkeypatch.setattr(KeyCodec, "COMPACT_MIN", 0)
    mk = lambda: gpuwm.WindowAggregate(gpuwm.Hop("t", size=10, slide=5), by=["k"],  # noqa: E731
                                       aggs={"s": ("v", "sum"), "m": ("v", "mean"), "n": ("*", "count"),
                                             "f": ("v", "first"), "la": ("v", "last")},
                                       backend=backend)
    run_with_restore(mk, ops, stop, keys, lambda b: mk().restore(b.snapshot()))


def run_with_restore(mk, ops, stop, keys, restore) -> None:
    """One operator runs ``ops`` straight through, a twin is replaced by
    ``restore(twin)`` before op ``stop``: every drain and the final counters
    must be equal."""
    a, b = mk(), mk()
    w = 0
    for i, (op, arg) in enumerate(ops):
        if i == stop:
            b = restore(b)
        if op == "push":
            a.push(_table(arg, keys))
            b.push(_table(arg, keys))
        else:
            w += arg
            assert a.drain(w).to_pydict() == b.drain(w).to_pydict()
    assert (a.state_rows, a.late_rows, a.null_rows) == (b.state_rows, b.late_rows, b.null_rows)


@pytest.mark.parametrize("emit", ["on-window-close", "on-update"])
def test_string_key_dictionary_stays_bounded(backend, emit, monkeypatch):
    """Fresh string keys every batch for 120 batches: the key dictionary
    holds only what open windows reference, and output stays exact."""
    monkeypatch.setattr(KeyCodec, "COMPACT_MIN", 64)
    aggs = {"n": ("*", "count"), "s": (2, "sum")}
    a = gpuwm.WindowAggregate(gpuwm.Hop("t", size=20, slide=10), by=["k"], aggs={"n": ("*", "count"), "s": ("v", "sum")},
                              emit=emit, backend=backend)
    ref = RefWindow(size=20, slide=10, close_minus_one=False, key_of=lambda r: (r[1],), aggs=aggs,
                    on_update=emit == "on-update")
    peak = 0
    for i in range(120):
        rows = [(i * 10 + j % 10, f"user-{i}-{j % 37}", j) for j in range(50)] + [(i * 10, "steady", 1)]
        got = a.push(pa.table({"t": [r[0] for r in rows], "k": [r[1] for r in rows], "v": [r[2] for r in rows]}))
        exp = ref.push(rows)
        if emit == "on-update":
            assert sorted(tuple(r.values()) for r in got.to_pylist()) == sorted(exp)
        out = a.drain(i * 10 - 15)
        assert [tuple(r.values()) for r in out.to_pylist()] == ref.drain(i * 10 - 15)
        peak = max(peak, len(a._codecs[0]))
        assert len(a._codecs[0]) <= max(64, 2 * a.state_rows) + 38  # + one batch of new keys
    assert peak >= 64  # it did compact, more than once: 120 * 37 keys went through
    assert a.state_rows == len(ref.state)


def test_state_is_deleted_when_windows_close():
    a = gpuwm.WindowAggregate(gpuwm.Tumble("t", 10), by=["k"])
    for base in range(0, 1000, 10):
        a.push(pa.table({"t": [base + 1, base + 2], "k": [1, 2]}))
        a.drain(base)
        assert a.open_windows <= 2 and a.state_rows <= 4


def test_timestamp_windows_output_types():
    typ = pa.timestamp("ms", tz="UTC")
    a = gpuwm.WindowAggregate(gpuwm.Tumble("ts", "1 minute"), by=["k"],
                              aggs={"first": ("ts", "min"), "p": ("price", "max"), "n": ("*", "count")})
    ts = [T0 + timedelta(seconds=s) for s in (5, 65, 30)]
    a.push(pa.table({"ts": pa.array(ts, typ), "k": ["a", "a", "a"], "price": pa.array([1.5, 2.5, 7.0])}))
    out = a.drain(T0 + timedelta(minutes=1))
    assert out.schema.field("window_start").type == typ and out.schema.field("first").type == typ
    assert out.to_pylist() == [{"window_start": T0, "window_end": T0 + timedelta(minutes=1), "k": "a",
                                "first": T0 + timedelta(seconds=5), "p": 7.0, "n": 2}]


def test_derived_watermarks():
    assert gpuwm.Tumble("t", 10).derive(47) == (40, 50)
    assert gpuwm.Hop("t", size=30, slide=15).derive(47) == (30, 60)
    w = T0 + timedelta(minutes=47, seconds=3)
    s, e = gpuwm.Hop("ts", size=timedelta(minutes=30), slide=timedelta(minutes=15)).derive(w)
    assert (s, e) == (T0 + timedelta(minutes=30), T0 + timedelta(minutes=60))


def test_window_errors():
    with pytest.raises(gpuwm.ConfigError, match="must not exceed size"):
        gpuwm.Hop("t", size=5, slide=10)
    with pytest.raises(gpuwm.ConfigError, match="must divide size"):
        gpuwm.Hop("t", size=10, slide=3)
    with pytest.raises(gpuwm.ConfigError, match="size must be > 0"):
        gpuwm.Tumble("t", 0)
    with pytest.raises(gpuwm.ConfigError, match="unknown aggregate function 'median'"):
        gpuwm.WindowAggregate(gpuwm.Tumble("t", 10), aggs={"m": ("v", "median")})
    with pytest.raises(gpuwm.ConfigError, match="'\\*' only works with count"):
        gpuwm.WindowAggregate(gpuwm.Tumble("t", 10), aggs={"m": ("*", "sum")})
    a = gpuwm.WindowAggregate(gpuwm.Tumble("t", 10), aggs={"m": ("v", "sum")})
    with pytest.raises(gpuwm.SchemaError, match="needs a numeric column"):
        a.push(pa.table({"t": [1], "v": ["x"]}))
    a = gpuwm.WindowAggregate(gpuwm.Tumble("t", 10))
    a.push(pa.table({"t": [1]}))
    a.drain(20)
    with pytest.raises(gpuwm.WatermarkError, match="backwards"):
        a.drain(19)


DISTINCT_AGGS = {"n": ("*", "count"), "s": (2, "sum"), "hi": (2, "max"), "dk": (1, "count_distinct"),
                 "dv": (2, "count_distinct"), "sv": (2, "sum_distinct"), "avg": (2, "mean_distinct")}


@pytest.mark.parametrize("window,by,emit,keys,via", [
    ((10, 10), True, "on-window-close", "str", "restore"), ((12, 4), False, "on-window-close", "int", "partials"),
    ((10, 5), True, "complete", "str", "push"), ((10, 10), True, "on-window-close", "int", "partials"),
    ((12, 4), False, "on-window-close", "str", "restore"), ((10, 5), True, "complete", "int", "partials")])
@given(ops=ops_st, cut=st.integers(0, 25))
def test_distinct_aggregates_match_reference(backend, window, by, emit, keys, via, ops, cut, monkeypatch):
    """count / sum / avg(DISTINCT x) beside plain aggregates, exact: pushed
    rows, partials from other operators, and a restore before every push
    all equal the row-at-a-time reference (late rows counted once each)."""
    monkeypatch.setattr(KeyCodec, "COMPACT_MIN", 0)
    size, slide = window
    spec = gpuwm.Tumble("t", size) if size == slide else gpuwm.Hop("t", size=size, slide=slide)
    aggs = {n: ({1: "k", 2: "v"}[c] if c != "*" else c, fn) for n, (c, fn) in DISTINCT_AGGS.items()}
    mk = lambda: gpuwm.WindowAggregate(spec, by=["k"] if by else [], aggs=aggs, emit=emit,  # noqa: E731
                                       backend=backend)
    ref = RefWindow(size=size, slide=slide, close_minus_one=False, key_of=(lambda r: (r[1],)) if by else (lambda r: ()),
                    aggs=DISTINCT_AGGS, complete=emit == "complete")
    # (without a group key, count_distinct(k) of strings is compared as the same count of ints)
    a = drive_via(mk, ref, ops, via, cut, by, keys, keys if by or keys == "int" else "int")
    assert a.late_rows == ref.late


def drive_via(mk, ref, ops, via: str, cut: int, by: bool, keys: str, cmp_keys: str):
    """Push and drain an operator made by ``mk`` and the reference as
    ``ops`` say — each push's rows pushed (``via`` "push"), first read back
    from a snapshot ("restore"), or as partials of two fresh operators
    split at ``cut`` ("partials") —, comparing every drain with
    :data:`DISTINCT_AGGS`. Returns the operator."""
    a = mk()
    w = 0
    for op, arg in ops:
        if op == "push":
            t = _table(arg, keys)
            if via == "partials":
                a.bind(t.schema)
                a.push_partials(pa.concat_tables([mk().partials(t.slice(0, cut)), mk().partials(t.slice(cut))]))
            else:
                if via == "restore":
                    a = mk().restore(a.snapshot())
                a.push(t)
            ref.push(arg)
        else:
            w += arg
            _cmp(a.drain(w), ref.drain(w), by, cmp_keys, DISTINCT_AGGS)
    return a


def test_distinct_aggregate_errors():
    with pytest.raises(gpuwm.ConfigError, match="not on update"):
        gpuwm.WindowAggregate(gpuwm.Tumble("t", 10), aggs={"d": ("v", "count_distinct")}, emit="on-update")
    with pytest.raises(gpuwm.ConfigError, match="first / last beside a distinct"):
        gpuwm.WindowAggregate(gpuwm.Tumble("t", 10), aggs={"d": ("v", "count_distinct"), "f": ("v", "first")})
    a = gpuwm.WindowAggregate(gpuwm.Tumble("t", 10), aggs={"d": ("s", "sum_distinct")})
    with pytest.raises(gpuwm.SchemaError, match="sum_distinct needs a numeric column"):
        a.push(pa.table({"t": [1], "s": ["x"]}))


@pytest.mark.parametrize("window", [(10, 10), (12, 4)])
@pytest.mark.parametrize("emit", ["on-window-close", "on-update"])
@pytest.mark.parametrize("keys", ["int", "str"])
@given(ops=ops_st, cut=st.integers(0, 25))
def test_partials_pushed_elsewhere_equal_rows(backend, window, emit, keys, ops, cut):
    """partials() in 'other tasks' (fresh operators) + push_partials() here
    == the reference: pre-aggregation before a shuffle loses nothing."""
    size, slide = window
    spec = gpuwm.Tumble("t", size) if size == slide else gpuwm.Hop("t", size=size, slide=slide)
    aggs = {n: ("v" if c == 2 else c, fn) for n, (c, fn) in AGGS.items()}
    mk = lambda: gpuwm.WindowAggregate(spec, by=["k"], aggs=aggs, emit=emit, backend=backend)  # noqa: E731
    a = mk()
    ref = RefWindow(size=size, slide=slide, close_minus_one=False, key_of=lambda r: (r[1],), aggs=AGGS,
                    on_update=emit == "on-update")
    w = 0
    for op, arg in ops:
        if op == "push":
            t = _table(arg, keys)
            a.bind(t.schema)
            parts = [mk().partials(t.slice(0, cut)), mk().partials(t.slice(cut))]
            got = a.push_partials(pa.concat_tables(parts))
            exp = ref.push(arg)
            if emit == "on-update":
                _cmp(got, exp, True, keys)
        else:
            w += arg
            _cmp(a.drain(w), ref.drain(w), True, keys)
    assert a.late_rows == ref.late


@pytest.mark.parametrize("drained_first", [False, True])
def test_ghost_partials_count_late_groups_and_change_nothing_else(backend, drained_first):
    """The groups of rows the watermark filter dropped reach the window
    stage as partials of no row (``ghost_partials``, over vnodes) or as
    rows to count (``count_late``, one task): both count their distinct
    (window, key) groups once each with the stage's own late groups, as
    Spark's progress counts late input, and merge nothing — even where the
    stage has not drained yet or the ghost's window is still open here (a
    profile whose filter drops by row)."""
    hop = gpuwm.Hop("ts", size=10, slide=5)
    kept = pa.table({"ts": [20, 21, 33], "k": [1, 2, 1], "v": [1.0, 2.0, 3.0]})
    dropped = pa.table({"ts": [1, 2, 3, 24, 6], "k": [1, 1, 2, 3, 1], "v": [9.0, 9.0, 9.0, 9.0, 9.0]})
    # (1, 2, 3 fall in windows [-5, 5) and [0, 10) -> keys 1 and 2: 4 groups; 6: [0, 10) and [5, 15) key 1: one
    # more; 24 (its windows [15, 25), [20, 30) still open) key 3: 2 more)
    want_groups = 7
    outs = {}
    for how in ("rows", "partials", "ghosts", "count"):
        a = gpuwm.WindowAggregate(hop, by=["k"], aggs={"n": ("*", "count"), "s": ("v", "sum")}, backend=backend)
        a.bind(kept.schema)
        if drained_first:
            a.drain(0)
        if how == "rows":
            a.push(kept)
        elif how == "partials":
            a.push_partials(a.partials(kept))
        elif how == "ghosts":
            a.push_partials(pa.concat_tables([a.partials(kept), a.ghost_partials(dropped)]))
        else:
            a.count_late(dropped)
            a.push(kept)
        got = a.counters()
        outs[how] = a.drain(100).to_pydict()
        if how in ("ghosts", "count"):
            assert got["late_groups"] == want_groups and got["late_rows"] == 0, (how, got)
        else:
            assert got["late_groups"] == 0, (how, got)
        assert got["groups_updated"] == 6 and a.counters()["groups_removed"] == 6, (how, got)
    assert outs["ghosts"] == outs["count"] == outs["partials"] == outs["rows"]
