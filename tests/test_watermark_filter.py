"""WatermarkFilter: published vectors, the row-at-a-time reference, state, errors."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpuwm
from gpuwm.profiles import PROFILES

from .reference import RefFilter

UTC = timezone.utc


def day(d: int) -> datetime:
    return datetime(2022, 11, d, tzinfo=UTC)


def ts_table(days: list[int]) -> pa.Table:
    return pa.table({"ts": pa.array([day(d) for d in days], pa.timestamp("us", tz="UTC"))})


def test_risingwave_published_vector(backend):
    """RisingWave watermark filter unit test (W = ts - 1 day, on-batch)."""
    f = gpuwm.WatermarkFilter("ts", delay=timedelta(days=1), profile="risingwave", emit="on-batch",
                              backend=backend)
    out = f.process(ts_table([7, 8, 6]))
    assert [t.day for t in out["ts"].to_pylist()] == [7, 8, 6]
    assert f.watermark == day(7)
    out = f.process(ts_table([7, 6, 10]))
    assert [t.day for t in out["ts"].to_pylist()] == [7, 10]
    assert f.watermark == day(9) and f.late_rows == 1
    # restart: the watermark is recovered from the snapshot
    g = gpuwm.WatermarkFilter("ts", delay=timedelta(days=1), profile="risingwave", backend=backend)
    g.restore(f.snapshot())
    assert g.watermark == day(9)
    out = g.process(ts_table([14, 9, 8]))
    assert [t.day for t in out["ts"].to_pylist()] == [14, 9]
    assert g.watermark == day(13) and g.late_rows == 2


def test_flink_bounded_out_of_orderness_vector(backend):
    """Flink BoundedOutOfOrderness(10): 1337 -> 1326; then 12345.. -> 12334."""
    f = gpuwm.WatermarkFilter("t", delay=10, profile="flink", backend=backend)
    f.process(pa.table({"t": [1337]}))
    assert f.watermark == 1326
    f.process(pa.table({"t": [12345, 12300, 12340, 12280]}))
    assert f.watermark == 12334


def test_spark_lagged_timing(backend):
    """Spark: batch N drops ts <= W_{N-2}; output watermark is W_{N-1}."""
    f = gpuwm.WatermarkFilter("t", delay=10, profile="spark", backend=backend)
    b = lambda xs: pa.table({"t": pa.array(xs, pa.int64())})  # noqa: E731
    assert f.process(b([10, 11, 12, 13, 14, 15])).num_rows == 6
    assert f.output_watermark is None and f.watermark == 5
    f.process(b([]))  # no-data batch
    assert f.output_watermark == 5
    assert f.process(b([25])).num_rows == 1
    f.process(b([]))
    assert f.output_watermark == 15
    # W_{N-2} = 15: 15 is late (<=), 16 is kept
    assert f.process(b([15, 16, 10])).column("t").to_pylist() == [16]
    assert f.late_rows == 2


def _rows(draw_batches):
    return draw_batches


batch_st = st.lists(
    st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 60)), st.integers(0, 3)), max_size=25),
    min_size=1, max_size=7,
)


# every profile with each emit mode it allows: lag=1 needs on-batch (on-event is refused, tested below)
PROFILE_EMITS = [(p, e) for p in sorted(PROFILES) for e in ("on-batch", "on-event")
                 if not (PROFILES[p].lag and e == "on-event")]
SPLIT_TYPES = {"int64": pa.int64(), "uint64": pa.uint64(), "int8": pa.int8(), "str": pa.string()}


@pytest.mark.parametrize("profile,emit", PROFILE_EMITS)
@pytest.mark.parametrize("split", [None, *SPLIT_TYPES])
@given(batches=batch_st, delay=st.integers(0, 12), lateness=st.sampled_from([0, 0, 4]))
def test_filter_matches_reference(backend, profile, emit, split, batches, delay, lateness):
    p = PROFILES[profile]
    nulls = "keep" if p.nulls == "error" else p.nulls
    f = gpuwm.WatermarkFilter("t", delay=delay, profile=profile, emit=emit, split="s" if split else None,
                              nulls=nulls, allowed_lateness=lateness, backend=backend)
    ref = RefFilter(delay=delay + (1 if p.minus_one else 0), inclusive=p.late_inclusive,
                    on_event=emit == "on-event", lag=p.lag, combine=p.combine, nulls=nulls, lateness=lateness)
    ids = 0
    for rows in batches:
        rows = [(t, s, ids + i) for i, (t, s) in enumerate(rows)]
        ids += len(rows)
        table = pa.table({"t": pa.array([r[0] for r in rows], pa.int64()),
                          "s": pa.array([r[1] if split != "str" else f"split-{r[1]}" for r in rows],
                                        SPLIT_TYPES.get(split, pa.int64())),
                          "id": pa.array([r[2] for r in rows], pa.int64())})
        out = f.process(table)
        exp = ref.process(rows, (lambda r: r[1]) if split else (lambda r: None))
        assert out.column("id").to_pylist() == [r[2] for r in exp]
        assert f.watermark == ref.combined
        assert f.output_watermark == ref.output_watermark
        assert f.late_rows == ref.late


strategy_st = st.lists(
    st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 60)), st.integers(0, 3),
                       st.one_of(st.none(), st.integers(-10, 60)), st.booleans()), max_size=25),
    min_size=1, max_size=7,
)


@pytest.mark.parametrize("profile,emit", PROFILE_EMITS)
@pytest.mark.parametrize("strategy", ["candidate", "punctuated"])
@given(batches=strategy_st, delay=st.integers(0, 12), split=st.booleans())
def test_watermark_strategies_match_reference(backend, profile, emit, strategy, batches, delay, split):
    """A watermark candidate per row from a column (an expression's value:
    None leaves the watermark where it is, a smaller one never moves it
    back), or only from the rows a boolean column marks (punctuation),
    against the row-at-a-time model, every profile."""
    p = PROFILES[profile]
    nulls = "keep" if p.nulls == "error" else p.nulls
    f = gpuwm.WatermarkFilter("t", delay=delay, profile=profile, emit=emit, split="s" if split else None,
                              nulls=nulls, backend=backend, **{strategy: "c" if strategy == "candidate" else "m"})
    eff = delay + (1 if p.minus_one else 0)
    cand_of = (lambda r: r[3]) if strategy == "candidate" else (lambda r: r[0] - eff if r[4] else None)
    ref = RefFilter(delay=eff, inclusive=p.late_inclusive, on_event=emit == "on-event", lag=p.lag,
                    combine=p.combine, nulls=nulls, cand_of=cand_of)
    ids = 0
    for rows in batches:
        rows = [(t, s, ids + i, c, m) for i, (t, s, c, m) in enumerate(rows)]
        ids += len(rows)
        table = pa.table({"t": pa.array([r[0] for r in rows], pa.int64()), "s": pa.array([r[1] for r in rows], pa.int64()),
                          "id": pa.array([r[2] for r in rows], pa.int64()),
                          "c": pa.array([r[3] for r in rows], pa.int64()),
                          "m": pa.array([r[4] for r in rows], pa.bool_())})
        out = f.process(table)
        exp = ref.process([(r[0], r[1], r[2], r[3], r[4]) for r in rows], (lambda r: r[1]) if split else (lambda r: None))
        assert out.column("id").to_pylist() == [r[2] for r in exp]
        assert f.watermark == ref.combined
        assert f.output_watermark == ref.output_watermark
        assert f.late_rows == ref.late


@pytest.mark.parametrize("profile", ["risingwave", "flink"])
@pytest.mark.parametrize("strategy", [None, "candidate", "punctuated"])
@given(batches=strategy_st, delay=st.integers(0, 12), split=st.booleans(), every=st.sampled_from([1, 2, 3, 5]))
def test_periodic_emission_every_n_rows_matches_reference(backend, profile, strategy, batches, delay, split, every):
    """emit='on-periodic', every=N: a split's watermark moves only after its
    N-th, 2N-th, ... row (across batches), to the largest candidate so far;
    rows are tested against the last one emitted. Through a snapshot and
    restore after every batch, so the count and the candidate carry over."""
    p = PROFILES[profile]
    kw = {} if strategy is None else {strategy: "c" if strategy == "candidate" else "m"}
    eff = delay + (1 if p.minus_one else 0)
    cand_of = {None: None, "candidate": lambda r: r[3], "punctuated": lambda r: r[0] - eff if r[4] else None}
    nulls = "keep" if p.nulls == "error" else p.nulls
    make = lambda: gpuwm.WatermarkFilter("t", delay=delay, profile=profile, emit="on-periodic",  # noqa: E731
                                         every=every, split="s" if split else None, nulls=nulls, backend=backend,
                                         **kw)
    f = make()
    ref = RefFilter(delay=eff, inclusive=p.late_inclusive, on_event=True, lag=0, combine=p.combine, nulls=nulls,
                    cand_of=cand_of[strategy], every=every)
    ids = 0
    for rows in batches:
        rows = [(t, s, ids + i, c, m) for i, (t, s, c, m) in enumerate(rows)]
        ids += len(rows)
        table = pa.table({"t": pa.array([r[0] for r in rows], pa.int64()),
                          "s": pa.array([r[1] for r in rows], pa.int64()),
                          "id": pa.array([r[2] for r in rows], pa.int64()),
                          "c": pa.array([r[3] for r in rows], pa.int64()),
                          "m": pa.array([r[4] for r in rows], pa.bool_())})
        out = f.process(table)
        exp = ref.process(rows, (lambda r: r[1]) if split else (lambda r: None))
        assert out.column("id").to_pylist() == [r[2] for r in exp]
        assert f.watermark == ref.combined
        assert f.late_rows == ref.late
        f = make().restore(f.snapshot())


@pytest.mark.parametrize("profile", ["risingwave", "flink"])
@given(batches=batch_st, delay=st.integers(0, 12), split=st.booleans(), every=st.sampled_from([1, 4, 10]))
def test_periodic_emission_every_interval_matches_reference(backend, profile, batches, delay, split, every):
    """emit='on-periodic', every=<interval>: the watermark is held at a
    multiple of the interval (timestamps, in seconds here)."""
    p = PROFILES[profile]
    nulls = "keep" if p.nulls == "error" else p.nulls
    sec = 1_000_000
    f = gpuwm.WatermarkFilter("t", delay=timedelta(seconds=delay), profile=profile, emit="on-periodic",
                              every=timedelta(seconds=every), split="s" if split else None, nulls=nulls,
                              backend=backend)
    ref = RefFilter(delay=delay * sec + (1000 if p.minus_one else 0), inclusive=p.late_inclusive, on_event=True,
                    lag=0, combine=p.combine, nulls=nulls, every_time=every * sec)
    ids = 0
    for rows in batches:
        rows = [(None if t is None else t * sec, s, ids + i) for i, (t, s) in enumerate(rows)]
        ids += len(rows)
        table = pa.table({"t": pa.array([r[0] for r in rows], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                          "s": pa.array([r[1] for r in rows], pa.int64()),
                          "id": pa.array([r[2] for r in rows], pa.int64())})
        out = f.process(table)
        exp = ref.process(rows, (lambda r: r[1]) if split else (lambda r: None))
        assert out.column("id").to_pylist() == [r[2] for r in exp]
        raw = None if f.watermark is None else int(pa.scalar(f.watermark, pa.timestamp("us", tz="UTC")).value)
        assert raw == ref.combined
        assert f.late_rows == ref.late


def test_periodic_emission_is_checked():
    with pytest.raises(gpuwm.errors.ConfigError, match="needs every="):
        gpuwm.WatermarkFilter("t", delay=0, emit="on-periodic")
    with pytest.raises(gpuwm.errors.ConfigError, match="every= needs emit='on-periodic'"):
        gpuwm.WatermarkFilter("t", delay=0, every=3)
    with pytest.raises(gpuwm.errors.ConfigError, match=">= 1"):
        gpuwm.WatermarkFilter("t", delay=0, emit="on-periodic", every=0)
    with pytest.raises(gpuwm.errors.ConfigError, match="needs emit='on-batch'"):
        gpuwm.WatermarkFilter("t", delay=0, profile="spark", emit="on-periodic", every=3)


def test_a_candidate_made_for_the_watermark_stays_out_of_the_output(backend):
    """keep_candidate=False (a Pipeline's ``expr`` column): kept and late rows
    leave it out, on every backend (device Frames too)."""
    f = gpuwm.WatermarkFilter("t", delay=0, candidate="c", keep_candidate=False, backend=backend)
    t = lambda ts, c: pa.table({"t": pa.array(ts, pa.int64()), "c": pa.array(c, pa.int64())})  # noqa: E731
    assert f.process(t([5, 9], [4, None])).column_names == ["t"] and f.watermark == 4
    late: list = []
    kept, _ = f.filter_local(gpuwm.frame.Frame.of(t([3, 7], [1, 2]), f._backend), late_out=late)
    assert kept.schema.names == ["t"] and late[0].column_names == ["t"] and late[0]["t"].to_pylist() == [3]


def test_watermark_strategy_columns_are_checked():
    t = pa.table({"t": pa.array([1], pa.int64()), "c": pa.array([1.5]), "m": pa.array([1], pa.int64())})
    with pytest.raises(gpuwm.errors.ConfigError, match="give one"):
        gpuwm.WatermarkFilter("t", delay=0, candidate="c", punctuated="m")
    with pytest.raises(gpuwm.errors.SchemaError, match="must be int64"):
        gpuwm.WatermarkFilter("t", delay=0, candidate="c").process(t)
    with pytest.raises(gpuwm.errors.SchemaError, match="must be bool"):
        gpuwm.WatermarkFilter("t", delay=0, punctuated="m").process(t)
    with pytest.raises(gpuwm.errors.SchemaError, match="'x' not found"):
        gpuwm.WatermarkFilter("t", delay=0, candidate="x").process(t)


@given(batches=batch_st, delay=st.integers(0, 12), stop=st.integers(0, 6))
@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_snapshot_restore_continues_exactly(backend, profile, batches, delay, stop):
    nulls = "keep"
    mk = lambda: gpuwm.WatermarkFilter("t", delay=delay, profile=profile, split="s", nulls=nulls,  # noqa: E731
                                       backend=backend)
    tables = [pa.table({"t": pa.array([t for t, _ in b], pa.int64()), "s": pa.array([s for _, s in b], pa.int64())})
              for b in batches]
    a = mk()
    full = [a.process(t) for t in tables]
    b = mk()
    got = []
    for i, t in enumerate(tables):
        if i == stop:
            b = mk().restore(b.snapshot())
        got.append(b.process(t))
    assert [g.to_pydict() for g in got] == [x.to_pydict() for x in full]
    assert (b.watermark, b.output_watermark, b.late_rows, b.split_watermarks) == (
        a.watermark, a.output_watermark, a.late_rows, a.split_watermarks)


def test_rescale_takes_maximum_over_snapshots():
    f1 = gpuwm.WatermarkFilter("t", delay=0, split="s")
    f2 = gpuwm.WatermarkFilter("t", delay=0, split="s")
    f1.process(pa.table({"t": [10, 50], "s": [0, 1]}))
    f2.process(pa.table({"t": [30, 20], "s": [0, 1]}))
    g = gpuwm.WatermarkFilter("t", delay=0, split="s").restore([f1.snapshot(), f2.snapshot()])
    assert g.split_watermarks == {0: 30, 1: 50}
    assert g.watermark == max(f1.watermark, f2.watermark) == 20
    # the rows are then filtered against the recovered per-split watermarks
    assert g.process(pa.table({"t": [29, 30, 49], "s": [0, 0, 1]}))["t"].to_pylist() == [30]


def test_min_combine_waits_for_every_declared_split():
    f = gpuwm.WatermarkFilter("t", delay=0, split="p", splits=[0, 1, 2])
    f.process(pa.table({"t": [10, 20], "p": [0, 1]}))
    assert f.watermark is None
    f.process(pa.table({"t": [5], "p": [2]}))
    assert f.watermark == 5


def test_idle_split_stops_holding_back():
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    f = gpuwm.WatermarkFilter("t", delay=0, profile="flink", split="p", idle_timeout=timedelta(seconds=10),
                              nulls="keep")
    f.process(pa.table({"t": [100, 5], "p": [0, 1]}), now=t0)
    assert f.watermark == 4  # flink: - 1
    f.process(pa.table({"t": [200], "p": [0]}), now=t0 + timedelta(seconds=5))
    assert f.watermark == 4 and f.idle_splits(now=t0 + timedelta(seconds=5)) == []
    f.process(pa.table({"t": [300], "p": [0]}), now=t0 + timedelta(seconds=11))
    assert f.idle_splits(now=t0 + timedelta(seconds=11)) == [1]
    assert f.watermark == 299
    # split 1 comes back behind: the combined watermark does not go backwards
    f.process(pa.table({"t": [50], "p": [1]}), now=t0 + timedelta(seconds=12))
    assert f.watermark == 299


def test_alignment_reports_splits_ahead():
    f = gpuwm.WatermarkFilter("t", delay=0, split="p", max_drift=1000)
    f.process(pa.table({"t": [42, 5000, 900], "p": [0, 1, 2]}))
    assert f.held_back() == [1]


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_timestamp_units_and_watermark_type(unit):
    f = gpuwm.WatermarkFilter("ts", delay="5 seconds", profile="flink", nulls="keep")
    t = datetime(2026, 1, 1, 12, 0, 10, tzinfo=UTC)
    f.process(pa.table({"ts": pa.array([t], pa.timestamp(unit, tz="UTC"))}))
    expect = t - timedelta(seconds=5) - (timedelta(seconds=1) if unit == "s" else timedelta(milliseconds=1))
    assert f.watermark == expect and f.watermark.tzinfo is not None


def test_nulls_follow_profile():
    tbl = lambda xs: pa.table({"t": pa.array(xs, pa.int64())})  # noqa: E731
    rw = gpuwm.WatermarkFilter("t", delay=0, profile="risingwave")
    assert rw.process(tbl([None, 5])).num_rows == 2  # no W yet: null passes
    assert rw.process(tbl([None, 6])).num_rows == 1  # W exists: null dropped
    assert rw.null_rows == 2 and rw.null_rows_dropped == 1
    sp = gpuwm.WatermarkFilter("t", delay=0, profile="spark")
    sp.process(tbl([5]))
    sp.process(tbl([]))
    assert sp.process(tbl([None])).num_rows == 1 and sp.null_rows == 1
    fl = gpuwm.WatermarkFilter("t", delay=0, profile="flink")
    with pytest.raises(gpuwm.WatermarkError, match="null event time"):
        fl.process(tbl([None, 1]))


def test_bad_input_errors():
    with pytest.raises(gpuwm.ConfigError, match="delay must be >= 0"):
        gpuwm.WatermarkFilter("t", delay=-1)
    with pytest.raises(gpuwm.ConfigError, match="delay must be >= 0"):
        gpuwm.WatermarkFilter("t", delay=timedelta(seconds=-1))
    with pytest.raises(gpuwm.ConfigError, match="allowed_lateness must be >= 0"):
        gpuwm.WatermarkFilter("t", delay=1, allowed_lateness=-2)
    with pytest.raises(gpuwm.ConfigError, match="unknown profile 'storm'"):
        gpuwm.WatermarkFilter("t", delay=1, profile="storm")
    with pytest.raises(gpuwm.ConfigError, match="emit must be one of"):
        gpuwm.WatermarkFilter("t", delay=1, emit="sometimes")
    with pytest.raises(gpuwm.ConfigError, match="lag=1"):
        gpuwm.WatermarkFilter("t", delay=1, profile="spark", emit="on-event")
    f = gpuwm.WatermarkFilter("t", delay=1)
    with pytest.raises(gpuwm.SchemaError, match="'t' not found"):
        f.process(pa.table({"x": [1]}))
    with pytest.raises(gpuwm.SchemaError, match="string timestamps"):
        f.process(pa.table({"t": ["2026-01-01"]}))
    with pytest.raises(gpuwm.SchemaError, match="expected a timestamp or an integer"):
        f.process(pa.table({"t": [1.5]}))
    f.process(pa.table({"t": [1]}))
    with pytest.raises(gpuwm.SchemaError, match="schema changed"):
        f.process(pa.table({"t": [1], "y": [2]}))
    g = gpuwm.WatermarkFilter("ts", delay=5)  # int delay on a timestamp column
    with pytest.raises(gpuwm.ConfigError, match="must be a timedelta"):
        g.process(pa.table({"ts": pa.array([0], pa.timestamp("ms"))}))
    h = gpuwm.WatermarkFilter("t", delay=timedelta(seconds=5))  # timedelta on an int column
    with pytest.raises(gpuwm.ConfigError, match="must be an int"):
        h.process(pa.table({"t": [1]}))


def test_large_chunk_many_splits_on_event_matches_reference():
    rng = np.random.default_rng(7)
    n = 20_000
    t = (np.arange(n) // 3 + rng.integers(-40, 40, n)).astype(np.int64)
    s = rng.integers(0, 17, n)
    f = gpuwm.WatermarkFilter("t", delay=25, profile="flink", emit="on-event", split="s", nulls="keep")
    ref = RefFilter(delay=26, inclusive=True, on_event=True, lag=0, combine="min-non-idle", nulls="keep")
    rows = list(zip(t.tolist(), s.tolist(), range(n)))
    out = f.process(pa.table({"t": t, "s": s, "id": np.arange(n)}))
    exp = ref.process(rows, lambda r: r[1])
    assert out["id"].to_pylist() == [r[2] for r in exp]
    assert f.late_rows == ref.late > 0


def test_spark_watermark_is_in_whole_milliseconds():
    """Spark keeps event-time statistics in ms: under profile spark a
    microsecond column's watermark is max(ts) truncated to the ms, minus the
    delay (a row 0.4 ms behind max(ts) is not late); other profiles use
    max(ts) as it is."""
    import pyarrow as pa

    t = pa.timestamp("us", tz="UTC")
    for profile, w in (("spark", 10_000_000), ("risingwave", 10_000_600)):
        f = gpuwm.WatermarkFilter("ts", "0 seconds", profile=profile, backend="cpu")
        f.process(pa.table({"ts": pa.array([10_000_600], t)}))
        f.process(pa.table({"ts": pa.array([10_000_200], t)}))
        assert f.watermark_raw == w
    f = gpuwm.WatermarkFilter("ts", 0, profile="spark", backend="cpu")  # integer columns: as they are
    f.process(pa.table({"ts": [10_000_600]}))
    assert f.watermark_raw == 10_000_600
