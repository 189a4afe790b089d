"""Session windows: the row-at-a-time reference on random streams, the
session kernel, partial sessions merged elsewhere, snapshot/restore,
timestamps, errors."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpuwm
from gpuwm.keys import KeyCodec
from gpuwm.session import SessionAggregate
from kernels import segmented_cummax, sessionize

from .reference import RefSession
from .test_window import AGGS as WINDOW_AGGS
from .test_window import _cmp, _table, run_with_restore

#: the window tests' aggregates but first / last (not over sessions: Spark orders a session's rows by time)
AGGS = {n: a for n, a in WINDOW_AGGS.items() if a[1] not in ("first", "last")}

UTC = timezone.utc
rows_st = st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 120)), st.integers(0, 3),
                             st.one_of(st.none(), st.integers(-50, 50))), max_size=25)
ops_st = st.lists(st.one_of(st.tuples(st.just("push"), rows_st), st.tuples(st.just("drain"), st.integers(0, 20))),
                  max_size=12)


def _aggs():
    return {n: ("v" if c == 2 else c, fn) for n, (c, fn) in AGGS.items()}


def _levels(monkeypatch, how: str) -> None:
    """The state's level structure: "tiered" (the default merge ratio, levels
    frozen from 3 sessions or half the state: small streams freeze too; key
    filters on levels from 4 sessions), "many" (levels never merged: one a
    push, searched — through key filters — and drained one by one) or "one"
    (always merged into one level, no filter)."""
    if how == "tiered":
        monkeypatch.setattr(SessionAggregate, "FREEZE_MIN", 3)
        monkeypatch.setattr(SessionAggregate, "FREEZE_PARTS", 2)
        monkeypatch.setattr(SessionAggregate, "FILTER_MIN", 4)
    elif how == "many":
        monkeypatch.setattr(SessionAggregate, "MERGE_RATIO", 0)
        monkeypatch.setattr(SessionAggregate, "FILTER_MIN", 1)
    else:
        monkeypatch.setattr(SessionAggregate, "MERGE_RATIO", 10**9)
        monkeypatch.setattr(SessionAggregate, "FREEZE_MIN", 10**9)


@pytest.mark.parametrize("levels", ["tiered", "many", "one"])
@pytest.mark.parametrize("gap", [1, 7, 30])
@pytest.mark.parametrize("profile", ["risingwave", "flink"])
@pytest.mark.parametrize("keys", ["int", "str", "none"])
@given(ops=ops_st)
def test_session_matches_reference(backend, levels, gap, profile, keys, ops, monkeypatch):
    if keys == "str":  # compact the key dictionary at every drain that can
        monkeypatch.setattr(KeyCodec, "COMPACT_MIN", 0)
    _levels(monkeypatch, levels)
    by = [] if keys == "none" else ["k"]
    a = gpuwm.WindowAggregate(gpuwm.Session("t", gap), by=by, aggs=_aggs(), profile=profile, backend=backend)
    assert isinstance(a, SessionAggregate)
    ref = RefSession(gap=gap, close_minus_one=profile == "flink", key_of=(lambda r: (r[1],)) if by else (lambda r: ()),
                     aggs=AGGS)
    _drive(a, ref, ops, keys, bool(by))
    assert (a.late_rows, a.null_rows) == (ref.late, ref.nulls)


def _drive(a, ref, ops, keys: str, by: bool) -> None:
    """Push and drain both the operator and the reference as ``ops`` say, comparing every drain and the state."""
    w = 0
    for op, arg in ops:
        if op == "push":
            assert a.push(_table(arg, keys)) is None
            ref.push(arg)
        else:
            w += arg
            _cmp(a.drain(w), ref.drain(w), by, keys, aggs=AGGS)
        assert a.state_rows == ref.open_sessions


@pytest.mark.parametrize("levels,keys", [("tiered", "str"), ("many", "int")])
@given(ops=ops_st)
def test_complete_sessions_match_reference(backend, levels, keys, ops, monkeypatch):
    """``emit="complete"`` (Spark's complete mode): no session closes or
    turns a row late, every drain gives every session so far."""
    if keys == "str":
        monkeypatch.setattr(KeyCodec, "COMPACT_MIN", 0)
    _levels(monkeypatch, levels)
    a = gpuwm.WindowAggregate(gpuwm.Session("t", 7), by=["k"], aggs=_aggs(), emit="complete", backend=backend)
    ref = RefSession(gap=7, close_minus_one=False, key_of=lambda r: (r[1],), aggs=AGGS, complete=True)
    _drive(a, ref, ops, keys, True)
    assert (a.late_rows, a.null_rows) == (0, ref.nulls)


@pytest.mark.parametrize("keys", ["int", "str"])
@given(ops=ops_st, cut=st.integers(0, 25))
def test_partial_sessions_merged_elsewhere_equal_rows(backend, keys, ops, cut):
    """partials() in 'other tasks' (fresh operators) + push_partials() here ==
    the reference: sessionizing before a shuffle loses nothing."""
    mk = lambda: gpuwm.WindowAggregate(gpuwm.Session("t", 6), by=["k"], aggs=_aggs(), backend=backend)  # noqa: E731
    a = mk()
    ref = RefSession(gap=6, close_minus_one=False, key_of=lambda r: (r[1],), aggs=AGGS)
    w = 0
    for op, arg in ops:
        if op == "push":
            t = _table(arg, keys)
            a.bind(t.schema)
            assert a.push_partials(pa.concat_tables([mk().partials(t.slice(0, cut)), mk().partials(t.slice(cut))])) \
                is None
            ref.push(arg)
        else:
            w += arg
            _cmp(a.drain(w), ref.drain(w), True, keys, aggs=AGGS)
    assert a.late_rows == ref.late


@pytest.mark.parametrize("keys,via,levels", [("int", "push", "many"), ("str", "restore", "tiered"),
                                              ("int", "partials", "one"), ("str", "partials", "many"),
                                              ("none", "push", "tiered")])
@given(ops=ops_st, cut=st.integers(0, 25))
def test_distinct_aggregates_over_sessions_match_reference(backend, keys, via, levels, ops, cut, monkeypatch):
    """count / sum / avg(DISTINCT x) over session windows beside plain
    aggregates, exact: a session holds each distinct value once, also when
    a row merges two sessions whose values overlap; pushed rows, partials
    from other operators and a restore before every push all equal the
    row-at-a-time reference (late rows counted once each)."""
    from .test_window import DISTINCT_AGGS, drive_via

    monkeypatch.setattr(KeyCodec, "COMPACT_MIN", 0)
    _levels(monkeypatch, levels)
    by = keys != "none"
    aggs = {n: ({1: "k", 2: "v"}[c] if c != "*" else c, fn) for n, (c, fn) in DISTINCT_AGGS.items()}
    mk = lambda: gpuwm.WindowAggregate(gpuwm.Session("t", 6), by=["k"] if by else [], aggs=aggs,  # noqa: E731
                                       backend=backend)
    ref = RefSession(gap=6, close_minus_one=False, key_of=(lambda r: (r[1],)) if by else (lambda r: ()),
                     aggs=DISTINCT_AGGS)
    keys = "int" if keys == "none" else keys
    a = drive_via(mk, ref, ops, via, cut, by, keys, keys)
    assert a.late_rows == ref.late


def test_merging_sessions_counts_a_value_they_share_once(backend):
    """Two sessions of a key, each with the value 5, then a row between
    them that merges them: count(DISTINCT v) is 2 (5 and 7), not 3; the
    sum and mean of the distinct values are 12 and 6.0."""
    a = gpuwm.WindowAggregate(gpuwm.Session("t", 6), by=["k"], backend=backend,
                              aggs={"n": ("*", "count"), "dv": ("v", "count_distinct"), "sv": ("v", "sum_distinct"),
                                    "av": ("v", "mean_distinct")})
    a.push(pa.table({"t": [1, 3, 20], "k": [1, 1, 1], "v": [5, 5, 5]}))
    assert a.drain(2).num_rows == 0
    a.push(pa.table({"t": [9, 15], "k": [1, 1], "v": [7, None]}))
    assert a.drain(30).to_pylist() == [{"window_start": 1, "window_end": 26, "k": 1, "n": 5, "dv": 2, "sv": 12,
                                        "av": 6.0}]


@given(ops=ops_st, stop=st.integers(0, 12), parts=st.booleans())
@pytest.mark.parametrize("keys", ["int", "str"])
def test_session_snapshot_restore(backend, ops, stop, parts, keys, monkeypatch):
    monkeypatch.setattr(KeyCodec, "COMPACT_MIN", 0)
    _levels(monkeypatch, "many")
    mk = lambda: gpuwm.WindowAggregate(gpuwm.Session("t", 9), by=["k"], aggs=_aggs(), backend=backend)  # noqa: E731

    def restore(b):
        if parts:  # the incremental store's way: counters + one part
            return mk().restore(b.snapshot(rows=False), {n: b.snapshot_part(n) for n in b.state_parts()})
        return mk().restore(b.snapshot())

    run_with_restore(mk, ops, stop, keys, restore)


def test_state_parts_are_rewritten_only_after_a_change(backend, monkeypatch):
    """A batch rewrites only the parts it changed: a new level for its
    sessions; merging or emitting an older session flips its alive bit, and
    the older level's sessions stay linked until it is merged or compacted."""
    _levels(monkeypatch, "many")
    a = gpuwm.WindowAggregate(gpuwm.Session("t", 5), by=["k"], aggs=_aggs(), backend=backend)
    assert a.state_parts() == {}
    a.push(_table([(1, 0, 1), (3, 1, 2), (4, 2, 3)], "int"))  # level 0: keys 0, 1, 2
    assert a.state_parts() == {"sessions.0": True, "sessions.0.alive": True}
    a.mark_saved(list(a.state_parts()))
    assert a.drain(2).num_rows == 0 and not any(a.state_parts().values())
    a.push(_table([(6, 3, 1)], "int"))  # a new key: a new level, level 0 untouched
    assert a.state_parts() == {"sessions.0": False, "sessions.0.alive": False,
                               "sessions.1": True, "sessions.1.alive": True}
    a.mark_saved(list(a.state_parts()))
    a.push(_table([(5, 1, 1)], "int"))  # key 1's session moves from level 0 to level 2: one bit flips
    assert a.state_parts() == {"sessions.0": False, "sessions.0.alive": True, "sessions.1": False,
                               "sessions.1.alive": False, "sessions.2": True, "sessions.2.alive": True}
    assert a.snapshot_part("sessions.0.alive").column("alive").to_pylist() == [True, False, True]
    a.mark_saved(list(a.state_parts()))
    assert a.drain(6).num_rows == 1  # key 0's [1, 6): 2 of level 0's 3 dead, so it is compacted (a new id)
    assert a.state_parts() == {"sessions.1": False, "sessions.1.alive": False, "sessions.2": False,
                               "sessions.2.alive": False, "sessions.3": True, "sessions.3.alive": True}
    assert a.snapshot_part("sessions.3").column("key.k").to_pylist() == [2]
    assert a.snapshot_part("sessions.3.alive").num_rows == 0  # no marks: all alive
    # the saved parts restore the same operator, and it goes on the same way
    a.mark_saved(list(a.state_parts()))
    b = gpuwm.WindowAggregate(gpuwm.Session("t", 5), by=["k"], aggs=_aggs(), backend=backend)
    b.restore(a.snapshot(rows=False), {n: a.snapshot_part(n) for n in a.state_parts()})
    assert b.state_parts() == a.state_parts() and not any(b.state_parts().values())
    assert b.state_rows == a.state_rows == 3
    a.push(_table([(8, 4, 1)], "int"))
    b.push(_table([(8, 4, 1)], "int"))
    assert list(b.state_parts()) == list(a.state_parts())  # the same level ids go on
    with pytest.raises(gpuwm.StateError, match="not given"):
        gpuwm.WindowAggregate(gpuwm.Session("t", 5), by=["k"], aggs=_aggs(), backend=backend).restore(
            a.snapshot(rows=False))
    assert b.drain(20).to_pydict() == a.drain(20).to_pydict() and b.state_rows == a.state_rows == 0


def test_old_one_part_layout_restores(backend):
    """A checkpoint written before the two levels (one part, "sessions")
    still restores."""
    mk = lambda: gpuwm.WindowAggregate(gpuwm.Session("t", 5), by=["k"], aggs=_aggs(), backend=backend)  # noqa: E731
    a = mk()
    a.push(_table([(1, 0, 1), (3, 1, 2), (30, 0, 4)], "int"))
    snap = a.snapshot(rows=False)  # what the one-part layout wrote: no level list, every session in one part
    meta = json.loads(snap["state"].schema.metadata[b"gpuwm.session"])
    del meta["levels"], meta["next_level"]
    snap["state"] = snap["state"].replace_schema_metadata({"gpuwm.session": json.dumps(meta)})
    old = pa.table(a._state_columns(a._all()))
    b = mk().restore(snap, {"sessions": old})
    assert b.state_rows == 3 and b.drain(40).to_pydict() == a.drain(40).to_pydict()


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 60), st.integers(0, 15)), max_size=40),
       st.one_of(st.none(), st.integers(0, 9)))
