"""A pipeline described in a JSON file, so a cluster job needs no Python code.

Example (``gpuwm run q7.json`` or ``spark-submit ... gpuwm/app.py q7.json``)::

    {
      "source": {"format": "nexmark", "options": {"totalEvents": 1000000, "splits": 4}},
      "checkpoint": "ck/q7",
      "watermark": {"column": "date_time", "delay": "4 seconds", "split": "split", "profile": "spark"},
      "window": {"tumble": "10 seconds", "by": ["auction"],
                 "aggs": {"bids": ["*", "count"], "max_price": ["price", "max"]}},
      "sink": {"parquet": "out/q7"},
      "trigger": {"processingTime": "0 seconds"},
      "vnodes": 4
    }

``source``: ``format`` is ``nexmark``, ``kafka`` (add ``--packages
org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.1``; its ``partition``
column is the natural split) or any file format with a ``schema`` and
``path``; ``options`` are passed to ``readStream``; ``select`` (optional)
is a list of SQL expressions applied to the stream (e.g. to parse Kafka
values). Operator: ``window`` (``tumble``, ``hop`` + ``slide``, or
``session``: the gap) or
``sort`` (``{"key": [...]}``) or neither (filter only). ``sink``:
``{"parquet": path}`` or ``{"console": rows}``. ``read`` (optional):
``auto``, ``direct`` or ``spark`` — see ``Pipeline(read=...)`` (default:
Spark conf ``spark.gpuwm.read``, else ``auto``).
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import ConfigError
from ..session import Session
from ..window import Hop, Tumble

_TOP = {"source", "checkpoint", "watermark", "window", "sort", "sink", "trigger", "vnodes", "backend", "read"}


def load_spec(path: str) -> dict:
    try:
        with open(path) as fh:
            spec = json.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"pipeline spec {path!r} not found") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"pipeline spec {path!r} is not valid JSON: {e}") from None
    unknown = set(spec) - _TOP
    if unknown:
        raise ConfigError(f"pipeline spec {path!r}: unknown key(s) {sorted(unknown)}; expected {sorted(_TOP)}")
    for k in ("source", "checkpoint", "watermark", "sink"):
        if k not in spec:
            raise ConfigError(f"pipeline spec {path!r} needs {k!r}")
    if "window" in spec and "sort" in spec:
        raise ConfigError(f"pipeline spec {path!r}: choose one of 'window' and 'sort'")
    return spec


def build(spark, spec: dict, verbose: bool = True):
    """The :class:`~gpuwm.spark.Pipeline` a spec describes (not started)."""
    from . import Pipeline, read_nexmark

    src = spec["source"]
    fmt = src.get("format")
    opts = src.get("options", {})
    if fmt == "nexmark":
        df = read_nexmark(spark, spec["checkpoint"], **opts)
    elif fmt:
        r = spark.readStream.format(fmt)
        if "schema" in src:
            r = r.schema(src["schema"])
        for k, v in opts.items():
            r = r.option(k, str(v))
        df = r.load(src["path"]) if "path" in src else r.load()
    else:
        raise ConfigError("source needs a 'format'")
    if src.get("select"):
        df = df.selectExpr(*src["select"])
    p = Pipeline(df, spec["checkpoint"], vnodes=spec.get("vnodes"), backend=spec.get("backend"), verbose=verbose,
                 read=spec.get("read"))
    w = dict(spec["watermark"])
    p.watermark(w.pop("column"), w.pop("delay"), **w)
    if "window" in spec:
        win = dict(spec["window"])
        col = p._wm["column"]
        if "tumble" in win:
            window = Tumble(col, win.pop("tumble"))
        elif "hop" in win:
            window = Hop(col, size=win.pop("hop"), slide=win.pop("slide"))
        elif "session" in win:
            window = Session(col, win.pop("session"))
        else:
            raise ConfigError("window needs 'tumble': size, 'hop': size with 'slide', or 'session': gap")
        aggs = {k: tuple(v) for k, v in win.pop("aggs", {"count": ["*", "count"]}).items()}
        p.window(window, by=win.pop("by", []), aggs=aggs, emit=win.pop("emit", "on-window-close"))
        if win:
            raise ConfigError(f"unknown window key(s) {sorted(win)}")
    elif "sort" in spec:
        p.sort(key=spec["sort"].get("key", []))
    sink: dict[str, Any] = spec["sink"]
    if "parquet" in sink:
        p.write_parquet(sink["parquet"])
    elif "console" in sink:
        p.write_console(int(sink["console"]) if not isinstance(sink["console"], bool) else 20)
    else:
        raise ConfigError("sink needs 'parquet': path or 'console': rows")
    return p


def run(spark, spec: dict, verbose: bool = True):
    """Start the spec's query and wait: bounded sources run to the end."""
    p = build(spark, spec, verbose)
    q = p.start(trigger=spec.get("trigger"))
    bounded = spec["source"].get("format") == "nexmark" and int(
        spec["source"].get("options", {}).get("totalEvents", 1_000_000)) > 0
    if (spec.get("trigger") or {}).get("availableNow") or (spec.get("trigger") or {}).get("once"):
        q.awaitTermination()
    elif bounded:
        q.processAllAvailable()
        q.stop()
    else:
        q.awaitTermination()
    if q.exception() is not None:
        raise q.exception()
    return p
