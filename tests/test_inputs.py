"""Several inputs' watermarks combined (gpuwm.inputs.InputFilters): the
minimum, None until every input has one, an input without rows keeps its
watermark, an idle input stops holding the others back, rows of every input
are late against the combined watermark with the profile's lag, and a
snapshot continues exactly."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest

import gpuwm
from gpuwm.inputs import InputFilters, InputsSpec
from gpuwm.join import inputs_schema
from gpuwm.watermark import WatermarkSpec

T = datetime(2026, 1, 1, tzinfo=timezone.utc)
A = pa.schema([("t", pa.int64())])
B = pa.schema([("u", pa.int64())])


def _filters(profile="risingwave", idle=None) -> InputFilters:
    spec = InputsSpec((("a", WatermarkSpec("t", 2, profile=profile, idle_timeout=idle)),
                       ("b", WatermarkSpec("u", 0, profile=profile, idle_timeout=idle))))
    return spec.build("cpu").bind(inputs_schema({"a": A, "b": B}))


def _rows(schema, *ts):
    return pa.table({schema.names[0]: pa.array(ts, pa.int64())})


def test_min_over_inputs_none_until_all_and_held_without_rows():
    f = _filters()
    f.process({"a": _rows(A, 100)}, now=T)
    assert f.watermark is None  # b has none yet: nothing is late
    kept = f.process({"a": _rows(A, 1), "b": _rows(B, 50)}, now=T)
    assert kept["a"].num_rows == 1 and f.watermark == 50
    f.process({"a": _rows(A, 200)}, now=T)  # b without rows keeps 50
    assert f.watermark == 50 and f.split_watermarks == {"a": 198, "b": 50}
    kept = f.process({"a": _rows(A, 49, 50, 51), "b": _rows(B, 10)}, now=T)  # risingwave: late when ts < W
    assert kept["a"]["t"].to_pylist() == [50, 51] and kept["b"].num_rows == 0 and f.late_rows == 2
    f.process({"b": _rows(B, 300)}, now=T)
    assert f.watermark == 198  # never decreases; the min moved up


def test_an_idle_input_stops_holding_the_others_back():
    f = _filters(idle="10 seconds")
    f.process({"a": _rows(A, 100), "b": _rows(B, 20)}, now=T)
    assert f.watermark == 20
    f.process({"a": _rows(A, 400)}, now=T + timedelta(seconds=5))
    assert f.watermark == 20  # b is quiet, not idle yet
    assert f.next_idle(T + timedelta(seconds=5)) == T + timedelta(seconds=10, milliseconds=1)
    f.process({"a": _rows(A, 500)}, now=T + timedelta(seconds=11))
    assert f.watermark == 498 and f.idle_splits(T + timedelta(seconds=11)) == ["b"]
    kept = f.process({"b": _rows(B, 30, 600)}, now=T + timedelta(seconds=12))  # b is back; its 30 is late
    assert kept["b"]["u"].to_pylist() == [600] and f.watermark == 498


def test_spark_lag_drops_against_the_combined_watermark_two_batches_back():
    f = _filters("spark")
    f.process({"a": _rows(A, 100), "b": _rows(B, 60)}, now=T)   # W0 = min(98, 60) = 60
    f.process({"a": _rows(A, 200), "b": _rows(B, 90)}, now=T)   # drops ts <= W_{-1} (none); W1 = 90
    assert (f.watermark, f.output_watermark) == (90, 60)
    kept = f.process({"a": _rows(A, 60, 61, 95), "b": _rows(B, 60, 89)}, now=T)  # drops ts <= W0 = 60
    assert kept["a"]["t"].to_pylist() == [61, 95] and kept["b"]["u"].to_pylist() == [89]
    again = _filters("spark").restore(f.snapshot())
    assert (again.watermark, again.output_watermark, again.late_rows) == (f.watermark, f.output_watermark, 2)


def test_inputs_need_one_profile_and_one_time_type():
    with pytest.raises(gpuwm.ConfigError, match="same profile"):
        InputsSpec((("a", WatermarkSpec("t", 2, profile="spark")), ("b", WatermarkSpec("u", 0))))
    spec = InputsSpec((("a", WatermarkSpec("t", 2)), ("b", WatermarkSpec("u", "0 seconds"))))
    with pytest.raises(gpuwm.SchemaError, match="one type to combine"):
        spec.build("cpu").bind(inputs_schema({"a": A, "b": pa.schema([("u", pa.timestamp("us", tz="UTC"))])}))
    with pytest.raises(gpuwm.ConfigError, match="one or more"):
        InputsSpec(())
    assert InputsSpec((("a", WatermarkSpec("t", 2)),)).names == ("a",)  # one named input: a graph's
