"""Operators fed a device Frame (what the Spark runtime does on the GPU, so a
batch moves to the device once) behave exactly as when fed Arrow."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpuwm
from gpuwm.frame import Frame

ROWS = st.lists(
    st.tuples(st.one_of(st.none(), st.integers(0, 60)), st.integers(0, 3), st.sampled_from(["x", "y", "zz"]),
              st.integers(-5, 5)),
    max_size=40,
)


def _table(rows, split_type):
    splits = [r[1] for r in rows]
    return pa.table({
        "ts": pa.array([r[0] for r in rows], pa.int64()),
        "sp": pa.array(splits if split_type == "int" else [f"s{s}" for s in splits],
                       pa.int32() if split_type == "int" else pa.string()),
        "k": pa.array([r[2] for r in rows], pa.string()),
        "v": pa.array([r[3] for r in rows], pa.int64()),
    })


@pytest.mark.parametrize("split_type", ["int", "str"])
@pytest.mark.parametrize("profile", ["risingwave", "spark", "flink"])
@given(chunks=st.lists(ROWS, min_size=1, max_size=5))
def test_frame_chain_equals_arrow_chain(backend, split_type, profile, chunks):
    b = gpuwm.get_backend(backend)
    nulls = "error" if profile == "flink" else None
    knobs = {"nulls": "drop"} if nulls else {}

    def ops():
        return (gpuwm.WatermarkFilter("ts", delay=7, profile=profile, split="sp", backend=backend, **knobs),
                gpuwm.StreamSort("ts", key=["k", "v"], profile=profile, backend=backend),
                gpuwm.WindowAggregate(gpuwm.Hop("ts", size=10, slide=5), by=["k"],
                                      aggs={"n": ("*", "count"), "s": ("v", "sum")},
                                      emit="on-window-close", profile=profile, backend=backend))

    arrow, device = ops(), ops()
    for rows in chunks:
        t = _table(rows, split_type)
        outs = []
        for (f, s, w), data in ((arrow, t), (device, Frame.from_arrow(t, b))):
            kept, stats = f.filter_local(data)
            assert isinstance(kept, type(data))
            f.advance([stats])
            s.push(kept)
            w.push(kept)
            outs.append((stats, s.drain(f.output_watermark), w.drain(f.output_watermark), f.watermark,
                         f.late_rows, f.null_rows))
            if isinstance(kept, Frame):
                outs[-1] += (kept.to_arrow(),)
            else:
                outs[-1] += (kept,)
        assert outs[0] == outs[1]


def test_frame_from_another_backend_is_refused():
    cpu = gpuwm.get_backend("cpu")

    class Other:
        name = "gpu"

    fr = Frame.from_arrow(pa.table({"ts": [1, 2]}), cpu)
    fr.backend = Other()
    with pytest.raises(ValueError, match="backend 'gpu'"):
        gpuwm.StreamSort("ts", backend="cpu").push(fr)


COLS = st.lists(st.tuples(st.one_of(st.none(), st.integers(-3, 3)),
                          st.one_of(st.none(), st.sampled_from(["", "a", "bb", "ü€", "a" * 40])),
                          st.one_of(st.none(), st.integers(0, 9))),
                max_size=30)


def _mixed(rows):
    return pa.table({
        "i": pa.array([r[0] for r in rows], pa.int16()),
        "s": pa.array([r[1] for r in rows], pa.string()),
        "ls": pa.array([r[1] for r in rows], pa.large_string()),
        "d": pa.array([None if r[2] is None else Decimal(r[2]) / 4 for r in rows], pa.decimal128(6, 2)),
    })


@given(chunks=st.lists(COLS, min_size=1, max_size=4), data=st.data())
def test_frame_ops_equal_arrow_ops(backend, chunks, data):
    """take / filter / slice / concat of a Frame with strings (cuDF columns on
    ``gpu-sim-cudf``), large strings, decimals (host) and nullable integers
    give what the same Arrow operations give, with the schema's types."""
    b = gpuwm.get_backend(backend)
    tables = [_mixed(rows) for rows in chunks]
    frames = [Frame.from_arrow(t, b) for t in tables]
    for t, f in zip(tables, frames):
        assert f.to_arrow().equals(t)
    whole, fwhole = pa.concat_tables(tables).combine_chunks(), Frame.concat(frames)
    assert fwhole.to_arrow().equals(whole)
    for name in whole.column_names:  # one column back alone keeps its type too
        assert fwhole.columns[name].to_arrow(b).equals(whole.column(name).chunk(0))
    n = whole.num_rows
    idx = data.draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=2 * n if n else 0))
    assert fwhole.take(b.asarray(np.asarray(idx, dtype=np.int64))).to_arrow().equals(
        whole.take(pa.array(idx, pa.int64())))
    mask = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    assert fwhole.filter(b.asarray(np.asarray(mask, dtype=bool))).to_arrow().equals(whole.filter(pa.array(mask, pa.bool_())))
    lo, hi = sorted(data.draw(st.tuples(st.integers(0, n + 2), st.integers(0, n + 2))))
    assert fwhole.slice(lo, hi).to_arrow().equals(whole.slice(lo, max(min(hi, n) - lo, 0)))


@given(chunks=st.lists(COLS, min_size=1, max_size=4))
def test_string_key_codes_do_not_depend_on_backend(backend, chunks):
    """A string key column's codes (the dictionary every keyed operator's
    state refers to) are the same whether cuDF factorizes it on the device or
    Arrow does on the host: first appearance order, nulls NULL_CODE."""
    from gpuwm.keys import NULL_CODE, KeyCodec

    b = gpuwm.get_backend(backend)
    codec, seen = KeyCodec("s", pa.string()), {}
    for rows in chunks:
        frame = Frame.from_arrow(_mixed(rows), b)
        got = b.to_numpy(codec.encode(b.xp, frame.columns["s"], b)).tolist()
        want = [NULL_CODE if r[1] is None else seen.setdefault(r[1], len(seen)) for r in rows]
        assert got == want
        assert codec.decode(np.asarray(got, dtype=np.int64)).equals(pa.array([r[1] for r in rows], pa.string()))
