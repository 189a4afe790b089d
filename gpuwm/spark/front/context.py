"""What every translation rule is given (:class:`Context`), passed in
explicitly: the session, the query's plan as Spark's optimizer makes it,
the filters it places below each watermark, ``accelerate``'s
``state_ttl``, the selects and filters above the query's top operator,
and :meth:`Context.input` — the rows an operator reads, translated, once
per subtree (memoized by Spark's canonical plan, which a self-join's copy
shares)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..catalyst.plans import descendants, expr_id, filter_of, node_kind
from ..jvm.objects import scala_iter


@dataclass
class Context:
    """One query's translation in progress.

    ``spark``: the session. ``optimized``: the query's plan as Spark's
    optimizer makes it (:func:`gpuwm.spark.front.rules.source.optimized_plan`).
    ``pushed``: the conjuncts the optimizer places below each
    ``withWatermark``, by its event time's expression id
    (:func:`~gpuwm.spark.front.rules.source.below_watermarks`).
    ``state_ttl``: how long a rank's partition with no time bound stays
    open (None: not given). ``above``: the selects and filters over the
    query's top operator, top first (a top-N's rule takes its rank filter
    out of them). ``reader``: what :meth:`input` runs
    (:func:`gpuwm.spark.front.rules.inputs.input_of`)."""

    spark: Any
    reader: Callable[["Context", Any], Any]
    optimized: Any = None
    pushed: dict[int, list] = field(default_factory=dict)
    state_ttl: Any = None
    above: list = field(default_factory=list)
    memo: dict = field(default_factory=dict)  # :meth:`input`'s: its key -> (the node's output ids, the translation)
    sources: dict = field(default_factory=dict)  # :meth:`source_name`'s: a canonical plan -> its name

    @property
    def jvm(self) -> Any:
        """The session's py4j JVM view."""
        return self.spark._jvm

    def input(self, node) -> Any:
        """What an operator over ``node`` reads: a watermarked source, or
        another operator's rows (its rule's translation), as a
        :class:`~gpuwm.spark.front.translation.Translation`. One
        translation per subtree: Spark's canonical plan of ``node`` (its
        expression ids normalized) with the filters the optimizer places
        below its watermarks keys a memo, so a subtree read twice (a
        self-join's copy, a CTE read by two joins) is translated once. Each
        reader gets a copy of its own, its Spark ids the node's own (rules
        change what they are given)."""
        from .translation import copied

        key = (node.canonicalized(), *self._pushed_under(node))
        ids = [expr_id(a) for a in scala_iter(node.output())]
        hit = self.memo.get(key)
        if hit is None:
            t = self.reader(self, node)
            self.memo[key] = ids, copied(t)
            return t
        was, t = hit
        return copied(t, dict(zip(was, ids)))

    def source_name(self, plan, watermark) -> str:
        """The name of the watermarked source ``plan`` (``watermark``'s child
        with the filters and selects gpuwm's source applies): one per
        canonical plan and watermark, so the reads of one source (a
        self-join's sides, their ids apart) are one input."""
        key = plan.canonicalized(), watermark.canonicalized()
        return self.sources.setdefault(key, f"source{len(self.sources)}")

    def _pushed_under(self, node) -> list:
        """The filters the optimizer places below each ``withWatermark`` under
        ``node``, each over its watermark as a canonical plan (ids normalized)."""
        return [filter_of(self.spark, self.pushed[i], w).canonicalized()
                for w in descendants(node) if node_kind(w) == "EventTimeWatermark"
                if self.pushed.get(i := expr_id(w.eventTime()))]
