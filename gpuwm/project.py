"""A Spark projection evaluated over Arrow columns, with Spark's results:
the ``select`` a query applies to its source (Kafka's
``from_json(CAST(value AS STRING), schema)``, then naming the fields), so
that a task that reads its input itself (:mod:`gpuwm.spark.io.sources`) hands
the operators the rows Spark's plan would have; the filters and columns a
query computes between two stateful operators (a project stage,
:class:`gpuwm.select.ProjectSpec`); and the sink's projection of the last
stage's rows to the query's columns.

A projection is a list of steps; a step a list of ``[name, expr]``; an
expression a small JSON tree (the driver builds it from Spark's analyzed
plan, :func:`gpuwm.spark.driver.kafka.translate`):

- ``{"col": name}`` — a column of the step's input;
- ``{"field": [expr, name]}`` — a struct's field (``e.ts``);
- ``{"cast": [expr, type]}`` — ``binary → string`` (bytes as they are, as
  Spark's cast), ``string → binary`` (UTF-8), ``long → timestamp``
  (seconds), ``timestamp → bigint`` (whole seconds, floored, as Spark's
  ``floorDiv``), integer widening, an integer to ``int`` (ANSI: overflow fails),
  an integer or a decimal to a ``decimal(p,s)`` that holds all its values;
- ``{"ts": [expr, unit]}`` — ``timestamp_seconds/millis/micros``;
- ``{"struct": [[field, expr], ...]}`` — a struct of the expressions
  (``accelerate``'s ``window`` column from ``window_start``/``window_end``,
  ``named_struct``);
- ``{"array": [expr, ...]}`` — ``array(a, b, ...)``: each row's values as a
  list (a Kafka sink's ``headers``);
- ``{"from_json": [expr, [[field, type], ...]]}`` — Spark's ``from_json``
  with a struct of ``bigint``, ``int``, ``smallint``, ``tinyint``,
  ``double``, ``boolean`` and ``string`` fields, PERMISSIVE;
- ``{"lit": [value, type]}`` — a constant (a timestamp in microseconds, a
  ``decimal(p,s)`` as its text);
- ``{"cmp": [op, a, b]}`` (``=``, ``<``, ``<=``, ``>``, ``>=``), ``{"and":
  [a, b]}``, ``{"or": [a, b]}``, ``{"not": a}``, ``{"is_null": a}``,
  ``{"is_not_null": a}`` — Spark's predicates: null in, null out (three-valued
  ``and``/``or``), and for floating point Spark's order (NaN equals NaN and
  is above every other value);
- ``{"tumble": [expr, size]}`` — ``window(ts, size)``'s ``struct<start,
  end>`` of a timestamp (``size`` in microseconds; offset 0);
- ``{"date_format": [expr, format]}`` — Spark's ``date_format`` of a UTC
  timestamp, for the patterns strftime writes alike (``format`` is
  strftime's: ``yyyy-MM-dd`` is ``%Y-%m-%d``);
- ``{"when": [predicate, expr]}`` — ``expr`` where the predicate is true,
  else null (an outer join's window column: null where its side is absent);
- ``{"to_json": [[field, expr], ...]}`` — Spark's ``to_json(struct(...))``
  of integer, double, boolean, string, timestamp (UTC) and struct fields (a
  Kafka sink's ``value``; with a double, ``{"to_json": {"fields": [...],
  "java": 21}}``: the digits of that Java's ``Double.toString``, which
  gpuwm writes exactly from Java 19 on), and ``{"cast": [expr, "string"]}`` of an integer or a
  timestamp (a Kafka sink's ``key``): Spark's text.

- ``{"arith": [op, a, b, ansi]}`` (``+``, ``-``, ``*``, ``/``, ``%``) and
  ``{"neg": [a, ansi]}`` — Spark's arithmetic of two columns of one
  integer or floating type (the analyzer casts them alike; ``/`` is of
  doubles): null in, null out; a zero divisor gives null, or with ``ansi``
  (Spark's ``evalMode`` ANSI, the default since Spark 4) fails as Spark
  fails, ``[DIVIDE_BY_ZERO]``; an integer that overflows wraps, or with
  ``ansi`` fails, ``[ARITHMETIC_OVERFLOW]``; ``%`` is Java's (the
  dividend's sign). ``+``, ``-``, ``*`` and negation of decimals too, of
  two decimal types whose exact result Spark's type is (at most 38
  digits, so none overflows; translate checks): Arrow's decimal arithmetic.

A step may also be ``{"where": expr}``: the rows for which ``expr`` is true
(Spark's ``filter``/``HAVING``: null drops the row), every column kept.

``from_json``: the messages go through ``pyarrow.json`` in one call; only
those it rejects are parsed one by one, by :func:`spark_json`, which follows
Spark's ``JacksonParser`` with its default options (single quotes and
``NaN``/``Infinity`` allowed; leading zeros, control characters, comments
and trailing commas not; text after the first value ignored): a value that
is not JSON gives a struct of nulls, a field that does not convert a null
field (the others kept), an empty or blank message a null struct. A field
whose value is malformed inside (``{"s": {"a": 1,}, "k": 1}``) is read on
as Jackson reads on after the error, from where the error left it: ``s``
null and ``k`` 1 there, every field null elsewhere (:class:`_Jackson`).
Each message not parsed whole is counted (``malformed``).
"""

from __future__ import annotations

import math
import re
import struct
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

JSON_TYPES = {"bigint": pa.int64(), "int": pa.int32(), "smallint": pa.int16(), "tinyint": pa.int8(),
              "double": pa.float64(), "boolean": pa.bool_(), "string": pa.string()}
_INT_RANGE = {"bigint": 63, "int": 31, "smallint": 15, "tinyint": 7}
_TS_UNIT = {"seconds": 1_000_000, "millis": 1_000, "micros": 1}


def json_struct(fields: list) -> pa.StructType:
    return pa.struct([pa.field(n, JSON_TYPES[t]) for n, t in fields])