def test_sessionize_kernel_against_interval_union(rows, gap):
    """Per key, sessions are the connected components of [start, end]
    intervals (touching ends connect); the kernel's runs are those. ``gap``
    set: every interval is [start, start + gap] (the int form)."""
    k = np.array([r[0] for r in rows], np.int64)
    s = np.array([r[1] for r in rows], np.int64)
    e = s + (np.array([r[2] for r in rows], np.int64) if gap is None else gap)
    order, starts, (sk,), ss, se = sessionize(np, [k], s, e if gap is None else gap)
    got = []
    bounds = list(starts) + [len(rows)]
    for i in range(len(starts)):
        idx = order[bounds[i]:bounds[i + 1]]
        got.append((int(k[idx[0]]), int(s[idx].min()), int(e[idx].max()), len(idx)))
        assert (sk[i], ss[i], se[i]) == got[-1][:3]
    exp = []
    for key in sorted(set(k.tolist())):
        iv = sorted((a, b) for kk, a, b in zip(k.tolist(), s.tolist(), e.tolist()) if kk == key)
        cur = None
        for a, b in iv:
            if cur is not None and a <= cur[2]:
                cur = (key, cur[1], max(cur[2], b), cur[3] + 1)
            else:
                if cur is not None:
                    exp.append(cur)
                cur = (key, a, b, 1)
        exp.append(cur)
    assert got == exp


