"""Watermark alignment that holds splits back (FLIP-182 pause / resume):
the filter against the row-at-a-time model, Flink's published bound, the
end of the input, several inputs as one alignment group."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpuwm
from gpuwm.errors import WatermarkError
from gpuwm.inputs import InputFilters
from gpuwm.profiles import PROFILES

from .reference import RefAligned, RefFilter

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)

# rows (ts, split, candidate, mark); a split runs ahead when its ts are larger
align_st = st.lists(
    st.tuples(st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 80)), st.integers(0, 3),
                                 st.one_of(st.none(), st.integers(-10, 80)), st.booleans()), max_size=20),
              st.integers(0, 4)),  # seconds since the batch before (idleness)
    min_size=1, max_size=8,
)


def _table(rows: list[tuple]) -> pa.Table:
    return pa.table({"t": pa.array([r[0] for r in rows], pa.int64()), "s": pa.array([r[1] for r in rows], pa.int64()),
                     "id": pa.array([r[2] for r in rows], pa.int64()), "c": pa.array([r[3] for r in rows], pa.int64()),
                     "m": pa.array([r[4] for r in rows], pa.bool_())})


@pytest.mark.parametrize("profile", ["risingwave", "flink"])
@pytest.mark.parametrize("emit", ["on-batch", "on-event", "every-rows", "candidate"])
@given(batches=align_st, delay=st.integers(0, 8), drift=st.integers(0, 25), split=st.booleans(),
       idle=st.sampled_from([None, 3]), restore=st.booleans())
def test_alignment_matches_pause_resume_model(backend, profile, emit, batches, delay, drift, split, idle, restore):
    """Each batch: the rows read (in order), the watermark, the late count
    and the rows held equal FLIP-182's readers in the model; after the last
    batch, flush() reads every held row. Through snapshot / restore after
    every batch when ``restore``."""
    p = PROFILES[profile]
    nulls = "keep" if p.nulls == "error" else p.nulls
    eff = delay + (1 if p.minus_one else 0)
    kw = {"emit": "on-event" if emit == "candidate" else emit}
    ref_kw: dict = {"on_event": emit != "on-batch"}
    if emit == "every-rows":
        kw, ref_kw["every"] = {"emit": "on-periodic", "every": 3}, 3
    elif emit == "candidate":
        kw["candidate"], ref_kw["cand_of"] = "c", (lambda r: r[3])
    make = lambda: gpuwm.WatermarkFilter("t", delay, profile=profile, split="s" if split else None,  # noqa: E731
                                         nulls=nulls, max_drift=drift, backend=backend,
                                         idle_timeout=None if idle is None else timedelta(seconds=idle), **kw)
    f = make()
    ref = RefAligned(RefFilter(delay=eff, inclusive=p.late_inclusive, lag=0, combine=p.combine, nulls=nulls,
                               idle_timeout=idle, **ref_kw), drift)
    split_of = (lambda r: r[1]) if split else (lambda r: None)
    ids, now = 0, 0
    for rows, gap in batches:
        rows = [(t, s, ids + i, c, m) for i, (t, s, c, m) in enumerate(rows)]
        ids += len(rows)
        now += gap
        out = f.process(_table(rows), now=T0 + timedelta(seconds=now))
        exp = ref.process(rows, split_of, now)
        assert out.column("id").to_pylist() == [r[2] for r in exp]
        assert f.watermark == ref.f.combined
        assert f.late_rows == ref.f.late
        assert f.held_rows == len(ref.held)
        if restore:
            f = make().restore(f.snapshot())
    out = f.flush(now=T0 + timedelta(seconds=now))
    exp = ref.process([], split_of, now, align=False)
    assert out.column("id").to_pylist() == [r[2] for r in exp] and f.held_rows == 0
    assert f.rows_in == ids  # a held row counts once, when it came


@pytest.mark.parametrize("emit", ["on-batch", "on-event"])
@given(batches=align_st, drift=st.integers(0, 25))
def test_alignment_in_event_time_intervals_matches_model(backend, emit, batches, drift):
    """The drift as an interval on a timestamp column, with on-periodic
    every 10 seconds (and on-batch): seconds, in microseconds."""
    sec = 1_000_000
    kw = {"emit": "on-periodic", "every": "10 seconds"} if emit == "on-event" else {"emit": "on-batch"}
    f = gpuwm.WatermarkFilter("t", "2 seconds", profile="risingwave", split="s", max_drift=timedelta(seconds=drift),
                              backend=backend, **kw)
    ref = RefAligned(RefFilter(delay=2 * sec, inclusive=False, on_event=emit == "on-event", lag=0, combine="min",
                               nulls="drop", every_time=10 * sec if emit == "on-event" else None), drift * sec)
    ids = 0
    for rows, _ in batches:
        rows = [(None if t is None else t * sec, s, ids + i) for i, (t, s, _, _) in enumerate(rows)]
        ids += len(rows)
        table = pa.table({"t": pa.array([r[0] for r in rows], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                          "s": pa.array([r[1] for r in rows], pa.int64()), "id": pa.array([r[2] for r in rows], pa.int64())})
        out = f.process(table, now=T0)
        exp = ref.process(rows, lambda r: r[1], 0)
        assert out.column("id").to_pylist() == [r[2] for r in exp]
        assert f.held_rows == len(ref.held)


def test_flink_published_bound_holds_the_split_ahead(backend):
    """Flink's alignment vector (max-drift 1000): inputs at 42 and 44 allow
    1042; the input at 5000 is paused until the other reaches 4000."""
    f = gpuwm.WatermarkFilter("t", 0, profile="risingwave", split="p", max_drift=1000, backend=backend)
    t = lambda ts, p: pa.table({"t": pa.array(ts, pa.int64()), "p": pa.array(p, pa.int64())})  # noqa: E731
    f.process(t([42, 44], [0, 1]))
    assert f.held_back() == [] and f._align_bound(T0) == 1042
    assert f.process(t([5000], [1])).num_rows == 1  # split 1 was within the bound: it reads, then is ahead
    assert f.held_back() == [1] and f.watermark == 42
    out = f.process(t([5001, 5002, 900], [1, 1, 0]))
    assert out.column("t").to_pylist() == [900] and f.held_rows == 2  # split 1 is paused
    assert f.process(t([3999], [0])).num_rows == 1 and f.held_rows == 2  # bound 1900 before the batch
    assert not f.releasable()  # 3999 + 1000 < 5000
    assert f.process(t([4000], [0])).num_rows == 1 and f.held_rows == 2
    assert f.releasable()  # 4000 + 1000 >= 5000: a no-data batch reads them
    out = f.process(t([], []))
    assert out.column("t").to_pylist() == [5001, 5002] and f.held_rows == 0 and f.watermark == 4000


def test_end_of_input_reads_every_held_row(backend):
    f = gpuwm.WatermarkFilter("t", 0, profile="flink", split="p", max_drift=10, backend=backend)
    t = lambda ts, p: pa.table({"t": pa.array(ts, pa.int64()), "p": pa.array(p, pa.int64())})  # noqa: E731
    f.process(t([0, 0], [0, 1]))
    f.process(t([100], [1]))
    f.process(t([200, 300], [1, 1]))
    assert f.held_rows == 2 and not f.releasable()
    with pytest.raises(WatermarkError, match="held back by alignment.*flush"):
        f.finish()
    assert f.flush().column("t").to_pylist() == [200, 300]
    assert f.finish() == 2 ** 62


def test_filter_local_needs_a_place_for_held_rows():
    f = gpuwm.WatermarkFilter("t", 0, split="p", max_drift=10)
    with pytest.raises(WatermarkError, match="held_out"):
        f.filter_local(pa.table({"t": [1], "p": [0]}))


def test_inputs_are_one_alignment_group(backend):
    """Several inputs with max_drift are one group: an input ahead of the
    slowest input by more than its drift is held back."""
    t = lambda ts: pa.table({"t": pa.array(ts, pa.int64())})  # noqa: E731
    f = InputFilters({"a": gpuwm.WatermarkFilter("t", 0, max_drift=10, backend=backend),
                      "b": gpuwm.WatermarkFilter("t", 0, max_drift=10, backend=backend)})
    f.process({"a": t([0]), "b": t([0])})
    f.process({"a": t([100]), "b": t([5])})  # a reads 100 (0 <= 10), then is ahead of b (5 + 10)
    out = f.process({"a": t([101, 102]), "b": t([20])})
    assert out["a"].num_rows == 0 and out["b"]["t"].to_pylist() == [20] and f.held_rows == 2
    assert f.held_back() == ["a:None"]
    out = f.process({"a": t([]), "b": t([95])})  # the bound before it is 30: a still waits
    assert out["a"].num_rows == 0 and f.held_rows == 2
    out = f.process({"a": t([]), "b": t([])})  # now b + 10 >= 100
    assert out["a"]["t"].to_pylist() == [101, 102] and f.held_rows == 0
    assert f.watermark == 95