def evaluate(steps: list, table: pa.Table, counts: dict | None = None) -> pa.Table:
    """Apply the projection's steps to ``table``; ``counts["malformed"]``
    gets the messages ``from_json`` did not parse whole."""
    for step in steps:
        if isinstance(step, dict):  # {"where": predicate}; counts["filtered"]: the rows it drops
            n = table.num_rows
            table = table.filter(_eval(step["where"], table, counts)) if n else table
            if counts is not None and table.num_rows < n:
                counts["filtered"] = counts.get("filtered", 0) + n - table.num_rows
            continue
        cols = [_eval(e, table, counts) for _, e in step]
        table = pa.table(cols, names=[n for n, _ in step]) if cols else table.select([])
    return table


def inputs_of(steps: list) -> set[str]:
    """The input columns the projection reads: its filters' before its
    first select, and that select's."""
    out: set[str] = set()

    def walk(e: Any) -> None:
        if isinstance(e, dict):
            (op, arg), = e.items()
            if op == "col":
                out.add(arg)
            else:
                walk(arg)
        elif isinstance(e, list):
            for x in e:
                walk(x)

    for step in steps:
        if not isinstance(step, dict):
            for _, e in step:
                walk(e)
            return out
        walk(step["where"])
    raise ValueError("a projection of filters alone reads every input column")


def _eval(e: dict, t: pa.Table, counts: dict | None) -> pa.Array:
    (op, arg), = e.items()
    if op == "col":
        return t.column(arg).combine_chunks()
    if op == "field":
        return pc.struct_field(_eval(arg[0], t, counts), [arg[1]])
    if op == "cast":
        return _cast(_eval(arg[0], t, counts), arg[1])
    if op == "ts":
        return _timestamp(_eval(arg[0], t, counts), arg[1])
    if op == "struct":
        return pa.StructArray.from_arrays([_eval(x, t, counts) for _, x in arg], [n for n, _ in arg])
    if op == "array":  # array(a, b, ...): row i is [a[i], b[i], ...]
        items = [_eval(x, t, counts) for x in arg]
        n, k = t.num_rows, len(items)
        values = pa.concat_arrays(items).take(pa.array(np.arange(n * k).reshape(k, n).T.ravel()))
        return pa.ListArray.from_arrays(pa.array(np.arange(n + 1) * k, pa.int32()), values)
    if op == "from_json":
        got, bad = from_json(_eval(arg[0], t, counts), arg[1])
        if counts is not None:
            counts["malformed"] = counts.get("malformed", 0) + bad
        return got
    if op == "lit":
        typ = literal_type(arg[1])
        v = Decimal(arg[0]) if pa.types.is_decimal(typ) and arg[0] is not None else arg[0]
        return pa.repeat(pa.scalar(v, typ), t.num_rows)
    if op == "cmp":
        return compare(arg[0], _eval(arg[1], t, counts), _eval(arg[2], t, counts))
    if op in ("and", "or"):
        f = pc.and_kleene if op == "and" else pc.or_kleene
        return f(_eval(arg[0], t, counts), _eval(arg[1], t, counts))
    if op == "not":
        return pc.invert(_eval(arg, t, counts))
    if op in ("is_null", "is_not_null"):
        a = _eval(arg, t, counts)
        return pc.is_null(a) if op == "is_null" else pc.is_valid(a)
    if op == "to_json":  # [[field, expr], ...], or {"fields": [...], "java": the JVM's version} (doubles' digits)
        fields, java = (arg["fields"], arg["java"]) if isinstance(arg, dict) else (arg, 17)
        return to_json([(n, _eval(x, t, counts)) for n, x in fields], t.num_rows, java)
    if op == "tumble":  # window(ts, size)'s struct<start, end> of a UTC timestamp: start = ts - ts mod size
        ts = _eval(arg[0], t, counts)
        us = ts.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
        start = us - np.mod(us, arg[1])
        mask = None if ts.null_count == 0 else ts.is_null()
        cols = [pa.array(v, pa.timestamp("us", tz="UTC")) for v in (start, start + arg[1])]
        return pa.StructArray.from_arrays(cols, ["start", "end"], mask=mask)
    if op == "date_format":  # a UTC timestamp's text in a strftime pattern (translate checked it is Spark's)
        whole = pc.floor_temporal(_eval(arg[0], t, counts), unit="second").cast(pa.timestamp("s", tz="UTC"))
        return pc.strftime(whole, format=arg[1], locale="C")  # (arrow's %S of a finer unit has a fraction)
    if op == "arith":
        return arith(arg[0], _eval(arg[1], t, counts), _eval(arg[2], t, counts), arg[3])
    if op == "neg":  # (0 - a of integers, as Spark's ANSI check; not of doubles: -(0.0) is -0.0)
        a = _eval(arg[0], t, counts)
        if pa.types.is_integer(a.type):
            return arith("-", pa.array(np.zeros(len(a), a.type.to_pandas_dtype())), a, arg[1])
        return pc.negate(a)
    if op == "when":
        v = _eval(arg[1], t, counts)
        return pc.if_else(pc.fill_null(_eval(arg[0], t, counts), False), v, pa.scalar(None, v.type))
    raise ValueError(f"unknown projection op {op!r}")


#: the types a ``lit`` may have (Spark's names; and ``decimal(p,s)``, :func:`literal_type`)
LITERAL_TYPES = {**JSON_TYPES, "float": pa.float32(), "timestamp": pa.timestamp("us", tz="UTC")}
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")


def decimal_type(typ: str) -> tuple[int, int] | None:
    """Spark's ``decimal(p,s)`` type name as (precision, scale); None for another type.

    >>> decimal_type("decimal(24,3)"), decimal_type("bigint")
    ((24, 3), None)
    """
    m = _DECIMAL.fullmatch(typ)
    return (int(m.group(1)), int(m.group(2))) if m else None