@given(st.lists(st.tuples(st.booleans(), st.integers(-(1 << 62), 1 << 62)), min_size=1, max_size=60))
def test_segmented_cummax_both_paths(rows):
    """The lifted scan and (values spread over int64) the doubling scan."""
    first = np.array([True] + [r[0] for r in rows[1:]])
    v = np.array([r[1] for r in rows], np.int64)
    exp, cur = [], None
    for f, x in zip(first.tolist(), v.tolist()):
        cur = x if f else max(cur, x)
        exp.append(cur)
    assert segmented_cummax(np, v, first).tolist() == exp
    small = v >> 40  # narrow ranges: the lifted path
    exp_small = segmented_cummax(np, small, first).tolist()
    cur = None
    for i, (f, x) in enumerate(zip(first.tolist(), small.tolist())):
        cur = x if f else max(cur, x)
        assert exp_small[i] == cur


def test_timestamp_sessions(backend):
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    typ = pa.timestamp("ms", tz="UTC")
    secs = [0, 4, 9, 30, 33, 2]
    t = pa.table({"ts": pa.array([t0 + timedelta(seconds=s) for s in secs], typ),
                  "u": pa.array(["a", "a", "a", "a", "a", "b"]), "p": pa.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])})
    a = gpuwm.WindowAggregate(gpuwm.Session("ts", "5 seconds"), by=["u"],
                              aggs={"n": ("*", "count"), "top": ("p", "max")}, profile="spark", backend=backend)
    a.push(t)
    out = a.drain(t0 + timedelta(seconds=20))
    assert out.schema.field("window_start").type == typ and out.schema.field("window_end").type == typ
    assert out.to_pylist() == [
        {"window_start": t0, "window_end": t0 + timedelta(seconds=14), "u": "a", "n": 3, "top": 3.0},
        {"window_start": t0 + timedelta(seconds=2), "window_end": t0 + timedelta(seconds=7), "u": "b", "n": 1,
         "top": 6.0},
    ]
    assert a.state_rows == 1  # [30 s, 38 s) of "a" stays open
    # a row behind the drain that cannot reach an open session is late
    a.push(t.slice(0, 1))
    assert a.late_rows == 1 and a.state_rows == 1


