"""Over-windows on the ordered stream against the row-at-a-time reference,
on every backend, with the state saved and reloaded through its parts at
any point."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpuwm
from gpuwm.over import Over
from kernels.over import segmented_cumsum, segments, shifted

from .reference import RefOver

FUNCS = {"p1": ["lag", "v", 1], "p2": ["lag", "v", 2], "rn": ["row_number"], "s": ["sum", "v"],
         "c": ["count", "v"], "cs": ["count", "*"], "mn": ["min", "v"], "mx": ["max", "v"]}
LEADS = {"n1": ["lead", "v", 1], "n3": ["lead", "v", 3]}

# a batch: (ts step >= 0, key, v) rows; ts is cumulative over the whole stream, id unique
batches_st = st.lists(st.lists(st.tuples(st.integers(0, 2), st.one_of(st.none(), st.integers(0, 3)),
                                         st.one_of(st.none(), st.integers(-20, 20))), max_size=12), max_size=8)


def _stream(batches, rng) -> list[list[tuple]]:
    """Rows (ts, key, v, id), ordered across batches; each batch shuffled
    (an exchange may deliver a batch in any order)."""
    out, ts, rid = [], 0, 0
    for b in batches:
        rows = []
        for step, k, v in b:
            ts += step
            rows.append((ts, k, v, 1000 - rid))  # ids fall while ts rises: ties on ts order by id
            rid += 1
        out.append([rows[i] for i in rng.permutation(len(rows))])
    return out


def _table(rows, keys: str, vtype) -> pa.Table:
    k = pa.array([None if r[1] is None else f"key{r[1]}" for r in rows], pa.string()) if keys == "str" else \
        pa.array([r[1] for r in rows], pa.int64())
    return pa.table({"ts": pa.array([r[0] for r in rows], pa.int64()), "k": k,
                     "v": pa.array([r[2] for r in rows], vtype), "id": pa.array([r[3] for r in rows], pa.int64())})


def _rows(t: pa.Table, keys: str, names: list[str]) -> list[tuple]:
    conv = (lambda k: None if k is None else int(k.removeprefix("key"))) if keys == "str" else (lambda k: k)
    return [(r["ts"], conv(r["k"]), r["v"], r["id"], *(r[n] for n in names)) for r in t.to_pylist()]


def _through_store(o: Over, backend: str) -> Over:
    parts = {name: o.snapshot_part(name) for name in o.state_parts()}
    tables = o.state_tables()
    o.mark_saved(list(parts))
    return Over(o.by, o.funcs, o.column, o.order, backend=backend).load_state(tables, parts)


@pytest.mark.parametrize("keys", ["int", "str", "none"])
@pytest.mark.parametrize("lead", [False, True])
@pytest.mark.parametrize("vtype", [pa.int64(), pa.float32()])
@given(batches=batches_st, stop=st.integers(0, 8), seed=st.integers(0, 3))
def test_over_matches_reference(backend, keys, lead, vtype, batches, stop, seed):
    funcs = {**FUNCS, **(LEADS if lead else {})}
    ref_funcs = {n: ("count*" if f == ["count", "*"] else f[0], f[2] if len(f) > 2 else 0) for n, f in funcs.items()}
    o = Over([] if keys == "none" else ["k"], funcs, "ts", ["id"], backend=backend)
    ref = RefOver(ref_funcs, keyed=keys != "none")
    names = list(funcs)
    for i, b in enumerate(_stream(batches, np.random.default_rng(seed))):
        if i == stop:
            o = _through_store(o, backend)
        assert _rows(o.push(_table(b, keys, vtype)), keys, names) == ref.push(b)
    assert _rows(o.flush(), keys, names) == ref.flush()
    assert o.rows_out == sum(len(b) for b in batches)


def test_output_watermark_holds_back_rows_waiting_for_a_successor():
    o = Over(["k"], {"nxt": ["lead", "v"]}, "ts")
    assert o.push(pa.table({"ts": [1, 2, 3], "k": [1, 2, 1], "v": [1, 2, 3]})).column("ts").to_pylist() == [1]
    assert o.release(10).watermark == 2  # rows at 2 (key 2) and 3 (key 1) wait
    o.push(pa.table({"ts": [11], "k": [2], "v": [4]}))
    assert o.release(12).watermark == 3
    o = Over(["k"], {"prev": ["lag", "v"]}, "ts")
    o.push(pa.table({"ts": [1], "k": [1], "v": [1]}))
    assert o.release(10).watermark == 10  # nothing waits without lead


def test_kernels():
    s = segments(np, np.array([1, 0, 0, 1, 0, 1], bool))
    assert s.pos.tolist() == [0, 1, 2, 0, 1, 0]
    idx, hit = shifted(np, s, 1)
    assert hit.tolist() == [True, True, False, True, False, False] and idx[hit].tolist() == [1, 2, 4]
    assert segmented_cumsum(np, np.array([1, 1, 1, 2, 2, 7]), s).tolist() == [1, 2, 3, 2, 4, 7]


def test_over_errors():
    with pytest.raises(gpuwm.ConfigError, match="expected one of"):
        Over(["k"], {"x": ["median", "v"]}, "ts")
    with pytest.raises(gpuwm.ConfigError, match="n >= 1"):
        Over(["k"], {"x": ["lag", "v", 0]}, "ts")
    with pytest.raises(gpuwm.ConfigError, match="row_number takes no argument"):
        Over(["k"], {"x": ["row_number", "v"]}, "ts")
    with pytest.raises(gpuwm.ConfigError, match="collides with an input column"):
        Over(["k"], {"v": ["row_number"]}, "ts").push(pa.table({"ts": [1], "k": [1], "v": [1]}))
    with pytest.raises(gpuwm.SchemaError, match="sum needs a numeric column"):
        Over(["k"], {"x": ["sum", "s"]}, "ts").push(pa.table({"ts": [1], "k": [1], "s": ["a"]}))
    with pytest.raises(gpuwm.StateError, match="not of an over-window"):
        Over(["k"], {"x": ["row_number"]}, "ts").restore({"state": pa.table({"x": [1]})})