def literal_type(typ: str) -> pa.DataType:
    """The Arrow type of a ``lit`` or ``cast`` to Spark's type ``typ``."""
    dec = decimal_type(typ)
    return pa.decimal128(*dec) if dec else LITERAL_TYPES[typ]
_CMP = {"=": pc.equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}


def compare(op: str, a: pa.Array, b: pa.Array) -> pa.Array:
    """Spark's comparison ``a op b``: null if either is null; for floating
    point, Spark's total order, where NaN equals NaN and is above every
    other value (IEEE's NaN compares false with everything).

    >>> nan = float("nan")
    >>> compare(">", pa.array([nan, 1.0, nan, None]), pa.array([5.0, nan, nan, 1.0])).to_pylist()
    [True, False, False, None]
    >>> compare("=", pa.array([nan, 0.0]), pa.array([nan, -0.0])).to_pylist()
    [True, True]
    """
    if op in (">", ">="):
        return compare("<" if op == ">" else "<=", b, a)
    got = _CMP[op](a, b)
    if not pa.types.is_floating(a.type):
        return got
    na, nb = pc.is_nan(a), pc.is_nan(b)
    if op == "=":
        return pc.or_kleene(got, pc.and_kleene(na, nb))
    below = pc.and_kleene(pc.invert(na), nb)  # a number is below NaN
    if op == "<":
        return pc.or_kleene(got, below)
    return pc.or_kleene(pc.or_kleene(got, below), pc.and_kleene(na, nb))  # <=


class SparkArithmeticError(ArithmeticError):
    """What Spark's ANSI arithmetic fails with, by its error class."""


_ARITH = {"+": pc.add, "-": pc.subtract, "*": pc.multiply}
_ARITH_CHECKED = {"+": pc.add_checked, "-": pc.subtract_checked, "*": pc.multiply_checked}


def arith(op: str, a: pa.Array, b: pa.Array, ansi: bool) -> pa.Array:
    """Spark's ``a op b`` of two arrays of one numeric type.

    >>> arith("%", pa.array([-7, 7, None, 5]), pa.array([2, -2, 1, 0]), False).to_pylist()
    [-1, 1, None, None]
    >>> arith("+", pa.array([2**63 - 1]), pa.array([1]), False).to_pylist()
    [-9223372036854775808]
    >>> arith("/", pa.array([1.0]), pa.array([-0.0]), True)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    gpuwm.project.SparkArithmeticError: [DIVIDE_BY_ZERO] Division by zero in (1.0 / -0.0): ...
    """
    if op in _ARITH:
        if ansi and pa.types.is_integer(a.type):
            try:
                return _ARITH_CHECKED[op](a, b)
            except pa.ArrowInvalid:
                raise SparkArithmeticError(f"[ARITHMETIC_OVERFLOW] {a.type} overflow in a {op}: Spark fails the "
                                           "query so (ANSI mode); try_add/try_multiply give null, or "
                                           "spark.sql.ansi.enabled=false wraps") from None
        return _ARITH[op](a, b)
    zero = pc.fill_null(pc.equal(b, pa.scalar(0, b.type)), False)
    if ansi and pc.any(pc.and_(zero, pc.is_valid(a))).as_py():
        i = pc.index(pc.and_(zero, pc.is_valid(a)), True).as_py()
        what = "[DIVIDE_BY_ZERO] Division" if op == "/" else "[REMAINDER_BY_ZERO] Remainder"
        raise SparkArithmeticError(f"{what} by zero in ({a[i]} {op} {b[i]}): Spark fails the query so (ANSI "
                                   "mode); try_divide / try_mod give null, or spark.sql.ansi.enabled=false")
    valid = pc.and_(pc.and_(pc.is_valid(a), pc.is_valid(b)), pc.invert(zero)).to_numpy(zero_copy_only=False)
    dtype = a.type.to_pandas_dtype()
    x = np.where(valid, a.fill_null(0).to_numpy(zero_copy_only=False), 0).astype(dtype)
    y = np.where(valid, b.fill_null(1).to_numpy(zero_copy_only=False), 1).astype(dtype)
    if op == "/":  # (doubles: the analyzer casts an integer / to them)
        with np.errstate(all="ignore"):
            out = x / y
    else:  # Java's remainder: the dividend's sign (C's fmod); x % -1 is 0, without MIN % -1's trap
        if pa.types.is_integer(a.type):
            y = np.where(y == -1, 1, y).astype(dtype)
        with np.errstate(all="ignore"):
            out = np.fmod(x, y)
    return pa.array(out, a.type, mask=~valid)


def _timestamp(a: pa.Array, unit: str) -> pa.Array:
    """Integers counting ``unit`` (seconds, millis, micros) since the epoch as
    Spark's timestamps (microseconds; overflow an error, as Spark's)."""
    x = a.cast(pa.int64())
    return (x if unit == "micros" else pc.multiply_checked(x, _TS_UNIT[unit])).cast(pa.timestamp("us", tz="UTC"))


def _cast(a: pa.Array, to: str) -> pa.Array:
    """The casts :func:`gpuwm.spark.driver.kafka.translate` lets through."""
    if to == "string":
        if pa.types.is_binary(a.type):  # Spark's cast keeps the bytes, valid UTF-8 or not
            return a.view(pa.string())
        if pa.types.is_timestamp(a.type):  # Spark's text of a timestamp (in UTC: the translation checked)
            return _timestamp_text(a, " ", "")
        return a.cast(pa.string())  # integers: their decimal digits; strings as they are
    if to == "timestamp":  # from an integer: seconds
        return _timestamp(a, "seconds")
    if to == "binary":  # from a string: its UTF-8 bytes
        return a.cast(pa.binary())
    if to == "bigint" and pa.types.is_timestamp(a.type):  # seconds since the epoch, floored (Spark's floorDiv)
        us = a.cast(pa.timestamp("us", tz=a.type.tz)).cast(pa.int64())
        secs = np.floor_divide(us.fill_null(0).to_numpy(zero_copy_only=False), 1_000_000)
        return pa.array(secs, pa.int64(), mask=us.is_null().to_numpy(zero_copy_only=False))
    if to == "double" and pa.types.is_integer(a.type):  # rounded to the nearest double, as Java's (l2d)
        return a.cast(pa.float64(), safe=False)
    if decimal_type(to):  # an integer or a decimal to a decimal that holds every value of it (translate checked)
        return a.cast(literal_type(to))
    return a.cast(JSON_TYPES[to])


