"""A graph of stages (``Plan.graph``): what a graph must be, checked before
the first micro-batch, each problem in one line; the select stage that
renames a stream apart; and the JSON form of a stage's name and input.
(The graphs' rows against Spark's own queries — Nexmark q5, q7, q8 — are in
``tests/test_accelerate.py``.)"""

from __future__ import annotations

import pyarrow as pa
import pytest

import gpuwm
from gpuwm.errors import ConfigError, SchemaError
from gpuwm.inputs import InputsSpec, inputs_schema
from gpuwm.join import IntervalJoinSpec
from gpuwm.select import SelectSpec
from gpuwm.spark.executor.plan import Plan, Sink, check_graph
from gpuwm.spark.storage.checkpoint import Checkpoint, Location
from gpuwm.watermark import WatermarkSpec
from gpuwm.window import WindowSpec

TS = pa.timestamp("us", tz="UTC")
BIDS = pa.schema([("ts", TS), ("k", pa.int64()), ("price", pa.int64())])


def _maxp():
    return WindowSpec(gpuwm.Tumble("ts", "5 seconds"), (), {"maxprice": ("price", "max")}).with_next(
        SelectSpec(("window_time",)))


def _join(left="bids", right="maxp"):
    return IntervalJoinSpec(left, right, (("price", "maxprice"),), "ts", "window_time", None, None,
                            where=(("ts", ">=", "window_start"),))


def _plan(tmp_path, stages, graph, vnodes=1):
    wm = InputsSpec((("bids", WatermarkSpec("ts", "10 seconds", profile="spark")),))
    return Plan(Checkpoint(Location.of(str(tmp_path / "ck"))), "cpu", vnodes, wm, tuple(stages),
                Sink("console"), inputs_schema({"bids": BIDS}), graph=graph)


def test_a_graph_plan_knows_each_stages_input_and_output(tmp_path):
    """q7's graph: the window reads the input, the join reads both; each
    stage's input schema is what it reads (the join's: both, named), and
    the description the checkpoint keeps names the graph."""
    p = _plan(tmp_path, [_maxp(), _join()], (("maxp", ("bids",)), ("q7", ("bids", "maxp"))))
    assert p.schemas[0] == BIDS
    assert p.feeds(1) == ("bids", "maxp") and p.schemas[1].names == ["bids", "maxp"]
    assert p.outputs[1].names == ["ts", "k", "price", "window_start", "window_end", "maxprice", "window_time"]
    assert p.schemas[-1] == p.outputs[-1]
    assert '"graph": [["maxp", ["bids"]], ["q7", ["bids", "maxp"]]]' in p.describe()


@pytest.mark.parametrize("graph, why", [
    ((("maxp", ("bids",)), ("q7", ("bids", "nope"))), "reads 'nope', which is neither an input nor a stage before"),
    ((("maxp", ("bids",)), ("q7", ("maxp", "bids"))), r"takes \['bids', 'maxp'\], but the graph gives it"),
    ((("bids", ("bids",)), ("q7", ("bids", "maxp"))), "is named 'bids', which an input or a stage before has"),
    ((("maxp", ("bids", "bids")), ("q7", ("bids", "maxp"))), "reads one stream"),
    ((("maxp", ("bids",)),), "names 1 stage"),
])
def test_a_bad_graph_is_refused_in_one_line(tmp_path, graph, why):
    with pytest.raises(ConfigError, match=why):
        _plan(tmp_path, [_maxp(), _join()], graph)


def test_every_stream_of_a_graph_is_read_and_it_runs_on_one_vnode(tmp_path):
    stages = [_maxp(), _maxp(), _join()]
    graph = (("maxp", ("bids",)), ("other", ("bids",)), ("q7", ("bids", "maxp")))
    with pytest.raises(ConfigError, match=r"\['other'\] feed no stage"):
        check_graph(stages, graph, ("bids",))
    check_graph(stages, graph, ("bids",), whole=False)  # a builder's prefix may leave one unread
    with pytest.raises(ConfigError, match="runs on one vnode for now; use vnodes=1, got 2"):
        _plan(tmp_path, [_maxp(), _join()], (("maxp", ("bids",)), ("q7", ("bids", "maxp"))), vnodes=2)


def test_a_select_renames_columns_and_keeps_the_event_time():
    s = SelectSpec((("t", "window_time"), "maxprice"))
    out = s.output_schema(pa.schema([("window_time", TS), ("maxprice", pa.int64()), ("x", pa.int8())]))
    assert out.names == ["t", "maxprice"] and out.field("t").type == TS and s.event_time("window_time") == "t"
    op = s.build().bind(pa.schema([("window_time", TS), ("maxprice", pa.int64()), ("x", pa.int8())]))
    op.push(pa.table({"window_time": pa.array([1, 2], TS), "maxprice": [5, 6], "x": pa.array([0, 1], pa.int8())}))
    assert op.drain(None).to_pydict() == {"t": [v.as_py() for v in pa.array([1, 2], TS)], "maxprice": [5, 6]}
    assert op.drain(None).num_rows == 0
    with pytest.raises(SchemaError, match=r"select column\(s\) \['nope'\] not found"):
        SelectSpec(("nope",)).output_schema(out)
    with pytest.raises(ConfigError, match=r"gives column\(s\) \['a'\] more than once"):
        SelectSpec((("a", "x"), ("a", "y")))
    from gpuwm.operator import StageContext

    with pytest.raises(ConfigError, match="keeps the event-time column 'window_time'"):
        SelectSpec(("maxprice",)).check(StageContext("window_time"))


def test_a_json_stage_names_itself_and_its_input_beside_its_kind():
    from gpuwm.spark.front.spec import stage_parts, stages_of

    st = {"window": {"tumble": "5 seconds"}, "name": "maxp", "input": "bids"}
    assert stages_of({"stages": [st]}) == [st]
    assert stage_parts(st) == ("window", {"tumble": "5 seconds"}, {"name": "maxp", "input": "bids"})
    with pytest.raises(ConfigError, match="'name' and 'input' are stream names"):
        stages_of({"stages": [{"window": {}, "name": 3}]})
    with pytest.raises(ConfigError, match="stage 0 must be one of"):
        stages_of({"stages": [{"window": {}, "sort": {}}]})
