"""What a query translates to (:class:`Translation`), what gpuwm refuses
(:class:`Refused`), and the questions rules ask of a translation so far."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable

from ...errors import GpuwmError


def bounds_struct(start: str, end: str) -> dict:
    """Spark's window struct as gpuwm's rows make it: the struct of the columns of its bounds."""
    return {"struct": [["start", {"col": start}], ["end", {"col": end}]]}


WINDOW_STRUCT = bounds_struct("window_start", "window_end")


#: the watermark delay of a join's inputs whose rows Spark never drops as late: a century (the watermark stays a
#: time pandas holds, from 1678 on)
NO_LATE_ROWS = timedelta(days=36_525)


#: every refusal's code, with what it refuses (the front's README lists them; the plan fixtures cover each)
CODES: dict[str, str] = {
    # the query as a whole
    "PLAN_UNREADABLE": "the query's plan cannot be read over py4j: a Spark Connect DataFrame, or none of classic PySpark",
    "SPARK_VERSION": "the running Spark is not a line gpuwm supports (4.0 to 4.3)",
    "OPTIMIZER_FAILED": "Spark's optimizer fails on the query's plan",
    "GPUWM_BUG": "an exception escaped translation: gpuwm's bug (Spark runs the query)",
    "STATELESS": "no stateful operator: only projections and filters over the source",
    "NODE_KIND": "a node at the query's top that no rule translates",
    "NODE_ABOVE": "a sort, a limit, an expand or a generate over the last operator",
    "NODE_BELOW": "a node below an operator that no rule translates (a union ...)",
    "EXPRESSION": "an expression gpuwm does not evaluate (a select, a filter, an output)",
    "DUPLICATE_NAMES": "two columns of one name in a select or an operator's output",
    "NOT_DETERMINISTIC": "a non-deterministic expression where its rows would differ",
    "STAGES": "stages gpuwm's builder cannot chain or join",
    "OUTPUT_COLUMNS": "gpuwm's output columns would not be Spark's (names or types)",
    "OUTPUT_MODE": "an output mode gpuwm does not run the query's operators in",
    # the watermarked source
    "NO_WATERMARK": "no withWatermark under the operator",
    "WATERMARK_TYPE": "a watermark on a column that is not a timestamp",
    "INTERVAL_MONTHS": "an interval with months (its length varies)",
    "PUSHED_FILTER": "a filter Spark's optimizer moves below the watermark where gpuwm cannot place it",
    "TIME_FILTER": "a filter on the event time between withWatermark and the operator",
    "TIME_DROPPED": "a select that drops the event time between withWatermark and the operator",
    "NO_EVENT_TIME": "an operator over rows that carry no event time",
    # windows
    "NO_WINDOW": "a grouping without window(...) or session_window(...) of the event time",
    "WINDOW_FORM": "a window(...) or session_window(...) gpuwm does not read as Spark wrote it",
    "WINDOW_OFFSET": "a window with a start offset",
    "WINDOW_SLIDE": "a hopping window whose slide does not divide its size",
    "WINDOW_TIME_AMBIGUOUS": "a window's time column that is one of several of its name",
    "WINDOW_STRUCT": "a window struct (or its field, its window_time) gpuwm's rows do not carry",
    # aggregations
    "GROUPING_EXPRESSION": "a grouping expression (not a column)",
    "GROUPING_COLUMN": "a grouping column the stage below does not give",
    "GLOBAL_SESSION": "a session window with no grouping keys (Spark refuses it too)",
    "BY_SESSION_WINDOW": "an aggregation by a session window's column",
    "AGG_FUNCTION": "an aggregate function gpuwm does not have",
    "AGG_TYPE": "an aggregate of a type gpuwm's do not take (a decimal, a string)",
    "AGG_DISTINCT": "a DISTINCT aggregate gpuwm does not have",
    "AGG_POSITIONAL": "first / last where gpuwm's would differ from Spark's",
    "AGG_FILTER": "an aggregate's FILTER gpuwm does not apply (first / last)",
    "AGG_ARGUMENT": "an aggregate's argument gpuwm does not compute there",
    # dedups
    "DEDUP_KEY": "a dedup key the stage below does not give",
    "DEDUP_UNBOUNDED": "a dedup over a join with no time bound",
    "DEDUP_FOREVER": "dropDuplicates without the event time over a stage's rows",
    # top-N
    "RANK_FUNCTIONS": "more than one window function",
    "RANK_FUNCTION": "a window function other than row_number, rank, dense_rank",
    "RANK_FILTER": "a rank without the filter rank <= N right above it",
    "RANK_PARTITION": "a PARTITION BY gpuwm does not take",
    "RANK_ORDER": "an ORDER BY of an expression",
    "RANK_STATE": "a rank whose state would never be cleaned",
    "RANK_WINDOW": "a rank partitioned by a window other than a tumbling one (or an aggregation's)",
    "RANK_INPUT": "a rank over a dedup's or a join's rows",
    "RANK_COLUMN": "a column of the ranked rows computed after withWatermark",
    # joins
    "JOIN_STATIC": "a stream-static join",
    "JOIN_TYPE": "a join type other than inner, left, right, full outer",
    "JOIN_CONDITION": "a join condition gpuwm does not read",
    "JOIN_KEYS": "a join without equal keys, equal event times or equal windows",
    "JOIN_BOUNDS": "time bounds gpuwm's join does not take",
    "JOIN_WINDOW": "a window(...) in a join's side gpuwm does not join by",
    "JOIN_SIDE": "a join's side that is rows gpuwm does not join",
    "JOIN_SOURCE_NAMES": "one source read by two joins under other column names",
    "JOIN_WATERMARK": "Spark's join output watermark cannot be derived",
    "JOIN_LATENESS": "a join with no time bound whose late rows Spark drops otherwise",
    # the writer
    "SINK_FORMAT": "a sink format gpuwm does not write",
    "SINK_OPTION": "a sink option gpuwm's sink does not apply",
    "SINK_CALL": "a writer call gpuwm does not run (partitionBy, clusterBy, foreach)",
    "SINK_COLUMNS": "columns a Kafka sink does not write",
    "SINK_TABLE": "toTable of a table gpuwm does not write",
    "TRIGGER": "a continuous trigger",
}


class Refused(Exception):
    """What gpuwm cannot run: its ``code`` (a key of :data:`CODES`, stable),
    ``operator`` (Spark's name for it) and why."""

    def __init__(self, code: str, operator: str, reason: str):
        if code not in CODES:
            raise ValueError(f"refusal code {code!r} is not one of gpuwm's (translation.CODES)")
        super().__init__(f"[{code}] {operator}: {reason}")
        self.code, self.operator, self.reason = code, operator, reason


def refusal(e: Exception) -> Refused:
    """``e`` met while translating or planning a query as the reason Spark
    runs it: a :class:`Refused` as it is, any other exception (not gpuwm's
    own errors, which the user is to see) named as gpuwm's bug, so that the
    query still runs in Spark instead of failing in neither."""
    if isinstance(e, Refused):
        return e
    if isinstance(e, GpuwmError):
        raise e
    first = (str(e).strip().splitlines() or [""])[0][:300]
    return Refused("GPUWM_BUG", "the query", f"gpuwm failed to translate it ({type(e).__name__}: {first}) — a gpuwm bug, "
                                "please report it with the query")


@dataclass
class Translation:
    """A query as gpuwm runs it: Spark's ``source`` DataFrame (below
    ``withWatermark``), the watermark, the stages in order, and the
    projection steps from the last stage's output to the query's columns."""

    source: Any
    column: str
    delay: timedelta
    stages: list[dict] = field(default_factory=list)  # stage records, as a spec's: {"window": {...}}, ...
    output: list = field(default_factory=list)
    shown: list[str] = field(default_factory=list)  # the operators, for explain
    output_ids: dict[int, str] = field(default_factory=dict)  # Spark's expression id -> output column
    columns: dict[int, str] = field(default_factory=dict)  # Spark's id -> gpuwm's column, of the last stage's rows
    window_id: int | None = None  # the last stage's window column (a struct in Spark; start/end in gpuwm)
    time: tuple[str, str] | None = None  # the rows' event-time column: (Spark's name, gpuwm's); None: a window's
    #                                      rows without window_time(window)
    inputs: dict[str, Translation] | None = None  # a join's two inputs ("left", "right"), each a watermarked source
    other_times: list[tuple[str, str]] = field(default_factory=list)  # more event-time columns (a join's right time)
    shown_time: str | None = None  # the watermark's column as the query names it, where gpuwm's name is its own
    origin: str = ""  # the watermarked source the rows come from (:meth:`Context.source_name`): one input
    graph: list[tuple[str, tuple[str, ...]]] | None = None  # a graph of stages: each one's name and what it reads
    derived: tuple[str, ...] = ()  # a graph's join: its sides ("left", "right") that are a stage's rows
    window_of: tuple | None = None  # a window stage's rows: (the window they are in, its start column, its end's)
    joined: list[str] | None = None  # a graph's join: its rows' columns (its left feed's, then its right's)
    pushed: str = ""  # the filters Spark's optimizer puts below the watermark, written above it (explain)
    node: str | None = None  # a watermarked source's withWatermark (Spark's node id): reads of one share it
    computed: list[int] = field(default_factory=list)  # Spark's ids of output columns computed on each output row
    #                                                    (an aggregation's max(price) * 2): no column of gpuwm's yet
    lag: Callable[[], timedelta] | None = None  # a graph's join: its output watermark behind its input's, as
    #                                             Spark's (``rules.join._output_lag``), set on its stage once an operator
    #                                             reads its rows (:func:`consumed`)
    windows: dict[int, tuple[str, str, str]] = field(default_factory=dict)  # a join's rows: Spark's id of an


def copied(t: Translation, ids: dict[int, int] | None = None) -> Translation:
    """A copy of ``t`` a rule may change without changing ``t`` (its
    stages, columns and lists its own; Spark's DataFrame shared), with
    Spark's expression ids of its rows mapped by ``ids`` (a copy of the
    subtree ``t`` translates: its output's ids, position by position)."""
    import copy
    from dataclasses import replace

    ids = ids or {}

    def keys(d: dict) -> dict:
        return {ids.get(i, i): v for i, v in d.items()}

    return replace(t, stages=copy.deepcopy(t.stages), output=copy.deepcopy(t.output), shown=list(t.shown),
                   output_ids=keys(t.output_ids), columns=keys(t.columns), windows=keys(t.windows),
                   window_id=ids.get(t.window_id, t.window_id), computed=[ids.get(i, i) for i in t.computed],
                   inputs=None if t.inputs is None else {n: copied(x, ids) for n, x in t.inputs.items()},
                   other_times=list(t.other_times), graph=None if t.graph is None else list(t.graph),
                   joined=None if t.joined is None else list(t.joined))


def interval(iv) -> timedelta:
    """A CalendarInterval (a watermark's delay, a gap) as a timedelta; months refused."""
    from py4j.java_gateway import get_field

    if get_field(iv, "months"):
        raise Refused("INTERVAL_MONTHS", "EventTimeWatermark", f"an interval with months ({iv.toString()}): its length varies")
    return timedelta(days=get_field(iv, "days"), microseconds=get_field(iv, "microseconds"))


#: a stage record's keys besides its kind's: its name in a graph, and the stream it reads
WIRING = ("name", "input")


def kind_of(st: dict) -> str:
    """A stage record's kind (``{"window": {...}}``: ``window``): its one key besides :data:`WIRING`."""
    return next(k for k in st if k not in WIRING)


def options_of(st: dict) -> dict:
    """A stage record's options: what its kind's ``from_json`` takes."""
    return st[kind_of(st)]


def window_record(win: Any, by: Any, aggs: dict) -> dict:
    """The record of a window stage: gpuwm window ``win`` (a Tumble, Hop or
    Session) of its column, keys ``by``, ``aggs`` (column -> (what, fn))."""
    from ...session import Session
    from ...window import Tumble

    form = {"session": win.gap} if isinstance(win, Session) else {"tumble": win.size} if isinstance(win, Tumble) \
        else {"hop": win.size, "slide": win.slide}
    return {"window": {**form, "on": win.column, "by": list(by), "aggs": {k: list(v) for k, v in aggs.items()}}}


def stage_window(st: dict) -> Any:
    """The gpuwm window (Tumble, Hop, Session) of a window stage's record."""
    from ...session import Session
    from ...window import Hop, Tumble

    o = options_of(st)
    return Tumble(o["on"], o["tumble"]) if "tumble" in o else Hop(o["on"], size=o["hop"], slide=o["slide"]) \
        if "hop" in o else Session(o["on"], o["session"])


def last_at(t: Translation) -> int:
    """The index of ``t``'s last stage that is not a project (which passes
    that stage's rows on, with columns added and rows filtered), or -1."""
    return next((k for k in range(len(t.stages) - 1, -1, -1) if kind_of(t.stages[k]) != "project"), -1)


def last_stage(t: Translation) -> dict | None:
    """``t``'s last stage that is not a project (:func:`last_at`), or None."""
    at = last_at(t)
    return t.stages[at] if at >= 0 else None


def last_kind(t: Translation) -> str | None:
    """The kind of ``t``'s last stage that is not a project, or None."""
    last = last_stage(t)
    return None if last is None else kind_of(last)


def added_columns(t: Translation) -> list[str]:
    """The columns the project stages after ``t``'s last other stage add."""
    return [c for st in t.stages[last_at(t) + 1:] for step in options_of(st)["steps"] if isinstance(step, list)
            for c, _ in step]


def aggregated(t: Translation) -> bool:
    """Whether ``t``'s rows are a window aggregation's (its last stage, but
    for projects over them)."""
    return last_kind(t) == "window"


def ends_in_join(t: Translation) -> dict | None:
    """The options of ``t``'s last stage where it is a join, else None."""
    return options_of(t.stages[-1]) if t.stages and kind_of(t.stages[-1]) == "join" else None


def unbounded_join(t: Translation) -> bool:
    """Whether ``t``'s last stage is an inner join without a time bound."""
    j = ends_in_join(t)
    return j is not None and j.get("between") is not None and j["between"][2] is None and j["between"][3] is None


def rows_of(t: Translation) -> str:
    """What ``t``'s rows are, for a refusal: its last stage's (a project's
    passes them on), or a join's."""
    last = last_kind(t)
    return f"a {last}'s rows" if last is not None else "a join's rows"