def _timestamp_text(a: pa.Array, sep: str, zone: str, millis: bool = False) -> pa.Array:
    """UTC timestamps as Spark writes them: ``yyyy-MM-dd<sep>HH:mm:ss``, then
    the fraction — three digits always with ``millis`` (to_json's
    ``.SSS``), else as many of six as it needs, none for a whole second (a
    cast to string) — then ``zone``."""
    us = a.cast(pa.int64())
    whole = pc.floor_temporal(a, unit="second").cast(pa.timestamp("s", tz="UTC"))
    secs = pc.strftime(whole, format=f"%Y-%m-%d{sep}%H:%M:%S", locale="C")
    frac = pc.subtract(us, pc.multiply(pc.divide(us, 1_000_000), 1_000_000))  # -> [0, 1e6) for t >= 0
    frac = pc.if_else(pc.less(frac, 0), pc.add(frac, 1_000_000), frac)
    if millis:
        digits = pc.utf8_slice_codeunits(pc.utf8_lpad(pc.cast(pc.add(pc.divide(frac, 1000), 1000), pa.string()), 4),
                                         1, 4)
        tail = pc.binary_join_element_wise(".", digits, "")
    else:
        six = pc.utf8_slice_codeunits(pc.cast(pc.add(frac, 1_000_000), pa.string()), 1, 7)
        trimmed = pc.utf8_rtrim(six, characters="0")
        tail = pc.if_else(pc.equal(frac, 0), "", pc.binary_join_element_wise(".", trimmed, ""))
    return pc.binary_join_element_wise(secs, tail, zone, "")


def _json_escape(a: pa.Array) -> pa.Array:
    """Strings as Jackson writes them, quoted: ``\\``, ``"`` and control
    characters escaped (``\\n``, ``\\t``, ``\\r``, ``\\b``, ``\\f``, else
    ``\\u00XX``), everything else as it is."""
    import json

    out = pc.replace_substring(pc.replace_substring(a, "\\", "\\\\"), '"', '\\"')
    ctl = pc.fill_null(pc.match_substring_regex(a, "[\\x00-\\x1f]"), False)
    if pc.any(ctl).as_py():  # rare: those strings one by one, as json.dumps escapes them (as Jackson does)
        idx = np.flatnonzero(ctl.to_numpy(zero_copy_only=False))
        fixed = [json.dumps(v, ensure_ascii=False)[1:-1] for v in a.take(pa.array(idx)).to_pylist()]
        out = pc.replace_with_mask(out, ctl, pa.array(fixed, pa.string()))
    return pc.binary_join_element_wise('"', out, '"', "")


def _json_value(a: pa.Array, java: int = 17) -> pa.Array:
    """Each value's JSON text as Spark's ``to_json`` writes it (null: null);
    a double as ``Double.toString`` of Java ``java`` gives it."""
    t = a.type
    if pa.types.is_integer(t):
        return a.cast(pa.string())
    if pa.types.is_float64(t):  # each distinct value once
        enc = pc.dictionary_encode(a)
        words = pa.array([_java_double(x, java) for x in enc.dictionary.to_pylist()], pa.string())
        return words.take(enc.indices)
    if pa.types.is_boolean(t):
        return pc.if_else(a, "true", "false")
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _json_escape(a)
    if pa.types.is_timestamp(t):  # Spark's default timestampFormat, yyyy-MM-dd'T'HH:mm:ss.SSSXXX, in UTC
        return pc.binary_join_element_wise('"', _timestamp_text(a, "T", "Z", millis=True), '"', "")
    if pa.types.is_struct(t):
        inner = to_json([(t.field(i).name, pc.struct_field(a, [i])) for i in range(t.num_fields)], len(a), java)
        return pc.if_else(pc.is_valid(a), inner, pa.scalar(None, pa.string()))
    raise ValueError(f"to_json of {t}: not one of the types gpuwm writes")


def to_json(fields: list[tuple[str, pa.Array]], n: int, java: int = 17) -> pa.Array:
    """Spark's ``to_json(struct(...))`` of the columns, row by row: a JSON
    object of the fields in order, a null field left out (Spark's
    ``ignoreNullFields``), no spaces; doubles as Java ``java`` writes them."""
    import json

    pieces = []
    for name, col in fields:  # ',"name":value', or "" where the field is null
        key = "," + json.dumps(name, ensure_ascii=False) + ":"
        pieces.append(pc.fill_null(pc.binary_join_element_wise(key, _json_value(col, java), ""), ""))
    if not pieces:
        return pa.array(["{}"] * n, pa.string())
    body = pieces[0] if len(pieces) == 1 else pc.binary_join_element_wise(*pieces, "")
    return pc.binary_join_element_wise("{", pc.utf8_slice_codeunits(body, 1), "}", "")  # the first comma off


