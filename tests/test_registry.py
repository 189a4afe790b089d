"""The stage registry (gpuwm/operator.py): JSON stages parsed by their own
spec classes, looked up by kind; near misses named; kinds kept apart."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa
import pytest

import gpuwm
from gpuwm.operator import OperatorSpec, StageContext, stage_from_json, stage_kinds
from gpuwm.watermark import WatermarkSpec

CTX = StageContext("ts", {None: WatermarkSpec("ts", 5)})


def test_gpuwms_own_stages_are_registered_by_their_spec_classes():
    from gpuwm.dedup import DedupSpec
    from gpuwm.join import IntervalJoinSpec, WindowJoinSpec
    from gpuwm.over import OverSpec
    from gpuwm.session import SessionSpec
    from gpuwm.sort import SortSpec
    from gpuwm.union import UnionSpec
    from gpuwm.window import Hop, Tumble, WindowSpec

    kinds = stage_kinds()
    assert {"window", "sort", "dedup", "over", "join", "union", "topn"} <= set(kinds)
    assert stage_from_json("window", {"tumble": 10, "by": ["k"]}, CTX) == \
        WindowSpec(Tumble("ts", 10), by=("k",), aggs={"count": ("*", "count")})
    assert stage_from_json("window", {"hop": 10, "slide": 5}, CTX).window == Hop("ts", 10, 5)
    assert isinstance(stage_from_json("window", {"session": 7}, CTX), SessionSpec)
    assert stage_from_json("sort", {"key": ["k"]}, CTX) == SortSpec("ts", ("k",))
    assert stage_from_json("dedup", {"key": ["k"]}, CTX) == DedupSpec(("k",), "ts", 5)
    assert stage_from_json("dedup", {"key": ["k"], "forever": True}, CTX) == DedupSpec(("k",), "ts", None)
    over = stage_from_json("over", {"by": ["k"], "funcs": {"rn": ["row_number"]}},
                           StageContext("ts", CTX.watermarks, previous=SortSpec("ts", ("k",))))
    assert over == OverSpec(("k",), {"rn": ["row_number"]}, "ts", ("k",))
    named = {"a": pa.schema([("id", pa.int64()), ("at", pa.int64())]),
             "b": pa.schema([("aid", pa.int64()), ("bt", pa.int64())])}
    two = StageContext(None, {"a": WatermarkSpec("at", 5), "b": WatermarkSpec("bt", 5)}, named)
    assert stage_from_json("join", {"left": "a", "right": "b", "on": [["id", "aid"]], "between": ["bt", "at", 0, 9]},
                           two) == IntervalJoinSpec("a", "b", (("id", "aid"),), "at", "bt", 0, 9)
    assert stage_from_json("join", {"left": "a", "right": "b", "on": [["id", "aid"]], "window": {"tumble": 10}},
                           two) == WindowJoinSpec("a", "b", (("id", "aid"),), "at", "bt", 10, 10)
    from gpuwm.topn import TopNSpec

    assert stage_from_json("topn", {"window": 10, "by": ["k"], "order": ["-v"], "n": 3, "output": "rn"}, CTX) == \
        TopNSpec(Tumble("ts", 10), ("k",), (("v", True, False),), 3, "row_number", "rn")
    after = StageContext("window_time", CTX.watermarks, previous=WindowSpec(Hop("ts", 10, 5), by=("k",)))
    assert stage_from_json("topn", {"order": [["count", "desc"]], "n": 2, "fn": "dense_rank"}, after) == \
        TopNSpec(Tumble("window_time", 5), (), (("count", True, False),), 2, "dense_rank")
    with pytest.raises(gpuwm.ConfigError, match="without 'window' ranks a tumbling or hopping window stage's rows"):
        stage_from_json("topn", {"order": ["v"], "n": 1}, CTX)
    with pytest.raises(gpuwm.ConfigError, match="watermarks on one column"):
        stage_from_json("union", {}, two)
    same = StageContext(None, {"a": WatermarkSpec("at", 5), "b": WatermarkSpec("at", 9)},
                        {"a": named["a"], "b": named["a"]})
    assert stage_from_json("union", {}, same) == UnionSpec(("a", "b"), "at")
    # the stateless stages Spark's Project and Filter become between operators
    from gpuwm.select import ProjectSpec, SelectSpec

    assert stage_from_json("select", {"columns": ["k", ["t", "ts"]]}, CTX) == SelectSpec(("k", ("t", "ts")))
    steps = [{"where": {"is_not_null": {"col": "k"}}}, [["k2", {"arith": ["+", {"col": "k"}, {"col": "k"}, True]}]]]
    assert stage_from_json("project", {"steps": steps}, CTX) == ProjectSpec(steps) == ProjectSpec(json.dumps(steps))
    with pytest.raises(gpuwm.ConfigError, match=r"project steps are a list of \{"):
        stage_from_json("project", {"steps": [["k2"]]}, CTX)
    schema = pa.schema([("ts", pa.int64()), ("k", pa.int64())])
    assert ProjectSpec(steps).output_schema(schema) == pa.schema([*schema, ("k2", pa.int64())])
    with pytest.raises(gpuwm.SchemaError, match=r"project column\(s\) \['k'\] are the stream's already"):
        ProjectSpec([[["k", {"col": "ts"}]]]).output_schema(schema)
    with pytest.raises(gpuwm.SchemaError, match="reads column .*nope.*; it has"):
        ProjectSpec([[["x", {"col": "nope"}]]]).output_schema(schema)


def test_near_misses_are_named():
    with pytest.raises(gpuwm.ConfigError, match="unknown stage kind 'windw': did you mean 'window'\\?"):
        stage_from_json("windw", {}, CTX)
    with pytest.raises(gpuwm.ConfigError, match="window: unknown key 'tumbel': did you mean 'tumble'\\?"):
        stage_from_json("window", {"tumbel": "10 seconds"}, CTX)
    with pytest.raises(gpuwm.ConfigError, match="'slide' goes with 'hop'"):
        stage_from_json("window", {"tumble": 10, "slide": 5}, CTX)
    with pytest.raises(gpuwm.ConfigError, match="dedup needs 'key'"):
        stage_from_json("dedup", {}, CTX)
    with pytest.raises(gpuwm.ConfigError, match="dedup's 'forever' is true or false, got 'yes'"):
        stage_from_json("dedup", {"key": ["k"], "forever": "yes"}, CTX)
    with pytest.raises(gpuwm.ConfigError, match="input 'a': this pipeline has one input"):
        stage_from_json("join", {"left": "a", "right": "b", "on": [["x", "y"]], "between": ["t", "u", 0, 1]}, CTX)


def test_a_kind_belongs_to_one_spec_class():
    with pytest.raises(gpuwm.ConfigError, match="stage kind 'sort' is gpuwm.sort.SortSpec's already"):
        @dataclass(frozen=True)
        class Other(OperatorSpec):
            kind: ClassVar[str] = "sort"

            @classmethod
            def from_json(cls, options, ctx):
                return cls()
    assert stage_kinds()["sort"].__module__ == "gpuwm.sort"
