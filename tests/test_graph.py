"""A graph of stages (``Plan.graph``): what a graph must be, checked before
the first micro-batch, each problem in one line; the select stage that
renames a stream apart; and the JSON form of a stage's name and input.
(The graphs' rows against Spark's own queries — Nexmark q5, q7, q8 — are in
``tests/test_accelerate.py``.)"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import gpuwm
from gpuwm.dedup import DedupSpec
from gpuwm.errors import ConfigError, SchemaError
from gpuwm.inputs import InputsSpec, inputs_schema
from gpuwm.join import IntervalJoinSpec
from gpuwm.select import SelectSpec
from gpuwm.sort import SortSpec
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


def test_every_stream_of_a_graph_is_read_and_a_sort_in_it_runs_on_one_vnode(tmp_path):
    stages = [_maxp(), _maxp(), _join()]
    graph = (("maxp", ("bids",)), ("other", ("bids",)), ("q7", ("bids", "maxp")))
    with pytest.raises(ConfigError, match=r"\['other'\] feed no stage"):
        check_graph(stages, graph, ("bids",))
    check_graph(stages, graph, ("bids",), whole=False)  # a builder's prefix may leave one unread
    sort = [_maxp(), _join(), SortSpec("ts", ("k",))]
    sorted_graph = (("maxp", ("bids",)), ("q7", ("bids", "maxp")), ("out", ("q7",)))
    assert _plan(tmp_path, sort, sorted_graph).vnodes == 1
    with pytest.raises(ConfigError, match="a graph of stages with a sort runs on one vnode: .*use vnodes=1, got 2"):
        _plan(tmp_path, sort, sorted_graph, vnodes=2)


A = pa.schema([("a_ts", TS), ("a_id", pa.int64()), ("seller", pa.int64())])
B = pa.schema([("b_ts", TS), ("b_aid", pa.int64()), ("price", pa.int64())])


def _with_time(spec):
    """A window whose rows a later stage reads: with ``window_time``."""
    return spec.with_next(SelectSpec(("window_time",)))


def _graph(shape: str):
    """Nexmark's graphs as stages: q5 (per-auction counts fanned out to their
    per-window maximum and to the join back to it), q7 (the bids joined with
    their window's maximum, a global stage), q8 (two keyed windows joined),
    and a dedup's rows joined to the other input. (stages, graph, inputs)."""
    if shape == "q5":
        stages = [_with_time(WindowSpec(gpuwm.Tumble("b_ts", "10 seconds"), ("b_aid",), {"num": ("*", "count")})),
                  _with_time(WindowSpec(gpuwm.Tumble("window_time", "10 seconds"), (), {"maxn": ("num", "max")})),
                  SelectSpec((("mt", "window_time"), "maxn")),
                  IntervalJoinSpec("counts", "mx", (("window_time", "mt"),), "window_time", "mt", "0 seconds",
                                   "0 seconds", time_key=True, where=(("num", ">=", "maxn"),))]
        return stages, (("counts", ("bids",)), ("m0", ("counts",)), ("mx", ("m0",)), ("j", ("counts", "mx"))), \
            ("bids",)
    if shape == "q7":
        stages = [_with_time(WindowSpec(gpuwm.Tumble("b_ts", "5 seconds"), (), {"maxprice": ("price", "max")})),
                  IntervalJoinSpec("bids", "maxp", (("price", "maxprice"),), "b_ts", "window_time", None, None,
                                   where=(("b_ts", ">=", "window_start"), ("b_ts", "<", "window_end")))]
        return stages, (("maxp", ("bids",)), ("j", ("bids", "maxp"))), ("bids",)
    if shape == "q8":
        stages = [_with_time(WindowSpec(gpuwm.Tumble("a_ts", "10 seconds"), ("a_id",), {"seller": ("seller", "max")})),
                  _with_time(WindowSpec(gpuwm.Tumble("b_ts", "10 seconds"), ("b_aid",), {"nb": ("*", "count")})),
                  SelectSpec(("b_aid", ("bs", "window_start"), ("be", "window_end"), "nb", ("bt", "window_time"))),
                  IntervalJoinSpec("aw", "bw", (("a_id", "b_aid"), ("window_time", "bt")), "window_time", "bt",
                                   "0 seconds", "0 seconds", time_key=True)]
        return stages, (("aw", ("auctions",)), ("s1", ("bids",)), ("bw", ("s1",)), ("j", ("aw", "bw"))), \
            ("auctions", "bids")
    if shape == "two-reads":  # two keyed windows of the bids: not in one segment (each its own exchange of them)
        stages = [_with_time(WindowSpec(gpuwm.Tumble("b_ts", "10 seconds"), ("b_aid",), {"n1": ("*", "count")})),
                  _with_time(WindowSpec(gpuwm.Tumble("b_ts", "10 seconds"), ("price",), {"n2": ("*", "count")})),
                  SelectSpec(("price", ("t2", "window_time"), "n2")),
                  IntervalJoinSpec("w1", "s2", (("window_time", "t2"),), "window_time", "t2", "0 seconds",
                                   "0 seconds", time_key=True, where=(("n1", ">", "n2"),))]
        return stages, (("w1", ("bids",)), ("w2", ("bids",)), ("s2", ("w2",)), ("j", ("w1", "s2"))), ("bids",)
    if shape == "join-join":  # a join's rows, its auction time kept, joined again with the bids
        stages = [IntervalJoinSpec("auctions", "bids", (("a_id", "b_aid"),), "a_ts", "b_ts", "0 seconds", "3 seconds"),
                  SelectSpec((("l_id", "a_id"), ("l_ts", "a_ts"), ("p1", "price"))),
                  IntervalJoinSpec("s", "bids", (("l_id", "b_aid"), ("p1", "price")), "l_ts", "b_ts", "0 seconds",
                                   "2 seconds")]
        return stages, (("ab", ("auctions", "bids")), ("s", ("ab",)), ("j", ("s", "bids"))), ("auctions", "bids")
    if shape == "select-first":  # a select reading an input: after segment 0, which runs no stage
        stages = [SelectSpec(("b_ts", "b_aid", ("p", "price"))),
                  IntervalJoinSpec("auctions", "s", (("a_id", "b_aid"),), "a_ts", "b_ts", "0 seconds", "20 seconds")]
        return stages, (("s", ("bids",)), ("j", ("auctions", "s"))), ("auctions", "bids")
    stages = [DedupSpec(("b_aid",), "b_ts", "3 seconds"),
              IntervalJoinSpec("auctions", "bd", (("a_id", "b_aid"),), "a_ts", "b_ts", "0 seconds", "20 seconds")]
    return stages, (("bd", ("bids",)), ("j", ("auctions", "bd"))), ("auctions", "bids")


def _streams(seed: int, batches: int = 6, per: int = 300):
    """Each micro-batch as two input partitions of auctions and bids, out of order within a few seconds."""
    rng = np.random.default_rng(seed)
    out = []
    for b in range(batches):
        parts = []
        for _ in range(2):
            t0, na = b * 5_000_000, per // 5
            a = pa.table({"a_ts": pa.array(t0 + rng.integers(-4_000_000, 5_000_000, na), TS),
                          "a_id": rng.integers(0, 40, na), "seller": rng.integers(0, 5, na)}, schema=A)
            bids = pa.table({"b_ts": pa.array(t0 + rng.integers(-4_000_000, 5_000_000, per), TS),
                             "b_aid": rng.integers(0, 40, per), "price": rng.integers(0, 50, per)}, schema=B)
            parts.append({"auctions": a, "bids": bids})
        out.append(parts)
    return out


@pytest.mark.parametrize("shape", ["q5", "q7", "q8", "dedup", "two-reads", "join-join", "select-first"])
def test_a_graph_over_several_vnodes_gives_one_vnode_s_rows_batch_for_batch(tmp_path, shape, backend,
                                                                            monkeypatch):
    """Spark's task functions replayed (``tests/runtime_replay.py``, no JVM),
    the state reloaded from the checkpoint every other batch: a graph over 2
    and 3 vnodes — segment 0 sending each input to the stages that read it,
    a stream passing a segment on its way to a later one (q5's counts), a
    global stage on one task (q7's and q5's maximum), a select in its
    input's segment (q5, q8), q8's two windows in one segment, two windows
    of one input in two, a join of a join's rows, a select of an input
    (which lost its rows in segment 0, which runs no stage) — gives the
    rows one vnode gives, in the same
    micro-batches, a last one without data too; on each backend."""
    import gpuwm.spark.executor.device as device
    from gpuwm.inputs import to_union

    from .runtime_replay import run_tasks

    monkeypatch.setattr(device, "use_task_gpu", lambda b: None)  # gpu-sim has no CUDA device to pick

    stages, graph, names = _graph(shape)
    wm = InputsSpec(tuple((n, WatermarkSpec("a_ts" if n == "auctions" else "b_ts",
                                            "4 seconds" if n == "auctions" else "3 seconds", profile="spark"))
                          for n in names))
    schema = inputs_schema({n: A if n == "auctions" else B for n in names})
    got = {}
    for vnodes in (1, 2, 3):
        plan = Plan(Checkpoint(Location.of(str(tmp_path / f"ck{vnodes}"))), backend, vnodes, wm, tuple(stages),
                    Sink("parquet", str(tmp_path / f"out{vnodes}")), schema, graph=graph)
        batches = [[to_union(schema, {n: p[n] for n in names}) for p in parts] for parts in _streams(3)]
        batches.append([])  # a batch without data: the last watermark drains the stages' state
        outs, _ = run_tasks(plan, batches)
        got[vnodes] = [[] if o is None else sorted(map(repr, o.to_pylist())) for o in outs]
    if vnodes > 1:
        segments = [(s.stages, s.tasks) for s in plan.segments]
        assert segments == {"q5": [((), 3), ((0,), 3), ((1, 2), 1), ((3,), 3)], "q7": [((), 3), ((0,), 1), ((1,), 3)],
                            "q8": [((), 3), ((0, 1, 2), 3), ((3,), 3)],
                            "dedup": [((), 3), ((0,), 3), ((1,), 3)],
                            "two-reads": [((), 3), ((0,), 3), ((1, 2), 3), ((3,), 3)],
                            "join-join": [((), 3), ((0, 1), 3), ((2,), 3)],
                            "select-first": [((), 3), ((0,), 1), ((1,), 3)]}[shape]
    assert sum(map(bool, got[1])) >= 3, got[1]  # (q5: a window's hot items, one or a tie)
    assert got[2] == got[1] and got[3] == got[1]


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