def from_json(values: pa.Array, fields: list) -> tuple[pa.Array, int]:
    """Spark's ``from_json(values, struct)`` (PERMISSIVE), and how many
    messages did not parse whole."""
    import pyarrow.json as pj

    typ = json_struct(fields)
    n = len(values)
    if n == 0:
        return pa.array([], typ), 0
    raw = values.view(pa.binary()) if pa.types.is_string(values.type) else values
    # pyarrow.json: one object per line; a line it would skip (blank) or misread (not an
    # object: its root must be one) goes the slow way
    # (and a non-finite number goes the slow way too: pyarrow reads `Inf`, which Jackson refuses)
    fast = pc.and_(pc.starts_with(raw, "{"), pc.ends_with(raw, "}")).fill_null(False).to_numpy(zero_copy_only=False)
    fast[_holding(raw, (b"\n", b"\r", b"Inf", b"NaN"))] = False
    idx = np.flatnonzero(fast)
    opts = pj.ParseOptions(explicit_schema=pa.schema(list(typ)), unexpected_field_behavior="ignore")
    parsed: list[tuple[np.ndarray, pa.Table]] = []
    slow = list(np.flatnonzero(~fast))

    def parse(ix: np.ndarray) -> None:  # the rows pyarrow takes, in one call or by halves
        if not len(ix):
            return
        try:
            got = pj.read_json(pa.BufferReader(_lines(raw if len(ix) == n else raw.take(pa.array(ix)))),
                               parse_options=opts)
        except (pa.ArrowInvalid, UnicodeDecodeError):
            got = None
        if got is not None and got.num_rows == len(ix):
            parsed.append((ix, got))
        elif len(ix) == 1:
            slow.append(int(ix[0]))
        else:
            parse(ix[: len(ix) // 2])
            parse(ix[len(ix) // 2:])

    parse(idx)
    bad = 0
    pieces, order = [], []
    for ix, got in parsed:
        pieces.append(pa.StructArray.from_arrays([got.column(f.name).combine_chunks().cast(f.type) for f in typ],
                                                 fields=list(typ)))
        order.append(ix)
    if slow:
        slow_ix = np.asarray(sorted(slow), np.int64)
        rows = []
        for v in raw.take(pa.array(slow_ix)).to_pylist():
            row, ok = spark_json(v, fields)
            bad += (v is not None) and not ok
            rows.append(row)
        pieces.append(pa.array(rows, typ))
        order.append(slow_ix)
    allrows = pa.concat_arrays(pieces) if len(pieces) > 1 else pieces[0]
    at = np.concatenate(order)
    if len(at) == n and (at[1:] > at[:-1]).all():
        return allrows, bad
    inv = np.empty(n, np.int64)
    inv[at] = np.arange(n)
    return allrows.take(pa.array(inv)), bad


def _offsets(values: pa.Array) -> np.ndarray:
    """A binary or string array's value offsets (32- or 64-bit), as NumPy, without a copy."""
    wide = pa.types.is_large_binary(values.type) or pa.types.is_large_string(values.type)
    return np.frombuffer(values.buffers()[1], np.int64 if wide else np.int32, len(values) + 1,
                         values.offset * (8 if wide else 4))


def _holding(values: pa.Array, needles: tuple[bytes, ...]) -> np.ndarray:
    """The rows of a binary array whose bytes hold any of ``needles``: each
    found by a byte search over the whole data buffer (a loop over the
    matches, usually none), not a regex per row."""
    offsets = _offsets(values)
    lo, hi = int(offsets[0]), int(offsets[-1])
    buf = values.buffers()[2]
    data = b"" if buf is None else memoryview(buf)[lo:hi].tobytes()
    hits = []
    for needle in needles:
        if len(needle) > 1 and data.find(needle[:1]) < 0:  # (a one-byte search runs at memchr's speed)
            continue
        i = data.find(needle)
        while i >= 0:
            hits.append(i)
            i = data.find(needle, i + 1)
    if not hits:
        return np.zeros(0, np.int64)
    # (a match across two rows' bytes names the first: a row sent the slow, exact way for nothing)
    return np.unique(np.searchsorted(offsets, np.asarray(hits, np.int64) + lo, side="right") - 1)


def _lines(values: pa.Array) -> pa.Buffer:
    """The values, each followed by a newline, as one buffer (no Python per value)."""
    joined = pc.binary_join_element_wise(values, pa.scalar(b"", values.type), pa.scalar(b"\n", values.type))
    offsets = _offsets(joined)
    return joined.buffers()[2][offsets[0]:offsets[-1]]


# -- one message, as Spark's JacksonParser reads it ------------------------------------
class _Bad(Exception):
    """The message is not JSON (Jackson's ``JsonProcessingException``)."""


_WS = b" \t\n\r"
_ESCAPES = {0x22: b'"', 0x5C: b"\\", 0x2F: b"/", 0x62: b"\b", 0x66: b"\f", 0x6E: b"\n", 0x72: b"\r", 0x74: b"\t"}
_NUMBER_WORDS = {b"NaN": math.nan, b"Infinity": math.inf, b"+Infinity": math.inf, b"-Infinity": -math.inf}


def spark_json(v: bytes | None, fields: list) -> tuple[dict | None, bool]:
    """One message through Spark's ``from_json`` (PERMISSIVE, default
    options): (the struct as a dict or None, whether it parsed whole)."""
    if v is None:
        return None, True
    p = _Jackson(v)
    try:
        tok = p.next_token()
        if tok is None:  # empty or blank: no row, a null struct
            return None, False
        if tok != "{":  # a root that is not an object: every field null
            raise _Bad()
        return p.record(dict(fields))
    except (_Bad, IndexError, ValueError, UnicodeDecodeError):
        return {n: None for n, _ in fields}, False


class _Jackson:
    """Jackson's streaming parser as Spark's ``JacksonParser`` drives it,
    down to how it goes on after an error inside a field: a token that
    fails is consumed but does not become the current one, and the parsing
    context stays where it was (its entry count advanced) — so Spark's loop
    over the root object's fields goes on from there, in whatever context
    that is (``{"s": {"a": 1,}, "k": 1}`` as a ``s string, k bigint``:
    ``s`` null, ``k`` 1 — the trailing comma's ``}`` was consumed, ``, "k":
    1`` read as the inner object's). Contexts are ``[kind, index, name]``;
    tokens ``{ } [ ]``, ``("name", text)`` and the scalars of
    :class:`_Parser`; a field name's value is read with it (Jackson's
    ``_nextToken``; after a field name whose colon or value failed, the next
    token is none, the end), a string's text is read when asked for (a bad
    one poisons the rest)."""

    def __init__(self, b: bytes):
        self.lex = _Parser(b)
        self.ctx: list[list] = [["root", -1, None]]
        self.cur: Any = None
        self._pending: Any = None  # the value read with a field name
        self._poisoned = False  # a string whose text Jackson cannot read: the next token fails

    def next_token(self) -> Any:
        if isinstance(self.cur, tuple) and self.cur[0] == "name":  # after a field name: its value — none where
            t, self._pending = self._pending, None  # it failed to read, which ends Spark's loop over the fields
            return self._set(t)
        if self._poisoned:
            raise _Bad()
        lex = self.lex
        lex._skip_ws()
        b, i = lex.b, lex.i
        top = self.ctx[-1]
        if i >= len(b):  # the end: fine at the root only
            if top[0] != "root":
                raise _Bad()
            self.cur = None
            return None
        c = b[i:i + 1]
        if c in (b"}", b"]"):  # a closing mark closes the scope (a mismatch is an error)
            lex.i = i + 1
            if top[0] != ("object" if c == b"}" else "array"):
                raise _Bad()
            self.ctx.pop()
            return self._set(c.decode())
        top[1] += 1
        if top[0] != "root" and top[1] > 0:  # a comma, then the next mark
            lex.i = i + 1
            if c != b",":
                raise _Bad()
            lex._skip_ws()
            if lex.i >= len(b):
                raise _Bad()
            c = b[lex.i:lex.i + 1]
        if top[0] == "object":  # a field name (quoted), its colon, its value
            if c not in (b'"', b"'"):
                lex.i += 1
                raise _Bad()
            top[2] = lex._string(c)
            self.cur = ("name", top[2])
            lex._skip_ws()
            if lex.b[lex.i:lex.i + 1] != b":":
                lex.i += 1
                raise _Bad()
            lex.i += 1
            self._pending = self._value()
            return self.cur
        return self._set(self._value())

    def _value(self) -> Any:
        """The value token at the lexer's position (not yet the current one)."""
        lex = self.lex
        lex._skip_ws()
        c = lex.b[lex.i:lex.i + 1]
        if c in (b"}", b"]", b",", b":", b""):
            lex.i += 1
            raise _Bad()  # expected a value
        if c in (b'"', b"'"):
            at = lex.i
            try:
                return ("s", lex._string(c))
            except (_Bad, IndexError, ValueError, UnicodeDecodeError):
                lex.i = at
                return ("s!", None)
        if c in (b"{", b"["):
            lex.i += 1
            return c.decode()
        return lex.token()

    def _set(self, t: Any) -> Any:
        if t in ("{", "["):
            self.ctx.append(["object" if t == "{" else "array", -1, None])
        self.cur = t
        if isinstance(t, tuple) and t[0] == "s!":
            self._poisoned = True
        return t

    def text(self, t: Any) -> str:
        """A string token's text (Jackson reads it now)."""
        if t[0] == "s!":
            raise _Bad()
        return t[1]

    def current_name(self) -> str | None:
        """Jackson's ``getCurrentName``: a start mark's is its parent's."""
        at = -2 if self.cur in ("{", "[") and len(self.ctx) > 1 else -1
        return self.ctx[at][2]

    def skip_children(self) -> None:
        """Past the structure the current token starts (nothing for a scalar)."""
        if self.cur not in ("{", "["):
            return
        depth = 1
        while depth:
            t = self.next_token()
            if t is None:
                raise _Bad()
            depth += 1 if t in ("{", "[") else -1 if t in ("}", "]") else 0

    def record(self, types: dict) -> tuple[dict, bool]:
        """The root object's fields, as Spark's ``convertObject`` reads them
        (the current token its ``{``): each field a converter may fail
        (that field null, the rest kept, the record partial); an error
        between fields fails the record."""
        row: dict = {n: None for n in types}
        ok = True
        while True:
            t = self.next_token()
            if t is None or t == "}":
                return row, ok
            name = self.current_name()
            if name in types:
                try:
                    row[name] = self._convert(types[name])
                except (_Field, _Bad, IndexError, ValueError, UnicodeDecodeError):
                    ok = False  # the field keeps what an earlier duplicate of it gave
                    self.skip_children()
            else:
                self.skip_children()

    def _convert(self, typ: str) -> Any:
        tok = self.cur
        if isinstance(tok, tuple) and tok[0] == "name":  # the field's value
            tok = self.next_token()
        if tok is None or tok == ("z", None):
            return None
        kind = tok[0] if isinstance(tok, tuple) else tok
        if typ in _INT_RANGE:
            if kind != "n" or not _is_int(tok[1]):
                raise _Field()
            x = int(tok[1])
            top = 256 if typ == "tinyint" else 1 << _INT_RANGE[typ]  # Jackson's getByteValue takes 128..255, wrapped
            if not -(1 << _INT_RANGE[typ]) <= x < top:
                raise _Field()
            return x - 256 if x > 127 and typ == "tinyint" else x
        if typ == "double":
            if kind == "n":
                return _NUMBER_WORDS.get(tok[1].encode(), None) if tok[1][-1:].isalpha() else float(tok[1])
            if kind in ("s", "s!"):
                text = self.text(tok)
                if text in ("NaN", "+INF", "+Infinity", "Infinity", "-INF", "-Infinity"):
                    return {"NaN": math.nan, "-INF": -math.inf, "-Infinity": -math.inf}.get(text, math.inf)
            raise _Field()
        if typ == "boolean":
            if kind in ("t", "f"):
                return kind == "t"
            raise _Field()
        if typ == "string":
            if kind in ("s", "s!"):
                return self.text(tok)
            return self.copy()  # anything else: Jackson's copy of it (from_json reads through a Reader)
        raise _Field()

    def copy(self) -> str:
        """The value the current token starts as Jackson's generator writes
        it (``copyCurrentStructure``): compact, numbers as Java prints them."""
        tok = self.cur
        if tok in ("{", "["):
            close = "}" if tok == "{" else "]"
            out = []
            while True:
                t = self.next_token()
                if t == close:
                    return tok + ",".join(out) + close
                if t is None or t in ("}", "]"):
                    raise _Bad()
                if isinstance(t, tuple) and t[0] == "name":
                    name = _jackson_string(t[1])
                    self.next_token()
                    out.append(name + ":" + self.copy())
                else:
                    out.append(self.copy())
        if not isinstance(tok, tuple) or tok[0] == "name":
            raise _Bad()  # (a closing mark: the generator has nothing open)
        kind, text = tok
        if kind in ("s", "s!"):
            return _jackson_string(self.text(tok))
        if kind in ("t", "f", "z"):
            return {"t": "true", "f": "false", "z": "null"}[kind]
        if _is_int(text):
            return str(int(text))
        return _java_double(_NUMBER_WORDS[text.encode()] if text[-1:].isalpha() else float(text))


class _Parser:
    """A JSON tokenizer with Spark's Jackson features; tokens: ``{ } [ ] : ,``,
    ``("s", text)``, ``("n", text)``, ``("t"|"f"|"z", None)``."""

    def __init__(self, b: bytes):
        self.b, self.i = b, 0

    def _skip_ws(self) -> None:
        b, i = self.b, self.i
        while i < len(b) and b[i] in _WS:
            i += 1
        self.i = i

    def token(self) -> Any:
        self._skip_ws()
        b, i = self.b, self.i
        if i >= len(b):
            return None
        c = b[i:i + 1]
        if c in (b"{", b"}", b"[", b"]", b":", b","):
            self.i = i + 1
            return c.decode()
        if c in (b'"', b"'"):
            return ("s", self._string(c))
        for word, kind in ((b"true", "t"), (b"false", "f"), (b"null", "z")):
            if b.startswith(word, i):
                self.i = i + len(word)
                self._end_of_word()
                return (kind, None)
        for word in _NUMBER_WORDS:
            if b.startswith(word, i):
                self.i = i + len(word)
                self._end_of_word()
                return ("n", word.decode())
        return ("n", self._number())

    def _end_of_word(self) -> None:
        if self.i < len(self.b) and (chr(self.b[self.i]).isalnum() or self.b[self.i] in b"_"):
            raise _Bad()

    def _number(self) -> str:
        b, i = self.b, self.i
        j = i + (b[i:i + 1] == b"-")
        k = j
        while k < len(b) and 48 <= b[k] <= 57:
            k += 1
        if k == j or (b[j:j + 1] == b"0" and k - j > 1):  # no digits, or a leading zero
            raise _Bad()
        if b[k:k + 1] == b".":
            m = k + 1
            while m < len(b) and 48 <= b[m] <= 57:
                m += 1
            if m == k + 1:
                raise _Bad()
            k = m
        if b[k:k + 1] in (b"e", b"E"):
            m = k + 1 + (b[k + 1:k + 2] in (b"+", b"-"))
            s = m
            while m < len(b) and 48 <= b[m] <= 57:
                m += 1
            if m == s:
                raise _Bad()
            k = m
        self.i = k
        self._end_of_word()
        return b[i:k].decode()

    def _string(self, quote: bytes) -> str:
        b, i = self.b, self.i + 1
        out = bytearray()
        q = quote[0]
        while True:
            c = b[i]
            if c == q:
                self.i = i + 1
                return out.decode("utf-8")
            if c < 0x20:
                raise _Bad()  # an unquoted control character
            if c == 0x5C:  # backslash
                e = b[i + 1]
                if e in _ESCAPES:
                    out += _ESCAPES[e]
                    i += 2
                elif e == 0x75:  # \uXXXX, surrogate pairs joined
                    cp = int(b[i + 2:i + 6].decode("ascii"), 16)
                    i += 6
                    if 0xD800 <= cp < 0xDC00 and b[i:i + 2] == b"\\u":
                        lo = int(b[i + 2:i + 6].decode("ascii"), 16)
                        if 0xDC00 <= lo < 0xE000:
                            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)
                            i += 6
                    out += chr(cp).encode("utf-8", "surrogatepass")
                elif e == 0x27 and q == 0x27:  # \' inside a single-quoted string
                    out += b"'"
                    i += 2
                else:
                    raise _Bad()
                continue
            out.append(c)
            i += 1


class _Field(Exception):
    """A field whose value does not convert to its type: null, the record partial."""


def _jackson_string(text: str) -> str:
    out = []
    for ch in text:
        o = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif o < 0x20:
            out.append({8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r"}.get(o, f"\\u{o:04X}"))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _java_digits(x: float, java: int) -> tuple[str, int]:
    """The digits and scientific exponent of Java ``java``'s
    ``Double.toString`` of positive finite ``x``. From Java 19 on: the
    shortest that read back as ``x`` (Python's ``repr``'s); where those
    are one digit, the closest two that read back as ``x`` if closer
    (``4.9E-324``). Before: an integer below 2^63 as the exact value's
    digits, the low ``floor(log10(2^(e - 54)))`` of them rounded away (half
    up) when ``x`` has ``2^e`` as its highest bit and ``e > 55``
    (``1.61304845894623136E17`` where the shortest is
    ``1.6130484589462314E17``); any other value as :func:`_java18_digits`
    develops it (JDK-4511638: ``1e23`` as ``9.999999999999999E22``)."""
    e2 = math.frexp(x)[1] - 1  # x's highest bit: 2^e2
    if java < 19 and x.is_integer() and e2 < 63:
        value, drop = int(x), len(str(2 ** (e2 - 54))) - 1 if e2 - 54 > 1 else 0  # floor(log10(2^(e2 - 54)))
        if drop:
            value, residue = divmod(value, 10 ** drop)
            value += residue >= 10 ** drop // 2
        text = str(value)
        return text.rstrip("0"), len(text) - 1 + drop
    if java < 19:
        return _java18_digits(x)
    from decimal import ROUND_HALF_EVEN, Decimal

    short = Decimal(repr(x)).normalize()
    _, digs, exp = short.as_tuple()
    if len(digs) == 1:  # Java's at least two digits: the closest of those with two that read back as x
        exact = Decimal(x)
        two = exact.quantize(Decimal(1).scaleb(exact.adjusted() - 1), rounding=ROUND_HALF_EVEN)
        if float(two) == x and abs(two - exact) < abs(short - exact):
            _, digs, exp = two.normalize().as_tuple()
    digits = "".join(map(str, digs))
    return digits, len(digits) + exp - 1


#: bits of 5**i, as Java 8-18's digit loop sizes its integers (5**0: 0)
_BITS_OF_5 = [0] + [(5 ** i).bit_length() for i in range(1, 27)]


def _java18_digits(x: float) -> tuple[str, int]:
    """``Double.toString``'s digits of positive finite ``x`` that is not an
    integer below 2^63, as Java 8 to 18 develop them (Steele and White's
    free-format digit loop, as ``FloatingDecimal`` runs it): the decimal
    exponent estimated from the binary one (one too high is corrected by a
    leading zero), then digit after digit of ``x / 10^exp`` until the rest
    is below the margin ``m`` (half the gap to the next double; a quarter
    for a power of two, whose lower gap is the smaller) or above ``10 - m``;
    at least two digits in E-form (below 10^-3 or from 10^8); the last
    digit rounded up by the rest (ties to even). Java's arithmetic is
    kept: ``long`` where the operands fit (``int`` where they fit in 32
    bits, which a double's 53-bit margin leaves none), else big integers;
    ``long`` wraps where the margin outgrows it (then the loop stops) and
    tests ``b + m > 10s`` where the big integers test ``>=``. A digit
    rounded up may leave zeros at the end, written as they are. Checked
    equal to a Java 17 JVM's on ~110 k doubles in ``tests/test_project.py``
    (and ~1 M by hand)."""
    raw = struct.unpack("<q", struct.pack("<d", x))[0]
    bexp, fract = (raw >> 52) & 0x7FF, raw & ((1 << 52) - 1)
    if bexp == 0:  # subnormal: its bits moved up to the 2^52 place
        shift = 53 - fract.bit_length()
        fract, bexp, nsig = fract << shift, 1 - shift, fract.bit_length()
    else:
        fract, nsig = fract | 1 << 52, 53
    bexp -= 1023
    tail = (fract & -fract).bit_length() - 1
    nfract = 53 - tail  # the significant bits of the fraction
    ntiny = max(0, nfract - bexp - 1)  # its bits below 2^0
    mant = struct.unpack("<d", struct.pack("<q", (1023 << 52) | (fract & ((1 << 52) - 1))))[0]  # in [1, 2)
    dec = math.floor((mant - 1.5) * 0.289529654 + 0.176091259 + bexp * 0.301029995663981)
    # x / 10^dec as b / s, and the margin as m / s: each as powers of 2 and 5
    b5, s5 = max(0, -dec), max(0, dec)
    b2, s2 = b5 + ntiny + bexp, s5 + ntiny
    m2 = b2 - nsig
    b2 -= nfract - 1
    common = min(b2, s2)
    b2, s2, m2 = b2 - common, s2 - common, m2 - common - (nfract == 1)
    if m2 < 0:
        b2, s2, m2 = b2 - m2, s2 - m2, 0
    bbits = nfract + b2 + (_BITS_OF_5[b5] if b5 < len(_BITS_OF_5) else b5 * 3)
    tbits = s2 + 1 + (_BITS_OF_5[s5 + 1] if s5 + 1 < len(_BITS_OF_5) else (s5 + 1) * 3)
    width = 32 if bbits < 32 and tbits < 32 else 64 if bbits < 64 and tbits < 64 else 0  # 0: big integers

    def w(v: int) -> int:  # Java's int or long arithmetic
        if not width:
            return v
        v &= (1 << width) - 1
        return v - (1 << width) if v >> (width - 1) else v

    b, s, m = (fract >> tail) * 5 ** b5 << b2, 5 ** s5 << s2, 5 ** b5 << m2
    tens = 10 * s
    q, b = divmod(b, s)
    b, m = 10 * b, w(10 * m)
    low, high = b < m, (w(b + m) > tens) if width else b + m >= tens
    digits = []
    if q or high:
        digits.append(q)
    else:  # the estimate was one too high
        dec -= 1
    if dec < -3 or dec >= 8:
        low = high = False
    while not low and not high:
        q, b = divmod(b, s)
        b, m = 10 * b, w(10 * m)
        if width and m <= 0:  # the margin wrapped
            low = high = True
        else:
            low, high = b < m, (w(b + m) > tens) if width else b + m >= tens
        digits.append(q)
    rest = w(w(b << 1) - tens)  # twice the rest against one unit of the last digit
    if high and (not low or rest > 0 or rest == 0 and digits[-1] & 1):
        i = len(digits) - 1
        while digits[i] == 9 and i:
            digits[i], i = 0, i - 1
        if digits[i] == 9:  # 9...9 carried out: 1 and zeros, one place up
            digits[0], dec = 1, dec + 1
        else:
            digits[i] += 1
    return "".join(map(str, digits)), dec


def _java_double(x: float, java: int = 17) -> str:
    """Java ``java``'s ``Double.toString`` (:func:`_java_digits`; Jackson
    writes non-finite values quoted)."""
    if x != x:
        return '"NaN"'
    if math.isinf(x):
        return '"Infinity"' if x > 0 else '"-Infinity"'
    if x == 0:
        return "-0.0" if math.copysign(1, x) < 0 else "0.0"
    sign = "-" if x < 0 else ""
    digits, e = _java_digits(abs(x), java)  # e: the scientific exponent
    if -3 <= e < 7:
        if e >= 0:
            whole, frac = (digits + "0" * (e + 1))[:e + 1], digits[e + 1:]
        else:
            whole, frac = "0", "0" * (-e - 1) + digits
        return f"{sign}{whole}.{frac or '0'}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{e}"


def _is_int(text: str) -> bool:
    return text.lstrip("-").isdigit()
