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
plan, :func:`gpuwm.spark.catalyst.expressions.project_expr`), each node ``{op: arg}``
with ``op`` one of :data:`OPS` (which evaluates it):

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
  dividend's sign), its zero divisor under ``ansi`` the error class a
  fifth element names (the running Spark's; default
  ``REMAINDER_BY_ZERO``). ``+``, ``-``, ``*`` and negation of decimals too, of
  two decimal types whose exact result Spark's type is (at most 38
  digits, so none overflows; translate checks): Arrow's decimal arithmetic.

A step may also be ``{"where": expr}``: the rows for which ``expr`` is true
(Spark's ``filter``/``HAVING``: null drops the row), every column kept.

``from_json``'s reader, Spark's Jackson, is :mod:`gpuwm.sparkjson`; the
digits ``to_json`` writes a double with, Java's, :mod:`gpuwm.javatext`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .javatext import _java_double
from .sparkjson import JSON_TYPES, from_json

_TS_UNIT = {"seconds": 1_000_000, "millis": 1_000, "micros": 1}


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
            op, arg = _node(e)
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


def _node(e: dict) -> tuple[str, Any]:
    """An expression's op, one of :data:`OPS`, and its argument."""
    (op, arg), = e.items()
    if op not in OPS:
        raise ValueError(f"unknown projection op {op!r}")
    return op, arg


def _eval(e: dict, t: pa.Table, counts: dict | None) -> pa.Array:
    op, arg = _node(e)
    return OPS[op](arg, t, counts)


# -- the ops: each evaluates its argument over the table (counts: as evaluate's) -------
def _op_col(arg: Any, t: pa.Table, counts: dict | None) -> pa.Array:
    return t.column(arg).combine_chunks()


def _op_field(arg: Any, t: pa.Table, counts: dict | None) -> pa.Array:
    return pc.struct_field(_eval(arg[0], t, counts), [arg[1]])


def _op_cast(arg: Any, t: pa.Table, counts: dict | None) -> pa.Array:
    return _cast(_eval(arg[0], t, counts), arg[1])


def _op_ts(arg: Any, t: pa.Table, counts: dict | None) -> pa.Array:
    return _timestamp(_eval(arg[0], t, counts), arg[1])


def _op_struct(arg: Any, t: pa.Table, counts: dict | None) -> pa.Array:
    return pa.StructArray.from_arrays([_eval(x, t, counts) for _, x in arg], [n for n, _ in arg])


def _op_array(arg: Any, t: pa.Table, counts: dict | None) -> pa.Array:
    """array(a, b, ...): row i is [a[i], b[i], ...]."""
    items = [_eval(x, t, counts) for x in arg]
    n, k = t.num_rows, len(items)
    values = pa.concat_arrays(items).take(pa.array(np.arange(n * k).reshape(k, n).T.ravel()))
    return pa.ListArray.from_arrays(pa.array(np.arange(n + 1) * k, pa.int32()), values)


def _op_from_json(arg: Any, t: pa.Table, counts: dict | None) -> pa.Array:
    got, bad = from_json(_eval(arg[0], t, counts), arg[1])
    if counts is not None:
        counts["malformed"] = counts.get("malformed", 0) + bad
    return got


def _op_lit(arg: Any, t: pa.Table, counts: dict | None) -> pa.Array:
    typ = literal_type(arg[1])
    v = Decimal(arg[0]) if pa.types.is_decimal(typ) and arg[0] is not None else arg[0]
    return pa.repeat(pa.scalar(v, typ), t.num_rows)


def _op_cmp(arg: Any, t: pa.Table, counts: dict | None) -> pa.Array:
    return compare(arg[0], _eval(arg[1], t, counts), _eval(arg[2], t, counts))


def _op_binary(f: Callable[[pa.Array, pa.Array], pa.Array]) -> Callable[..., pa.Array]:
    """The op ``f(a, b)`` of ``[a, b]`` (``and``, ``or``: Kleene's)."""
    def op(arg: Any, t: pa.Table, counts: dict | None) -> pa.Array:
        return f(_eval(arg[0], t, counts), _eval(arg[1], t, counts))
    return op


def _op_unary(f: Callable[[pa.Array], pa.Array]) -> Callable[..., pa.Array]:
    """The op ``f(a)`` of ``a`` (``not``, ``is_null``, ``is_not_null``)."""
    def op(arg: Any, t: pa.Table, counts: dict | None) -> pa.Array:
        return f(_eval(arg, t, counts))
    return op


def _op_to_json(arg: Any, t: pa.Table, counts: dict | None) -> pa.Array:
    """[[field, expr], ...], or {"fields": [...], "java": the JVM's version} (doubles' digits)."""
    fields, java = (arg["fields"], arg["java"]) if isinstance(arg, dict) else (arg, 17)
    return to_json([(n, _eval(x, t, counts)) for n, x in fields], t.num_rows, java)


def _op_tumble(arg: Any, t: pa.Table, counts: dict | None) -> pa.Array:
    """window(ts, size)'s struct<start, end> of a UTC timestamp: start = ts - ts mod size."""
    ts = _eval(arg[0], t, counts)
    us = ts.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
    start = us - np.mod(us, arg[1])
    mask = None if ts.null_count == 0 else ts.is_null()
    cols = [pa.array(v, pa.timestamp("us", tz="UTC")) for v in (start, start + arg[1])]
    return pa.StructArray.from_arrays(cols, ["start", "end"], mask=mask)


def _op_date_format(arg: Any, t: pa.Table, counts: dict | None) -> pa.Array:
    """A UTC timestamp's text in a strftime pattern (translate checked it is Spark's)."""
    whole = pc.floor_temporal(_eval(arg[0], t, counts), unit="second").cast(pa.timestamp("s", tz="UTC"))
    return pc.strftime(whole, format=arg[1], locale="C")  # (arrow's %S of a finer unit has a fraction)


def _op_arith(arg: Any, t: pa.Table, counts: dict | None) -> pa.Array:
    return arith(arg[0], _eval(arg[1], t, counts), _eval(arg[2], t, counts), arg[3], *arg[4:])


def _op_neg(arg: Any, t: pa.Table, counts: dict | None) -> pa.Array:
    """0 - a of integers, as Spark's ANSI check; not of doubles: -(0.0) is -0.0."""
    a = _eval(arg[0], t, counts)
    if pa.types.is_integer(a.type):
        return arith("-", pa.array(np.zeros(len(a), a.type.to_pandas_dtype())), a, arg[1])
    return pc.negate(a)


def _op_when(arg: Any, t: pa.Table, counts: dict | None) -> pa.Array:
    v = _eval(arg[1], t, counts)
    return pc.if_else(pc.fill_null(_eval(arg[0], t, counts), False), v, pa.scalar(None, v.type))


#: the expression IR's ops (the module docstring's list), each to the function
#: that evaluates it: ``f(arg, table, counts)``, ``arg`` the op's JSON argument
OPS: dict[str, Callable[..., pa.Array]] = {
    "col": _op_col,
    "field": _op_field,
    "cast": _op_cast,
    "ts": _op_ts,
    "struct": _op_struct,
    "array": _op_array,
    "from_json": _op_from_json,
    "lit": _op_lit,
    "cmp": _op_cmp,
    "and": _op_binary(pc.and_kleene),
    "or": _op_binary(pc.or_kleene),
    "not": _op_unary(pc.invert),
    "is_null": _op_unary(pc.is_null),
    "is_not_null": _op_unary(pc.is_valid),
    "to_json": _op_to_json,
    "tumble": _op_tumble,
    "date_format": _op_date_format,
    "arith": _op_arith,
    "neg": _op_neg,
    "when": _op_when,
}


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


def arith(op: str, a: pa.Array, b: pa.Array, ansi: bool, remainder: str = "REMAINDER_BY_ZERO") -> pa.Array:
    """Spark's ``a op b`` of two arrays of one numeric type (``remainder``:
    the error class the running Spark names a ``%`` by zero under ANSI).

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
        what = "[DIVIDE_BY_ZERO] Division" if op == "/" else f"[{remainder}] Remainder"
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
    """The casts :func:`gpuwm.spark.catalyst.expressions.project_expr` lets through."""
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
