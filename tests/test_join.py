"""The interval join against the row-at-a-time reference on random pairs of
streams: every join kind, bounds on either side of zero, late rows and null
keys and times on both inputs, integer and string keys, and a save/load
through the state store's parts at any point — on every backend."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpuwm
from gpuwm.join import IntervalJoinSpec, WindowJoinSpec, inputs_schema
from kernels import NONE
from kernels.join import interval_pairs

from .reference import RefIntervalJoin, RefWindowJoin

TS = pa.timestamp("us", tz="UTC")
LEFT = pa.schema([("k", pa.int64()), ("lt", pa.int64()), ("lid", pa.int64())])
RIGHT = pa.schema([("rk", pa.int64()), ("rt", pa.int64()), ("rid", pa.int64())])
SLEFT = pa.schema([("k", pa.string()), ("lt", pa.int64()), ("lid", pa.int64())])
SRIGHT = pa.schema([("rk", pa.string()), ("rt", pa.int64()), ("rid", pa.int64())])

row_st = st.tuples(st.one_of(st.none(), st.integers(0, 4)), st.one_of(st.none(), st.integers(0, 60)))
batch_st = st.tuples(st.lists(row_st, max_size=12), st.lists(row_st, max_size=12), st.one_of(st.none(),
                                                                                           st.integers(0, 12)))


def _table(rows, schema, first_id: int) -> pa.Table:
    key = [r[0] for r in rows]
    if pa.types.is_string(schema.field(0).type):
        key = [None if k is None else f"key{k}" for k in key]
    return pa.table([pa.array(key, schema.field(0).type), pa.array([r[1] for r in rows], pa.int64()),
                     pa.array(range(first_id, first_id + len(rows)), pa.int64())], schema=schema)


def _tuples(t: pa.Table, skip: int = 0) -> list[tuple]:
    """Rows as tuples, string keys back to ints (after ``skip`` leading columns)."""
    def key(v):
        return int(v.removeprefix("key")) if isinstance(v, str) else v
    out = []
    for row in t.to_pylist():
        r = tuple(row.values())
        head, r = r[:skip], r[skip:]
        out.append(head + (key(r[0]), r[1], r[2], key(r[3]), r[4], r[5]))
    return sorted(out, key=repr)


#: the run tiers' knobs (instance attributes): the default, every run (and
#: hit part) merged into one at each drain, one per batch, two at most
TIERS = {"default": {}, "one run": {"MERGE_RATIO": 10**9, "FREEZE_MIN": 10**9},
         "run per batch": {"MERGE_RATIO": 0, "MAX_RUNS": 10**9},
         "two runs": {"MERGE_RATIO": 0, "MAX_RUNS": 2}}


def _tiers(j, tiers: str):
    for k, v in TIERS[tiers].items():
        setattr(j, k, v)
    return j


class _Store:
    """The state store's way with parts (gpuwm.spark.storage.store): after each
    batch, a part the operator need not write again keeps the file of the
    version before; a load gets the tables and those parts."""

    def __init__(self):
        self.tables, self.parts, self.rows_written = {}, {}, 0

    def save(self, op) -> None:
        parts, written = {}, []
        for name, must in op.state_parts().items():
            if not must and name in self.parts:
                parts[name] = self.parts[name]
            else:
                parts[name] = op.snapshot_part(name)
                written.append(name)
                self.rows_written += parts[name].num_rows
        self.tables, self.parts = op.state_tables(), parts
        op.mark_saved(written)

    def load(self, op):
        return op.load_state(self.tables, self.parts)


def _drive(j, ref, batches, stop, backend, profile, ls, rs, skip=0, tiers="default"):
    """Push each batch into the operator and the reference and drain both
    with the same watermark (None until the first step); the operator is
    saved to a store after every batch, and reloaded from it before batch
    ``stop``. Returns it."""
    w, nid = None, 0
    store = _Store()
    _tiers(j, tiers).keep_late()
    for i, (lrows, rrows, step) in enumerate(batches):
        if i == stop and i:
            j = store.load(_tiers(j.spec.build(profile, backend), tiers)).keep_late()
        late0 = j.late_rows
        lt, nid = _table(lrows, ls, nid), nid + len(lrows)
        rt, nid = _table(rrows, rs, nid), nid + len(rrows)
        j.push({"a": lt, "b": rt})
        ref.push("left", [(r["k"], r["lt"], r["lid"]) for r in _table(lrows, LEFT, nid - len(lrows) - len(rrows))
                          .to_pylist()])
        ref.push("right", [(r["rk"], r["rt"], r["rid"]) for r in _table(rrows, RIGHT, nid - len(rrows)).to_pylist()])
        if step is not None:
            w = step if w is None else w + step
        assert _tuples(j.drain(w), skip) == sorted(ref.drain(w), key=repr), (i, w)
        assert j.state_rows == ref.state_rows
        assert j.late_rows == ref.late and j.null_rows == ref.nulls
        # the late rows kept aside, per input: as many as counted
        late = j.take_late()
        assert sum(t.num_rows for t in late.values()) == j.late_rows - late0
        assert set(late) <= {"a", "b"}
        store.save(j)
    return j


def test_output_behind_is_spark_s_output_watermark_where_it_is_given():
    """``output_behind`` (translate's, from Spark's own derivation, where
    it is not gpuwm's least state watermark: a bound by an aggregation's
    window bounds): the output watermark trails the input's by it, the
    state watermarks as they were; in the JSON form too; described only
    when given (an interval join's checkpoint from before it matches)."""
    from gpuwm.join import _JoinSpec
    from gpuwm.operator import StageContext

    spec = IntervalJoinSpec("a", "b", [("k", "rk")], "lt", "rt", 0, 20, output_behind=3)
    j = spec.build("spark", "cpu")
    j.bind(inputs_schema({"a": LEFT, "b": RIGHT}))
    assert j.release(100).watermark == 97
    plain = IntervalJoinSpec("a", "b", [("k", "rk")], "lt", "rt", 0, 20)
    assert "output_behind" not in plain.describe() and spec.describe()["output_behind"] == 3
    assert IntervalJoinSpec("a", "b", [("k", "rk")], "lt", "rt", 0, 20, output_behind=0).describe()["output_behind"] == 0
    ctx = StageContext(None, inputs={"a": LEFT, "b": RIGHT}, times={"a": "lt", "b": "rt"})
    got = _JoinSpec.from_json({"left": "a", "right": "b", "on": [["k", "rk"]], "between": ["rt", "lt", 0, 20],
                               "output_behind": 3}, ctx)
    assert got == spec
    with pytest.raises(gpuwm.ConfigError, match="output_behind must be >= 0"):
        IntervalJoinSpec("a", "b", [("k", "rk")], "lt", "rt", 0, 20, output_behind=-1)
    with pytest.raises(gpuwm.ConfigError, match="'output_behind' is an interval join's"):
        _JoinSpec.from_json({"left": "a", "right": "b", "on": [["k", "rk"]], "window": {"tumble": 10},
                             "output_behind": 3}, ctx)


@pytest.mark.parametrize("how", ["inner", "left", "right", "full"])
@pytest.mark.parametrize("keys", ["int", "str", "none"])
@given(batches=st.lists(batch_st, max_size=8), stop=st.integers(0, 8), profile=st.sampled_from(["spark", "risingwave"]),
       bounds=st.sampled_from([(0, 20), (-5, 5), (3, 9), (-10, -2), (0, 0), "key", (0, None), (None, 4),
                               (None, None)]),
       where=st.sampled_from([(), (("lid", "<", "rid"),), (("lt", "!=", "rt"), ("lid", ">=", "rid"))]),
       tiers=st.sampled_from(list(TIERS)))
def test_join_matches_reference(backend, how, keys, batches, stop, profile, bounds, where, tiers):
    """``bounds`` "key": the event times a join key (equal times, the state
    watermark without the range's margin); a bound None: none on that side
    (the other side's rows are kept: Spark's one-sided range, Nexmark q4).
    ``keys`` "none": no key pair, the times alone (Spark's ``a.ts =
    b.ts``). ``where``: a residual condition on the pairs (Spark's
    post-join filter), which decides what matched for an outer side too."""
    time_key = bounds == "key"
    lo, hi = (0, 0) if time_key else bounds
    ls, rs = (SLEFT, SRIGHT) if keys == "str" else (LEFT, RIGHT)
    make = (lambda: IntervalJoinSpec("a", "b", [] if keys == "none" else [("k", "rk")], "lt", "rt", lo, hi, how,
                                     time_key=time_key, where=where))
    if how != "inner" and None in (lo, hi):
        with pytest.raises(gpuwm.ConfigError, match="outer join needs both time bounds"):
            make()
        return
    spec = make()
    j = spec.build(profile, backend).bind(inputs_schema({"a": ls, "b": rs}))
    inclusive = gpuwm.resolve_profile(profile).late_inclusive
    # a time key: state leaves at the watermark (one unit behind it where a row at the watermark is on time)
    at = {"lt": 1, "lid": 2, "rt": 1, "rid": 2}
    ref = RefIntervalJoin(lo, hi, how, inclusive=inclusive, margin=(0 if inclusive else 1) if time_key else 1,
                          keyed=keys != "none", where=tuple((at[a], op, at[b]) for a, op, b in where))
    j = _drive(j, ref, batches, stop, backend, profile, ls, rs, tiers=tiers)
    # a snapshot() round trip continues identically
    again = spec.build(profile, backend).restore(j.snapshot())
    assert again.state_rows == j.state_rows and again.counters() == j.counters()


def test_state_is_bounded_by_the_watermark(backend):
    """An unbounded stream (1,000 batches of new keys and times): the state
    stops growing once the watermark moves, at what the bounds and the
    watermark's lag keep."""
    spec = IntervalJoinSpec("a", "b", [("k", "rk")], "lt", "rt", 0, 20, "left")
    j = spec.build("spark", backend).bind(inputs_schema({"a": LEFT, "b": RIGHT}))
    sizes, emitted = [], 0
    for i in range(1000):
        t0 = i * 10
        lrows = [(i % 7, t0 + d) for d in range(5)]
        rrows = [(i % 7, t0 + d + 3) for d in range(5)]
        j.push({"a": _table(lrows, LEFT, 0), "b": _table(rrows, RIGHT, 0)})
        emitted += j.drain(t0 - 15).num_rows
        sizes.append(j.state_rows)
    assert max(sizes[100:]) == max(sizes[900:]) <= 60
    assert emitted > 0 and j.counters()["matches"] > 0


def test_kernel_pairs_match_a_nested_loop():
    rng = np.random.default_rng(7)
    bk, bt = rng.integers(0, 5, 300), rng.integers(0, 100, 300)
    pk, pt = rng.integers(-1, 5, 200), rng.integers(0, 100, 200)
    pk[pk == -1] = NONE  # null keys match nothing
    lo, hi = pt - 3, pt + 7
    p, b = interval_pairs(np, [bk], bt, [pk], lo, hi)
    got = sorted(zip(p.tolist(), b.tolist()))
    want = sorted((i, j) for i in range(200) for j in range(300)
                  if pk[i] == bk[j] and lo[i] <= bt[j] <= hi[i])
    assert got == want


def test_time_bounds_and_types_are_checked():
    a = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC"))])
    b = pa.schema([("aid", pa.int32()), ("bts", pa.timestamp("us", tz="UTC"))])
    spec = IntervalJoinSpec.between("a", "b", [["id", "aid"]], ["bts", "ts", "0 seconds", "20 seconds"],
                                    {"a": a, "b": b})
    assert (spec.left_time, spec.right_time, spec.upper) == ("ts", "bts", timedelta(seconds=20))
    with pytest.raises(gpuwm.SchemaError, match="join key types differ: a.id is int64 but b.aid is int32"):
        spec.output_schema(inputs_schema({"a": a, "b": b}))
    flipped = IntervalJoinSpec.between("a", "b", [["id", "aid"]], ["ts", "bts", "-5 seconds", "10 seconds"],
                                       {"a": a, "b": b})
    assert (flipped.lower, flipped.upper) == (timedelta(seconds=-10), timedelta(seconds=5))
    with pytest.raises(gpuwm.ConfigError, match="must be a duration"):
        IntervalJoinSpec("a", "b", [("id", "aid")], "ts", "bts", 1.5, "20 seconds")
    with pytest.raises(gpuwm.ConfigError, match="cannot parse interval"):
        IntervalJoinSpec("a", "b", [("id", "aid")], "ts", "bts", "0 seconds", "20 parsecs")
    with pytest.raises(gpuwm.ConfigError, match="lower .* is above upper"):
        IntervalJoinSpec("a", "b", [("id", "aid")], "ts", "bts", "30 seconds", "20 seconds")
    with pytest.raises(gpuwm.ConfigError, match="how must be one of"):
        IntervalJoinSpec("a", "b", [("id", "aid")], "ts", "bts", 0, 1, "outer")
    with pytest.raises(gpuwm.ConfigError, match="join bound lower must be a timedelta .* for timestamp column"):
        IntervalJoinSpec("a", "b", [("id", "aid")], "ts", "bts", 0, 1).output_schema(
            inputs_schema({"a": a, "b": b.set(0, pa.field("aid", pa.int64()))}))
    b64 = b.set(0, pa.field("aid", pa.int64()))
    # a one-sided range and a residual condition (Nexmark q4: bts BETWEEN ts AND expires), from the JSON form
    ae = a.append(pa.field("expires", pa.timestamp("us", tz="UTC")))
    q4 = IntervalJoinSpec.between("a", "b", [["id", "aid"]], ["bts", "ts", "0 seconds", None], {"a": ae, "b": b64},
                                  where=[["bts", "<=", "expires"]])
    assert (q4.lower, q4.upper, q4.where) == (timedelta(0), None, (("expires", ">=", "bts"),))
    with pytest.raises(gpuwm.SchemaError, match=r"compares a.id \(int64\) with b.bts"):
        IntervalJoinSpec("a", "b", [("id", "aid")], "ts", "bts", "0 seconds", None, where=[("id", "<", "bts")]).output_schema(
            inputs_schema({"a": a, "b": b64}))
    with pytest.raises(gpuwm.ConfigError, match="op one of"):
        IntervalJoinSpec("a", "b", [("id", "aid")], "ts", "bts", 0, None, where=[("id", "~", "aid")])


@pytest.mark.parametrize("bounds, behind", [((0, 20), 21), ((-5, 5), 6), ((0, None), 1), ((None, 4), 5),
                                            ((None, None), 0), ((7, None), 0)])
def test_output_watermark_is_the_least_state_watermark(bounds, behind):
    """Spark's join output watermark: the least of the input watermark and
    the state watermarks of the sides a bound cleans — a left row stays
    while W + upper could match it, a right one while W - lower could (1
    unit of margin each); a side with no bound has none."""
    j = IntervalJoinSpec("a", "b", [("k", "rk")], "lt", "rt", *bounds).build("spark", "cpu")
    j.bind(inputs_schema({"a": LEFT, "b": RIGHT}))
    assert j.release(100).watermark == 100 - behind


@pytest.mark.parametrize("how", ["inner", "left", "right", "full"])
@pytest.mark.parametrize("keys", ["int", "str", "none"])
@given(batches=st.lists(batch_st, max_size=8), stop=st.integers(0, 8),
       profile=st.sampled_from(["spark", "flink", "risingwave"]),
       window=st.sampled_from([(10, 10), (10, 5), (6, 2), (1, 1)]), tiers=st.sampled_from(list(TIERS)))
def test_window_join_matches_reference(backend, how, keys, batches, stop, profile, window, tiers):
    """``keys`` "none": no key pair, the window alone (Spark's ``w1 = w2``)."""
    size, slide = window
    ls, rs = (SLEFT, SRIGHT) if keys == "str" else (LEFT, RIGHT)
    spec = WindowJoinSpec("a", "b", [] if keys == "none" else [("k", "rk")], "lt", "rt", size, slide, how)
    j = spec.build(profile, backend).bind(inputs_schema({"a": ls, "b": rs}))
    prof = gpuwm.resolve_profile(profile)
    ref = RefWindowJoin(size, slide, how, close_minus_one=int(prof.close_minus_one),
                        on_match=prof.window_join == "match", keyed=keys != "none")
    j = _drive(j, ref, batches, stop, backend, profile, ls, rs, skip=2, tiers=tiers)
    again = spec.build(profile, backend).restore(j.snapshot())
    assert again.state_rows == j.state_rows and again.counters() == j.counters()


def test_window_join_spec_is_checked():
    p = pa.schema([("id", pa.int64()), ("t", TS), ("window_start", pa.int64())])
    a = pa.schema([("seller", pa.int64()), ("at", TS)])
    with pytest.raises(gpuwm.ConfigError, match="multiple of its slide"):
        WindowJoinSpec("p", "a", [("id", "seller")], "t", "at", "10 seconds", "3 seconds")
    with pytest.raises(gpuwm.ConfigError, match="window size must be > 0"):
        WindowJoinSpec("p", "a", [("id", "seller")], "t", "at", "0 seconds", "0 seconds")
    spec = WindowJoinSpec("p", "a", [("id", "seller")], "t", "at", "10 seconds", "10 seconds")
    with pytest.raises(gpuwm.SchemaError, match="adds column\\(s\\) \\['window_start'\\]"):
        spec.output_schema(inputs_schema({"p": p, "a": a}))
    with pytest.raises(gpuwm.SchemaError, match="join time columns differ in type"):
        spec.output_schema(inputs_schema({"p": p.remove(2).set(1, pa.field("t", pa.int64())), "a": a}))


@pytest.mark.parametrize("how", ["inner", "left", "full"])
@given(batches=st.lists(batch_st, max_size=8), delays=st.tuples(st.integers(0, 15), st.integers(0, 15)),
       profile=st.sampled_from(["spark", "risingwave"]))
def test_filtered_join_matches_reference(backend, how, batches, delays, profile):
    """The inputs' filters and the join together, as a pipeline runs them:
    each input's watermark from its own rows and delay (either one ahead),
    the combined one their minimum (none until both have one), rows late
    against it with the profile's lag, the join drained with it — against
    the same done by hand on the reference join."""
    from gpuwm.inputs import InputsSpec
    from gpuwm.watermark import WatermarkSpec

    prof = gpuwm.resolve_profile(profile)
    spec = IntervalJoinSpec("a", "b", [("k", "rk")], "lt", "rt", -3, 7, how)
    schema = inputs_schema({"a": LEFT, "b": RIGHT})
    j = spec.build(profile, backend).bind(schema)
    f = InputsSpec((("a", WatermarkSpec("lt", delays[0], profile=profile)),
                    ("b", WatermarkSpec("rt", delays[1], profile=profile)))).build(backend).bind(schema)
    ref = RefIntervalJoin(-3, 7, how, inclusive=prof.late_inclusive)
    own = {"a": None, "b": None}  # each input's watermark, by hand
    hist: list = [None]  # the combined watermark after each batch
    nid = 0
    for i, (lrows, rrows, _) in enumerate(batches):
        lt, nid = _table(lrows, LEFT, nid), nid + len(lrows)
        rt, nid = _table(rrows, RIGHT, nid), nid + len(rrows)
        kept = f.process({"a": lt, "b": rt})
        test = hist[-2] if prof.lag and len(hist) > 1 else (hist[-1] if not prof.lag else None)
        for side, t, col, d in (("left", lt, "lt", delays[0]), ("right", rt, "rt", delays[1])):
            rows = [(r[t.schema.names[0]], r[col], r[t.schema.names[2]]) for r in t.to_pylist()]
            late = (lambda ts: ts is not None and test is not None and (ts <= test if prof.late_inclusive else ts < test))
            ref.push(side, [r for r in rows if not late(r[1])])
            seen = [r[1] for r in rows if r[1] is not None]
            name = "a" if side == "left" else "b"
            if seen and (own[name] is None or max(seen) - d > own[name]):
                own[name] = max(seen) - d
        comb = None if None in own.values() else min(own.values())
        hist.append(comb if hist[-1] is None or (comb is not None and comb > hist[-1]) else hist[-1])
        assert f.watermark_raw == hist[-1]
        w = f.output_watermark_raw
        assert w == (hist[-2] if prof.lag else hist[-1])
        j.push({"a": kept["a"], "b": kept["b"]})
        assert _tuples(j.drain(w)) == sorted(ref.drain(w), key=repr), (i, w)
        assert j.state_rows == ref.state_rows


def _work_per_batch(upper: int, batches: int, how: str, monkeypatch) -> tuple[float, float, int]:
    """Rows sorted or merged and rows written to the store per batch (averaged over
    the last 100 batches) and the state rows then, for an interval join fed
    batches of 100 rows per input, 100 time units apart, with bound ``upper``."""
    import gpuwm.join as join_mod

    sorted_rows = []  # rows put in order: sorted (a batch) or merged (two runs)
    sort, merge = join_mod.sort_rows, join_mod.merge_order
    monkeypatch.setattr(join_mod, "sort_rows", lambda xp, cols: sorted_rows.append(int(cols[0].shape[0])) or
                        sort(xp, cols))
    monkeypatch.setattr(join_mod, "merge_order", lambda xp, a, b: sorted_rows.append(
        int(a[0].shape[0] + b[0].shape[0])) or merge(xp, a, b))
    spec = IntervalJoinSpec("a", "b", [("k", "rk")], "lt", "rt", 0, upper, how)
    j = spec.build("spark", "cpu").bind(inputs_schema({"a": LEFT, "b": RIGHT}))
    rng = np.random.default_rng(3)
    store = _Store()
    per_batch = []
    for i in range(batches):
        t0 = i * 100
        lrows = list(zip(rng.integers(0, 50, 100).tolist(), (t0 + rng.integers(0, 100, 100)).tolist()))
        rrows = list(zip(rng.integers(0, 50, 100).tolist(), (t0 + rng.integers(0, 100, 100)).tolist()))
        j.push({"a": _table(lrows, LEFT, 2 * t0), "b": _table(rrows, RIGHT, 2 * t0 + 100)})
        n0, w0 = sum(sorted_rows), store.rows_written
        j.drain(t0 - 10)
        store.save(j)
        per_batch.append((sum(sorted_rows) - n0, store.rows_written - w0, j.state_rows))
    assert j.counters()["matches"] > 0
    steady = per_batch[-100:]
    return (sum(s for s, _, _ in steady) / 100, sum(w for _, w, _ in steady) / 100, min(s for _, _, s in steady))


@pytest.mark.parametrize("how", ["inner", "left"])
def test_work_per_batch_does_not_grow_with_state(how, monkeypatch):
    """Four times the state (bounds of 10,000 and 40,000 time units: about
    10,000 and 40,000 rows held), the same batches: the rows a batch sorts
    (or merges) and the rows its checkpoint writes grow by a tier at most,
    not fourfold
    — the state is probed by binary search, merged in size tiers and saved
    as parts written once (counted, not timed)."""
    s1, w1, n1 = _work_per_batch(10_000, 200, how, monkeypatch)
    s4, w4, n4 = _work_per_batch(40_000, 500, how, monkeypatch)
    assert n1 >= 9_500 and n4 >= 38_000
    assert s4 <= 1.6 * s1 and s4 <= n4 / 10, (s1, s4, n4)
    assert w4 <= 1.6 * w1 and w4 <= n4 / 20, (w1, w4, n4)


@pytest.mark.parametrize("tiers", list(TIERS))
def test_a_saved_outer_row_matched_later_survives_a_reload(backend, tiers):
    """A left row saved in its run's part, matched by a right row two
    batches later (a hit part, not a rewrite of its run), then a reload: it
    must not come back as unmatched when it leaves the state."""
    spec = IntervalJoinSpec("a", "b", [("k", "rk")], "lt", "rt", 0, 20, "left")
    j = _tiers(spec.build("spark", backend).bind(inputs_schema({"a": LEFT, "b": RIGHT})), tiers)
    store = _Store()
    empty = _table([], RIGHT, 0)
    j.push({"a": _table([(1, 10), (2, 11)], LEFT, 0), "b": empty})
    assert j.drain(5).num_rows == 0
    store.save(j)
    j.push({"a": _table([(3, 12)], LEFT, 2), "b": empty})
    assert j.drain(6).num_rows == 0
    store.save(j)
    j.push({"a": _table([], LEFT, 0), "b": _table([(1, 25)], RIGHT, 3)})
    assert _tuples(j.drain(7)) == [(1, 10, 0, 1, 25, 3)]
    store.save(j)
    assert any(n.startswith("hits.") for n in store.parts) or tiers == "one run"
    j = store.load(_tiers(spec.build("spark", backend), tiers))
    out = j.drain(100)  # every left row leaves: only 2 and 3 never matched
    assert sorted(r["lid"] for r in out.to_pylist()) == [1, 2] and out.column("rid").null_count == 2
    assert j.state_rows == 0
