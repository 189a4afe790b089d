"""Filters and computed columns over a stage's rows: project stages."""

from __future__ import annotations

from typing import Any

from ...catalyst.expressions import Untranslatable, project_expr
from ...catalyst.plans import expr_id, no_ids, node_kind
from ...jvm.objects import scala_iter
from ..translation import Refused, Translation, bounds_struct, rows_of


def project_stage(t: Translation, node, computed: list | None) -> None:
    """A filter (``computed`` None: ``node``'s condition) or columns a
    select computes (``computed``: its aliases) over the rows of ``t``'s
    last stage, before another operator: a project stage
    (:class:`gpuwm.select.ProjectSpec`), evaluated as Spark evaluates them
    (:mod:`gpuwm.project`). The computed columns take names of gpuwm's
    own beside the stage's; the watermark passes on as it is, as Spark
    propagates it past a filter or a select."""
    kind, over = node_kind(node), rows_of(t)
    exprs = [node.condition()] if computed is None else [e.child() for e in computed]
    for e in exprs:
        if not e.deterministic():
            raise Refused("NOT_DETERMINISTIC", kind, f"`{no_ids(str(e.sql()))}` over {over} is not deterministic")
    cols, structs = struct_columns(t, exprs, kind)
    n = len(t.stages)
    if computed is None:
        project_step(t, kind, "", lambda expr: {"where": with_window(expr(node.condition(), cols), structs)})
        t.shown.append(f"filter     {no_ids(str(node.condition().sql()))}")
        return
    step = project_step(t, kind, "", lambda expr: [[f"__gpuwm_c{n}_{k}", with_window(expr(e.child(), cols),
                                                                                       structs)]
                                                    for k, e in enumerate(computed)])
    t.columns.update({expr_id(e): c for e, (c, _) in zip(computed, step)})
    t.shown.append("compute    " + ", ".join(f"{e.name()} = {no_ids(str(e.child().sql()))}" for e in computed))


def struct_columns(t: Translation, exprs: list, kind: str) -> tuple[dict[int, str], dict[str, dict]]:
    """``t``'s columns for expressions ``exprs`` over its rows, with each
    window struct they read as a column of its own (``\\0window...``), and
    what :func:`with_window` makes of those: the struct of the window's
    bounds as gpuwm's rows carry them — the window of the aggregation the
    rows come from, and over a join's rows each aggregation side's window
    (``aw.start``, ``window_time(aw)``, ``aw`` itself, of q8's join)."""
    refs = {expr_id(a) for e in exprs for a in scala_iter(e.references().toSeq())}
    cols, structs = dict(t.columns), {}
    if t.window_id is not None and t.window_id in refs:
        struct = _window_struct(t)
        if struct is None:
            raise Refused("WINDOW_STRUCT", kind, f"`{no_ids(str(exprs[0].sql()))}` over {rows_of(t)} reads a window struct gpuwm's "
                                "rows do not carry")
        cols[t.window_id], structs["\0window"] = "\0window", struct
    for i, (start, end, _) in t.windows.items():
        if i in refs and i not in cols:
            cols[i] = f"\0window{i}"
            structs[cols[i]] = bounds_struct(start, end)
    return cols, structs


def _window_struct(t: Translation) -> dict | None:
    """Spark's window column of ``t``'s rows as gpuwm's rows make it (the
    struct of its bounds its window stage's output step writes), or None."""
    name = t.output_ids.get(t.window_id) if t.window_id is not None else None
    step = t.output[-1] if t.output and isinstance(t.output[-1], list) else []
    return next((x for n, x in step if n == name), None) if name is not None else None


def project_step(t: Translation, kind: str, what: str, build) -> Any:
    """The step ``build(expr)`` makes of Spark's expressions over ``t``'s
    rows (``expr``: :func:`gpuwm.spark.catalyst.expressions.project_expr`), appended to
    ``t`` as a project stage; refused, naming ``kind`` (and ``what``, the
    refusal's start), where gpuwm does not evaluate one of them."""
    try:
        step = build(project_expr)
    except Untranslatable as err:
        raise Refused("EXPRESSION", kind, f"{what}gpuwm does not evaluate `{no_ids(str(err))}` over {rows_of(t)}") from None
    t.stages.append({"project": {"steps": [step]}})
    return step


def with_window(x: Any, structs: dict[str, dict]) -> Any:
    """Expression ``x`` (gpuwm's form) with each window column, read as
    ``{"col": "\\0window..."}``, as the struct gpuwm's rows make of it
    (``structs``: that column → the struct)."""
    if isinstance(x, dict):
        col = x.get("col") if len(x) == 1 else None
        if isinstance(col, str) and col in structs:
            return structs[col]
        return {k: with_window(v, structs) for k, v in x.items()}
    return [with_window(v, structs) for v in x] if isinstance(x, list) else x
