"""TopN (Window Top-N): the row-at-a-time reference on random streams —
row_number / rank / dense_rank, ascending and descending orders with nulls,
keys or none, late rows —, snapshot / restore, the spec's checks."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpuwm
from gpuwm.topn import TopNSpec

from .reference import RefTopN
from .test_join import _Store

rows_st = st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 60)), st.integers(0, 2),
                             st.one_of(st.none(), st.integers(0, 4)), st.integers(-3, 3)), max_size=20)
ops_st = st.lists(st.one_of(st.tuples(st.just("push"), rows_st), st.tuples(st.just("drain"), st.integers(0, 15))),
                  max_size=10)
ORDERS = {"-v": ((2, True, False),), "v,-u": ((2, False, True), (3, True, False)),
          "v nulls last": ((2, False, False),)}
SPEC_ORDERS = {"-v": ["-v"], "v,-u": ["v", "-u"], "v nulls last": [("v", "asc", "nulls_last")]}


def _table(rows, keytype="int"):
    return pa.table({"t": pa.array([r[0] for r in rows], pa.int64()),
                     "k": pa.array([f"key{r[1]}" if keytype == "str" else r[1] for r in rows],
                                   pa.string() if keytype == "str" else pa.int64()),
                     "v": pa.array([r[2] for r in rows], pa.int64()), "u": pa.array([r[3] for r in rows], pa.int64())})


def _rows(t: pa.Table, keytype="int") -> list:
    conv = (lambda k: int(k[3:])) if keytype == "str" else (lambda k: k)
    return sorted(((r["t"], conv(r["k"]), r["v"], r["u"], r["rn"]) for r in t.to_pylist()), key=repr)


@pytest.mark.parametrize("fn,order,keys,restore,until", [
    ("row_number", "-v", "int", False, False), ("rank", "v,-u", "str", True, False),
    ("dense_rank", "v nulls last", "none", False, False), ("row_number", "v,-u", "none", True, False),
    ("rank", "-v", "int", False, False), ("dense_rank", "-v", "str", True, False),
    ("row_number", "-v", "int", True, True), ("rank", "v,-u", "none", False, True),
    ("row_number", "-v", "int", True, "ttl"), ("dense_rank", "v,-u", "str", False, "ttl"),
    ("rank", "-v", "none", True, "ttl")])
@given(ops=ops_st, n=st.integers(1, 3))
def test_topn_matches_reference(backend, fn, order, keys, restore, until, ops, n):
    """Every drain equals the reference's rows and ranks (row_number's ties
    by arrival); late and null rows counted; the state never holds more
    than the rows that can still rank <= n — and with ``restore`` the state
    is saved after every push and drain as the state store saves it (a part
    not to be written again keeps its last file) and every push goes to an
    operator loaded from it.
    ``until``: partitions closed by a column (``t`` as a close time, not a
    window's event time: Nexmark q9's ``expires``); ``"ttl"``: one partition
    per key, closed once the watermark passes its latest ``t`` by 7 (q18's
    last bid per key)."""
    by = [] if keys == "none" else ["k"]
    if until == "ttl":
        mk = lambda: gpuwm.TopN(None, by, SPEC_ORDERS[order], n, fn, "rn", backend=backend,  # noqa: E731
                                ttl=("t", 7))
    elif until:
        mk = lambda: gpuwm.TopN(None, by, SPEC_ORDERS[order], n, fn, "rn", backend=backend,  # noqa: E731
                                until="t")
    else:
        mk = lambda: gpuwm.TopN(gpuwm.Tumble("t", 10), by, SPEC_ORDERS[order], n, fn, "rn",  # noqa: E731
                                backend=backend)
    a = mk()
    ref = RefTopN(10, (lambda r: (r[1],)) if by else (lambda r: ()), list(ORDERS[order]), n, fn,
                  until=until is True, ttl=7 if until == "ttl" else None)
    w, store = 0, _Store()
    for op, arg in ops:
        if op == "push":
            if restore and store.tables:
                a = store.load(mk())
            a.push(_table(arg, keys))
            ref.push(arg)
            if a.state_rows > 0:  # at most what can still rank <= n (ties aside) per open partition
                held = sum(min(len(v), n) for v in ref.state.values()) if fn == "row_number" else None
                assert held is None or a.state_rows == held
        else:
            w += arg
            got = a.drain(w)
            assert _rows(got, keys) == sorted(ref.drain(w), key=repr)
        if restore:
            store.save(a)
    assert (a.late_rows, a.null_rows) == (ref.late, ref.nulls)


def test_topn_output_types_and_order():
    t = gpuwm.TopN(gpuwm.Tumble("t", 10), ["k"], ["-v"], 2, "rank", "r")
    t.push(pa.table({"t": [1, 2, 3, 4], "k": [1, 1, 1, 1], "v": [5, 7, 7, 1]}))
    out = t.drain(10)
    assert out.schema.field("r").type == pa.int32()
    assert out.to_pydict() == {"t": [2, 3], "k": [1, 1], "v": [7, 7], "r": [1, 1]}
    assert t.state_rows == 0


def test_topn_spec_errors():
    with pytest.raises(gpuwm.ConfigError, match="partitions by a tumbling window"):
        TopNSpec(gpuwm.Hop("t", 10, 5), (), ["v"], 1)
    with pytest.raises(gpuwm.ConfigError, match="by a window, by an 'until' column or after a 'ttl', one of"):
        TopNSpec(gpuwm.Tumble("t", 10), (), ["v"], 1, until="t")
    with pytest.raises(gpuwm.ConfigError, match="one of them"):
        TopNSpec(None, (), ["v"], 1, until="t", ttl=("t", 5))
    with pytest.raises(gpuwm.ConfigError, match=r"ttl is \(event-time column, duration\)"):
        TopNSpec(None, (), ["v"], 1, ttl="5 seconds")
    with pytest.raises(gpuwm.ConfigError, match="ttl"):
        TopNSpec(None, (), ["v"], 1, ttl=("t", 0)).output_schema(pa.schema([("t", pa.int64()), ("v", pa.int64())]))
    with pytest.raises(gpuwm.ConfigError, match="n >= 1"):
        TopNSpec(gpuwm.Tumble("t", 10), (), ["v"], 0)
    with pytest.raises(gpuwm.ConfigError, match="ranks with one of"):
        TopNSpec(gpuwm.Tumble("t", 10), (), ["v"], 1, "ntile")
    with pytest.raises(gpuwm.ConfigError, match="needs an order"):
        TopNSpec(gpuwm.Tumble("t", 10), (), [], 1)
    with pytest.raises(gpuwm.SchemaError, match="orders by numbers and times"):
        gpuwm.TopN(gpuwm.Tumble("t", 10), (), ["s"], 1).push(pa.table({"t": [1], "s": ["x"]}))
