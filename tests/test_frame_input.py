"""Operators fed a device Frame (what the Spark runtime does on the GPU, so a
batch moves to the device once) behave exactly as when fed Arrow."""

from __future__ import annotations

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
