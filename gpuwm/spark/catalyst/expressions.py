"""Spark's Catalyst expressions as :mod:`gpuwm.project`'s expressions: the
one translator of the selects and filters a task evaluates on its source
(Kafka's ``from_json(CAST(value AS STRING), ...)``, a Parquet source's
columns), of a project stage between two operators, and of the sink's
output (:func:`project_expr`, :func:`projection_steps`). An expression it
does not translate raises :class:`Untranslatable`, and the query's reader
or operator stays Spark's."""

from __future__ import annotations

import re
from typing import Any

from ...project import JSON_TYPES, LITERAL_TYPES, decimal_type
from ..jvm.objects import scala_iter
from ..jvm.versions import remainder_by_zero
from .plans import expr_id, node_kind

#: the ops of :data:`gpuwm.project.OPS` :func:`project_expr` writes (tests/test_catalyst.py holds both sides to
#: it: an op written here that the evaluator lacks fails there)
EMITS = frozenset({"col", "field", "ts", "lit", "cast", "cmp", "and", "or", "arith", "neg", "not", "is_null",
                   "is_not_null", "when", "date_format", "to_json", "struct", "array", "from_json"})


class Untranslatable(Exception):
    """An expression :mod:`gpuwm.project` does not evaluate."""


_TS = {"MillisToTimestamp": "millis", "SecondsToTimestamp": "seconds", "MicrosToTimestamp": "micros"}


_CMP = {"EqualTo": "=", "LessThan": "<", "LessThanOrEqual": "<=", "GreaterThan": ">", "GreaterThanOrEqual": ">="}


_PATTERN = {"yyyy": "%Y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S"}


def strftime_format(pattern: str) -> str | None:
    """Spark's ``date_format`` pattern as strftime's, for the patterns whose
    text the two write alike (``yyyy-MM-dd``, ``HH:mm``; years 1000 to
    9999); None for any other.

    >>> strftime_format("yyyy-MM-dd HH:mm"), strftime_format("yyyy-MM-dd'T'HH"), strftime_format("MMM")
    ('%Y-%m-%d %H:%M', None, None)
    """
    out = ""
    for token in re.findall(r"(y+|M+|d+|H+|m+|s+|.)", pattern):
        if token in _PATTERN:
            out += _PATTERN[token]
        elif token in " -:/.":
            out += token
        else:
            return None
    return out


_ARITH = {"Add": "+", "Subtract": "-", "Multiply": "*", "Divide": "/", "Remainder": "%"}


_NUMERIC = ("bigint", "int", "smallint", "tinyint", "double", "float")


#: the digits of each integer type's largest value: a decimal(p,s) with p - s of them holds every value
_INT_DIGITS = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 20}


def _widening_decimal(src: str, to: str) -> bool:
    """A cast from ``src`` (an integer or a decimal) to decimal type ``to``
    that keeps every value exactly (Spark's casts before decimal arithmetic)."""
    dec, got = decimal_type(to), decimal_type(src)
    if dec is None:
        return False
    if got is not None:
        return dec[1] >= got[1] and dec[0] - dec[1] >= got[0] - got[1]
    return src in _INT_DIGITS and dec[0] - dec[1] >= _INT_DIGITS[src]


def _exact_decimal(kind: str, e) -> tuple[int, int] | None:
    """The type of decimal ``e`` (an Add, a Subtract or a Multiply of two
    decimals) that holds its exact result (Arrow's type for it), where it
    fits 38 digits; None otherwise (Spark then rounds: not gpuwm's)."""
    a, b = (decimal_type(str(x.dataType().simpleString())) for x in (e.left(), e.right()))
    if a is None or b is None or kind not in ("Add", "Subtract", "Multiply"):
        return None
    if kind == "Multiply":
        p, s = a[0] + b[0] + 1, a[1] + b[1]
    else:
        s = max(a[1], b[1])
        p = max(a[0] - a[1], b[0] - b[1]) + s + 1
    return (p, s) if p <= 38 else None


