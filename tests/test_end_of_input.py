"""The end of an input and idle splits, engine-independent: the watermark
filter and the operators against the row-at-a-time reference on random
streams, every profile — no-data batches at advancing processing times,
``idle_timeout`` under ``min`` and ``min-non-idle``, the end of input per
the profile's ``end_of_input``, and rows after the end."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpuwm
from gpuwm.profiles import PROFILES
from gpuwm.timecol import END_INT

from .reference import INF, RefFilter, RefSort, RefWindow

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)

# batches of (event time, split) rows with the processing time that passes before each (seconds); [] = no data
stream_st = st.lists(st.tuples(st.lists(st.tuples(st.integers(0, 80), st.integers(0, 2)), max_size=12),
                               st.integers(0, 7)), min_size=1, max_size=8)


def _table(rows: list[tuple]) -> pa.Table:
    return pa.table({"t": pa.array([r[0] for r in rows], pa.int64()), "s": pa.array([r[1] for r in rows], pa.int64()),
                     "id": pa.array([r[2] for r in rows], pa.int64())})


def _inf(w):
    return INF if w == END_INT else w


def _ops(kind: str, p, backend):
    if kind == "sort":
        return (gpuwm.StreamSort("t", key=["id"], profile=p.name, backend=backend),
                RefSort(inclusive=p.release_inclusive, key_of=lambda r: (r[2],)),
                lambda t: t.column("id").to_pylist(), lambda rows: [r[2] for r in rows])
    size, slide = (10, 10) if kind == "tumble" else (12, 4)
    spec = gpuwm.Tumble("t", size) if size == slide else gpuwm.Hop("t", size=size, slide=slide)
    op = gpuwm.WindowAggregate(spec, by=["s"], aggs={"n": ("*", "count"), "top": ("id", "max")}, profile=p.name,
                               backend=backend)
    ref = RefWindow(size=size, slide=slide, close_minus_one=p.close_minus_one, key_of=lambda r: (r[1],),
                    aggs={"n": ("*", "count"), "top": (2, "max")})
    return (op, ref, lambda t: sorted(zip(*(t.column(c).to_pylist() for c in ("window_start", "s", "n", "top")))),
            lambda rows: sorted((r[0], r[2], r[3], r[4]) for r in rows))


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("kind", ["tumble", "hop", "sort"])
@pytest.mark.parametrize("end", [None, "watermark", "all"])
@given(stream=stream_st, after=st.lists(st.tuples(st.integers(0, 100), st.integers(0, 3)), max_size=8),
       delay=st.integers(0, 10), idle=st.sampled_from([None, 4, 9]))
def test_end_of_input_and_idle_splits_match_reference(backend, profile, kind, end, stream, after, delay, idle):
    p = PROFILES[profile]
    if end is None:  # the profile's own end of input
        end = p.end_of_input
    if p.combine == "max":
        idle = None  # refused there (tested below)
    nulls = "keep" if p.nulls == "error" else p.nulls
    f = gpuwm.WatermarkFilter("t", delay=delay, profile=profile, split="s", nulls=nulls, end_of_input=end,
                              idle_timeout=None if idle is None else timedelta(seconds=idle), backend=backend)
    ref = RefFilter(delay=delay + (1 if p.minus_one else 0), inclusive=p.late_inclusive, on_event=p.emit == "on-event",
                    lag=p.lag, combine=p.combine, nulls=nulls, idle_timeout=idle, end_of_input=end)
    op, rop, got_rows, ref_rows = _ops(kind, p, backend)
    now, ids = 0, 0

    def batch(rows, now):
        nonlocal ids
        rows = [(t, s, ids + i) for i, (t, s) in enumerate(rows)]
        ids += len(rows)
        kept = f.process(_table(rows), now=T0 + timedelta(seconds=now))
        exp = ref.process(rows, lambda r: r[1], now)
        assert kept.column("id").to_pylist() == [r[2] for r in exp]
        assert _inf(f.watermark) == ref.combined and _inf(f.output_watermark) == ref.output_watermark
        assert sorted(f.idle_splits(now=T0 + timedelta(seconds=now))) == sorted(ref.idle(now))
        op.push(kept)
        rop.push(exp)
        drain(f.output_watermark, ref.output_watermark)

    def drain(w, rw):
        out = op.drain(w)
        if rw is not None:
            assert got_rows(out) == ref_rows(rop.drain(rw))
        else:
            assert out.num_rows == 0

    for rows, dt in stream:
        now += dt
        batch(rows, now)
    # the end: a no-data batch at the same processing time, then the end of input
    w = f.finish(now=T0 + timedelta(seconds=now))
    ref.process([], lambda r: r[1], now)
    rw = ref.end_input()
    assert _inf(w) == rw and (rw == INF) == (end == "all")
    drain(w, rw)
    if end == "all":
        assert op.state_rows == 0 if kind != "sort" else op.buffered_rows == 0
    # rows after the end: behind the final watermark (all of them under "all") they are late
    batch(after, now + 1)
    assert f.late_rows == ref.late and (op.late_rows, op.null_rows) == (rop.late, rop.nulls)
    if end == "all" and after:
        assert f.late_rows >= len(after)


def test_idle_timeout_and_drift_are_refused_under_a_global_max():
    for kw in ({"idle_timeout": "5 seconds"}, {"max_drift": 10}):
        with pytest.raises(gpuwm.ConfigError, match=f"{next(iter(kw))} has no effect under combine='max'"):
            gpuwm.WatermarkFilter("t", delay=1, profile="spark", split="s", **kw)
    with pytest.raises(gpuwm.ConfigError, match="idle_timeout has no effect"):
        gpuwm.WatermarkFilter("t", delay=1, profile="flink", combine="max", idle_timeout="5 seconds")
    with pytest.raises(gpuwm.ConfigError, match="end_of_input must be one of"):
        gpuwm.WatermarkFilter("t", delay=1, end_of_input="never")


def test_min_with_idle_timeout_leaves_an_idle_split_out():
    """risingwave's min over splits: without idle_timeout a silent split holds
    the watermark forever; with it, a no-data batch 6 s later lets it go."""
    rows = pa.table({"t": [100, 5], "s": [0, 1]})
    for idle, expect in ((None, 5), ("5 seconds", 100)):
        f = gpuwm.WatermarkFilter("t", delay=0, profile="risingwave", split="s", idle_timeout=idle)
        f.process(rows, now=T0)
        f.process(pa.table({"t": [100], "s": [0]}), now=T0 + timedelta(seconds=3))
        assert f.watermark == 5 and f.next_idle(T0 + timedelta(seconds=3)) == (
            None if idle is None else T0 + timedelta(seconds=5, milliseconds=1))
        f.process(rows.slice(0, 0), now=T0 + timedelta(seconds=6))
        assert f.watermark == expect and f.idle_splits(T0 + timedelta(seconds=6)) == ([] if idle is None else [1])


def test_over_and_dedup_release_everything_at_the_end():
    """At +infinity an over-window emits its rows still waiting for a lead
    (null lead) and a dedup forgets every key."""
    o = gpuwm.Over(by=["k"], funcs={"nxt": ["lead", "v", 1]}, column="t")
    t = pa.table({"t": [1, 2, 3], "k": [0, 0, 1], "v": [10, 20, 30]})
    assert o.push(t).column("nxt").to_pylist() == [20]
    f = gpuwm.WatermarkFilter("t", delay=0, profile="flink")
    f.process(t)
    out = o.drain(f.finish())
    assert sorted(zip(out.column("v").to_pylist(), out.column("nxt").to_pylist())) == [(20, None), (30, None)]
    d = gpuwm.Dedup(["k"], "t", 5)
    d.push(t)
    d.drain(END_INT)
    assert d.state_rows == 0


ops_st = st.lists(st.one_of(
    st.tuples(st.just("push"), st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 60)), st.integers(0, 2)),
                                        max_size=10)),
    st.tuples(st.just("drain"), st.integers(0, 15))), max_size=12)


@pytest.mark.parametrize("kind", ["tumble", "hop", "sort", "session"])
@pytest.mark.parametrize("profile", ["risingwave", "flink"])
@given(ops=ops_st)
def test_operators_keep_aside_the_rows_they_drop_as_late(backend, kind, profile, ops):
    """keep_late()/take_late(): exactly the rows the reference drops as late
    (a hopping window's row once per closed window), as many as late_rows."""
    from .reference import RefSession

    p = PROFILES[profile]
    if kind == "session":
        op = gpuwm.WindowAggregate(gpuwm.Session("t", 5), by=["s"], aggs={"n": ("*", "count")}, profile=profile,
                                   backend=backend)
        ref = RefSession(gap=5, close_minus_one=p.close_minus_one, key_of=lambda r: (r[1],), aggs={"n": ("*", "count")})
    else:
        op, ref, _, _ = _ops(kind, p, backend)
    op.keep_late()
    w, ids, got = 0, 0, []
    for what, arg in ops:
        if what == "push":
            rows = [(t, s, ids + i) for i, (t, s) in enumerate(arg)]
            ids += len(rows)
            op.push(_table(rows))
            ref.push(rows)
        else:
            w += arg
            op.drain(w)
            ref.drain(w)
        late = op.take_late()
        assert set(late) <= {None}  # one input
        if late:
            assert late[None].schema.names == ["t", "s", "id"]
            got += late[None].column("id").to_pylist()
    assert sorted(got) == sorted(r[2] for r in ref.late_out) and len(got) == op.late_rows == ref.late
    assert op.take_late() == {}