def test_session_errors():
    with pytest.raises(gpuwm.ConfigError, match="gap must be > 0"):
        gpuwm.Session("t", 0)
    with pytest.raises(gpuwm.ConfigError, match="cannot parse interval 'soon'"):
        gpuwm.Session("t", "soon")
    with pytest.raises(gpuwm.ConfigError, match="not on update: a later row can merge sessions"):
        gpuwm.WindowAggregate(gpuwm.Session("t", 5), emit="on-update")
    a = gpuwm.WindowAggregate(gpuwm.Session("t", 5))
    with pytest.raises(gpuwm.SchemaError, match="'t'"):
        a.push(pa.table({"x": [1]}))
    a = gpuwm.WindowAggregate(gpuwm.Session("t", timedelta(seconds=1)))
    with pytest.raises(gpuwm.ConfigError, match="int"):
        a.push(pa.table({"t": pa.array([1], pa.int64())}))
    b = gpuwm.WindowAggregate(gpuwm.Session("t", 5))
    b.push(pa.table({"t": [3]}))
    b.drain(4)
    with pytest.raises(gpuwm.WatermarkError, match="backwards"):
        b.drain(3)
    with pytest.raises(gpuwm.StateError, match="not of a session"):
        gpuwm.WindowAggregate(gpuwm.Session("t", 5)).restore(
            gpuwm.WindowAggregate(gpuwm.Tumble("t", 5)).snapshot())