def project_expr(e, ids: dict[int, str]) -> dict:
    """A Catalyst expression as a :mod:`gpuwm.project` expression (ops: :data:`EMITS`), its columns named by
    ``ids`` (Spark's id -> name); :class:`Untranslatable` for one gpuwm does not evaluate."""
    kind = e.getClass().getSimpleName()
    if kind == "AttributeReference":
        got = ids.get(int(e.exprId().id()))
        if got is None:
            raise Untranslatable(str(e.sql()))
        return {"col": got}
    if kind == "AggregateExpression":  # an aggregation's result, where ``ids`` names its column (by resultId)
        got = ids.get(int(e.resultId().id()))
        if got is None:
            raise Untranslatable(str(e.sql()))
        return {"col": got}
    if kind == "GetStructField":
        return {"field": [project_expr(e.child(), ids), str(e.extractFieldName())]}
    if kind in _TS:
        return {"ts": [project_expr(e.child(), ids), _TS[kind]]}
    if kind == "Cast" and e.child().getClass().getSimpleName() == "Literal" and e.child().value() is not None \
            and str(e.child().dataType().simpleString()).startswith("decimal") \
            and str(e.dataType().simpleString()) == "double":  # SQL's 450.5 compared with a double
        return {"lit": [float(str(e.child().value().toString())), "double"]}  # correctly rounded, as Java's
    if kind == "Cast" and e.child().getClass().getSimpleName() == "Literal" and e.child().value() is None \
            and str(e.dataType().simpleString()) in LITERAL_TYPES:  # a typed NULL (`x IN (1, NULL)`)
        return {"lit": [None, str(e.dataType().simpleString())]}
    if kind == "Cast" and e.child().getClass().getSimpleName() == "Literal" and e.child().value() is not None \
            and str(e.child().dataType().simpleString()) in _INT_DIGITS and decimal_type(str(e.dataType().simpleString())):
        p, s = decimal_type(str(e.dataType().simpleString()))  # SQL's 450 compared with a decimal: where it fits
        if abs(int(str(e.child().value()))) >= 10 ** (p - s):
            raise Untranslatable(str(e.sql()))
        return {"lit": [str(e.child().value()), str(e.dataType().simpleString())]}
    if kind == "Cast":
        src, to = str(e.child().dataType().simpleString()), str(e.dataType().simpleString())
        ints = ("bigint", "int", "smallint", "tinyint")
        ok = (src == "binary" and to == "string") or (src == "string" and to == "binary") \
            or _widening_decimal(src, to) \
            or (src in ints and to in ("timestamp", "bigint", "double")) \
            or (src in ints and to == "int" and str(e.evalMode()) == "ANSI") or (src == "timestamp" and to == "bigint") \
            or (to == "string" and (src in ints or src == "string" or src == "timestamp" and _utc(e)))
        if not ok:
            raise Untranslatable(str(e.sql()))
        return {"cast": [project_expr(e.child(), ids), to]}
    if kind == "Literal":
        typ = str(e.dataType().simpleString())
        v = e.value()
        if decimal_type(typ):  # its text (Spark's Decimal.toString: plain digits)
            return {"lit": [None if v is None else str(v.toString()), typ]}
        if typ not in LITERAL_TYPES:
            raise Untranslatable(str(e.sql()))
        return {"lit": [None if v is None else str(v.toString()) if typ == "string" else v, typ]}
    if kind in _CMP:
        if any(str(x.dataType().simpleString()) not in LITERAL_TYPES and not decimal_type(
                str(x.dataType().simpleString())) for x in (e.left(), e.right())):
            raise Untranslatable(str(e.sql()))
        return {"cmp": [_CMP[kind], project_expr(e.left(), ids), project_expr(e.right(), ids)]}
    if kind in ("And", "Or"):
        return {kind.lower(): [project_expr(e.left(), ids), project_expr(e.right(), ids)]}
    if kind in _ARITH and decimal_type(str(e.dataType().simpleString())):
        if str(e.evalMode()) == "TRY" or _exact_decimal(kind, e) != decimal_type(str(e.dataType().simpleString())):
            raise Untranslatable(str(e.sql()))
        return {"arith": [_ARITH[kind], project_expr(e.left(), ids), project_expr(e.right(), ids), False]}
    if kind in _ARITH:  # both sides of the result's type (the analyzer's casts); TRY mode (try_add ...) is not
        typ = str(e.dataType().simpleString())
        if typ not in _NUMERIC or str(e.evalMode()) == "TRY" or any(
                str(x.dataType().simpleString()) != typ for x in (e.left(), e.right())):
            raise Untranslatable(str(e.sql()))
        ansi = str(e.evalMode()) == "ANSI"
        return {"arith": [_ARITH[kind], project_expr(e.left(), ids), project_expr(e.right(), ids), ansi,
                          *([remainder_by_zero()] if ansi and kind == "Remainder" else [])]}
    if kind == "UnaryMinus" and decimal_type(str(e.dataType().simpleString())):  # (exact: never overflows)
        return {"neg": [project_expr(e.child(), ids), False]}
    if kind == "UnaryMinus" and str(e.dataType().simpleString()) in _NUMERIC:
        return {"neg": [project_expr(e.child(), ids), bool(e.failOnError())]}
    if kind == "In":  # x IN (a, b, ...): x = a OR x = b ... (Kleene's OR gives SQL's nulls: none match, a null in)
        items = list(scala_iter(e.list()))
        if not items or any(str(x.dataType().simpleString()) not in LITERAL_TYPES for x in [e.value(), *items]):
            raise Untranslatable(str(e.sql()))
        value = project_expr(e.value(), ids)
        out = None
        for item in items:
            eq = {"cmp": ["=", value, project_expr(item, ids)]}
            out = eq if out is None else {"or": [out, eq]}
        return out
    if kind in ("Not", "IsNull", "IsNotNull"):
        return {{"Not": "not", "IsNull": "is_null", "IsNotNull": "is_not_null"}[kind]: project_expr(e.child(), ids)}
    if kind == "CaseWhen" and e.branches().size() == 1 and (
            not e.elseValue().isDefined() or e.elseValue().get().getClass().getSimpleName() == "Literal"
            and e.elseValue().get().value() is None):  # CASE WHEN p THEN x END (an aggregate's FILTER)
        branch = e.branches().head()
        return {"when": [project_expr(branch._1(), ids), project_expr(branch._2(), ids)]}
    if kind == "DateFormatClass" and _utc(e) and e.right().getClass().getSimpleName() == "Literal" \
            and str(e.left().dataType().simpleString()) == "timestamp" and e.right().value() is not None:
        fmt = strftime_format(str(e.right().value().toString()))
        if fmt is None:
            raise Untranslatable(f"{e.sql()} (patterns of yyyy, MM, dd, HH, mm, ss and ' -:/.')")
        return {"date_format": [project_expr(e.left(), ids), fmt]}
    if kind == "StructsToJson" and e.child().getClass().getSimpleName() == "CreateNamedStruct" \
            and not e.options().size() and _utc(e):
        names = [str(n.eval(None).toString()) for n in scala_iter(e.child().nameExprs())]
        values = list(scala_iter(e.child().valExprs()))
        types = [str(v.dataType().simpleString()) for v in values]
        if all(_json_writable(t) for t in types):
            fields = [[n, project_expr(v, ids)] for n, v in zip(names, values)]
            if "double" not in [x for t in types for x in _json_scalars(t)]:
                return {"to_json": fields}
            # its doubles' digits are those of the JVM Spark runs on (before Java 19 not always the shortest)
            return {"to_json": {"fields": fields, "java": _java_version()}}
        raise Untranslatable(f"{e.sql()} (fields of integer, double, boolean, string, timestamp and struct types)")
    if kind == "CreateNamedStruct":
        names = [str(n.eval(None).toString()) for n in scala_iter(e.nameExprs())]
        return {"struct": [[n, project_expr(v, ids)] for n, v in zip(names, scala_iter(e.valExprs()))]}
    if kind == "CreateArray" and e.children().size() and not bool(e.useStringTypeWhenEmpty()):
        return {"array": [project_expr(v, ids) for v in scala_iter(e.children())]}
    if kind == "JsonToStructs":
        fields = [[str(f.name()), str(f.dataType().simpleString())] for f in e.schema().fields()] \
            if str(e.schema().typeName()) == "struct" else None
        if fields is None or any(t not in JSON_TYPES for _, t in fields) or e.options().size():
            raise Untranslatable(f"{e.sql()} (fields of types {sorted(JSON_TYPES)}, no options)")
        return {"from_json": [project_expr(e.child(), ids), fields]}
    raise Untranslatable(str(e.sql()))


