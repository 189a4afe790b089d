"""The translation rules, one per Catalyst node kind, in a registry
(:data:`RULES`), and the node kinds gpuwm refuses with their reasons
(:data:`REFUSED`).

A rule is a function ``rule(ctx, node) -> Translation`` registered for
the class names of the Catalyst nodes it translates (``Aggregate``,
``Join``, ...) with :func:`register`; ``gpuwm.spark.front.rules`` registers
gpuwm's own on import, and a rule registered from outside the package
(a test's, a plugin's) takes a node kind the same way. A ``top_only``
rule translates its node only at the top of a query, under the selects
and filters the query ends with (``Window``: its rank filter is one of
them, :attr:`~gpuwm.spark.front.context.Context.above`); below another
operator its node kind is refused."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Rule:
    """A translation rule: the node kinds it takes, the function, and
    whether it takes its node only at the query's top."""

    kinds: tuple[str, ...]
    translate: Callable
    top_only: bool = False


#: Catalyst node kind (its class's simple name) -> the rule that translates it
RULES: dict[str, Rule] = {}

#: node kinds gpuwm does not translate, at the query's top: (the refusal's code, why)
REFUSED: dict[str, tuple[str, str]] = {
    **dict.fromkeys(("EventTimeWatermark", "StreamingRelation", "StreamingRelationV2"), (
        "STATELESS", "no stateful operator (an aggregation, a dedup, a join) is above {where}, only projections and "
                     "filters: Spark runs it as written, and gpuwm has nothing of its own to run")),
    **dict.fromkeys(("Expand", "Generate", "Sort", "Limit"), (
        "NODE_ABOVE", "gpuwm runs the operators after a windowed aggregation or a dedup as projections and filters "
                      "only (columns, struct fields, renames, casts, comparisons)")),
}
#: the reason for a node kind that is neither a rule's nor in :data:`REFUSED`
OTHER = ("gpuwm translates one withWatermark, then groupBy(window | session_window, keys).agg(...) or "
         "dropDuplicatesWithinWatermark (chained), then projections")
#: the reason for a node kind with no rule below another operator
BELOW = ("an operator below the aggregation (a join, a union ...): gpuwm translates windowed aggregations and "
         "dedups over one watermarked source, chained")


def register(*kinds: str, top_only: bool = False) -> Callable[[Callable], Callable]:
    """A decorator: the function is the rule for Catalyst nodes of ``kinds``."""

    def add(fn: Callable) -> Callable:
        rule = Rule(tuple(kinds), fn, top_only)
        for k in kinds:
            RULES[k] = rule
        return fn

    return add


def rule_for(kind: str, *, top: bool = False) -> Rule | None:
    """The rule for a node of ``kind`` (``top``: at the query's top), or None."""
    rule = RULES.get(kind)
    return rule if rule is not None and (top or not rule.top_only) else None