@given(ops=ops_st)
def test_two_key_columns_give_the_one_key_sessions(backend, ops):
    """Several key columns merge through the general path (one sort of state
    and chunk), one key column through the binary search of touched keys: a
    second key that is a function of the first must not change a session."""
    one = gpuwm.WindowAggregate(gpuwm.Session("t", 6), by=["k"], aggs=_aggs(), backend=backend)
    two = gpuwm.WindowAggregate(gpuwm.Session("t", 6), by=["k", "k2"], aggs=_aggs(), backend=backend)
    w = 0
    for op, arg in ops:
        t = _table(arg, "int") if op == "push" else None
        if op == "push":
            one.push(t)
            two.push(t.append_column("k2", pa.compute.multiply(t.column("k"), 3)))
        else:
            w += arg
            got = two.drain(w)
            assert one.drain(w).to_pydict() == (got.drop(["k2"]) if "k2" in got.column_names else got).to_pydict()
    assert (one.state_rows, one.late_rows) == (two.state_rows, two.late_rows)


def test_key_filters_follow_recoded_string_keys(backend, monkeypatch):
    """A level keeps its key filter while it lives; when the string
    dictionary is compacted the level's codes change, and so must its filter,
    or a chunk row of an open session's key would start a second session."""
    monkeypatch.setattr(KeyCodec, "COMPACT_MIN", 0)
    _levels(monkeypatch, "many")  # every level filtered, none merged
    a = gpuwm.WindowAggregate(gpuwm.Session("t", 10), by=["k"], aggs={"n": ("*", "count")}, backend=backend)
    push = lambda rows: a.push(pa.table({"t": [t for t, _ in rows], "k": [k for _, k in rows]}))  # noqa: E731
    push([(0, f"a{i}") for i in range(10)])  # codes 0..9
    push([(100, "x")])  # code 10: searches (and filters) the a-level
    push([(100, "y")])  # builds the x-level's filter
    assert a.drain(50).num_rows == 10  # the a-sessions go; 12 keys for 2 sessions: x, y become 0, 1
    push([(105, "x")])  # joins x's session [100, 110)
    assert a.drain(200).to_pydict() == {"window_start": [100, 100], "window_end": [115, 110], "k": ["x", "y"],
                                        "n": [2, 1]}