def _utc(e) -> bool:
    """A time-zone-aware expression evaluated in UTC (the session's time zone)."""
    tz = e.timeZoneId()
    return tz.isDefined() and str(tz.get()) in ("UTC", "Etc/UTC", "GMT", "Z", "+00:00")


_JSON_SCALARS = ("bigint", "int", "smallint", "tinyint", "double", "boolean", "string", "timestamp")


def _java_version() -> int:
    """The feature version of the JVM Spark runs on (17 when none is up):
    ``Double.toString``, which Spark's ``to_json`` writes doubles with,
    writes the shortest digits from Java 19 on, before not always
    (JDK-4511638): gpuwm writes either's."""
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    if jvm is None:
        return 17
    return int(str(jvm.java.lang.System.getProperty("java.specification.version")).split(".")[-1])


def _json_scalars(typ: str) -> list[str]:
    """The scalar types in Spark's ``simpleString`` of a type: itself, or a struct's fields' types."""
    if typ.startswith("struct<") and typ.endswith(">"):
        import re

        return re.findall(r"[^<,:]+:([a-z]+)", typ[7:-1])
    return [typ]


def _json_writable(typ: str) -> bool:
    """A type :func:`gpuwm.project.to_json` writes as Spark does:
    integers, doubles, booleans, strings, timestamps, structs of them."""
    return all(t in _JSON_SCALARS for t in _json_scalars(typ))


class DuplicateNames(ValueError):
    """A select that gives two of its columns one name."""

    def __init__(self, names: list[str]):
        super().__init__(f"a select gives two columns one name ({names})")
        self.names = names


def node_step(p, ids: dict[int, str], *, inner: bool = False) -> tuple[Any, dict[int, str]]:
    """A select or a filter ``p`` over columns Spark's ids name as ``ids``,
    as one :mod:`gpuwm.project` step (a filter's ``{"where": ...}``), and
    the names of its output by Spark's ids (a filter's: ``ids``). A column
    a select lists twice (Spark's ``Window`` passes its child's on beside
    its own) is one; ``inner`` (a select below another): a second column
    of one name takes a name of its own (``name#id``), which the select
    above reads by id. Raises :class:`Untranslatable` for an expression
    gpuwm does not evaluate, :class:`DuplicateNames` for two output
    columns of one name."""
    if node_kind(p) == "Filter":
        return {"where": project_expr(p.condition(), ids)}, ids
    step, names = [], {}
    for ne in scala_iter(p.projectList()):
        if node_kind(ne) == "AttributeReference" and expr_id(ne) in names:
            continue
        name = str(ne.name())
        if inner and any(n == name for n, _ in step):
            name = f"{name}#{expr_id(ne)}"
        step.append([name, project_expr(ne.child() if node_kind(ne) == "Alias" else ne, ids)])
        names[expr_id(ne)] = name
    if len(names) != len(step) or len({n for n, _ in step}) != len(step):
        raise DuplicateNames([n for n, _ in step])
    return step, names


def projection_steps(projects: list, out: list) -> tuple[list, str | None]:
    """The selects and filters ``projects`` (top first) over a source with
    output attributes ``out``, as :mod:`gpuwm.project` steps (bottom
    first, :func:`node_step` each), and why not (None: they are); raises
    :class:`Untranslatable` for an expression gpuwm's tasks do not
    evaluate. Steps that only filter end with the source's columns."""
    ids = {expr_id(a): str(a.name()) for a in out}
    steps = []
    for p in reversed(projects):
        try:
            step, ids = node_step(p, ids)
        except DuplicateNames as e:
            return [], str(e)
        steps.append(step)
    if steps and all(isinstance(s, dict) for s in steps):
        steps.append([[str(a.name()), {"col": str(a.name())}] for a in out])
    return steps, None
