"""What every translation rule is given (:class:`Context`), passed in
explicitly: the session, the query's plan as Spark's optimizer makes it,
the filters it places below each watermark, ``accelerate``'s
``state_ttl``, the selects and filters above the query's top operator,
and :meth:`Context.input` — the rows an operator reads, translated."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


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

    @property
    def jvm(self) -> Any:
        """The session's py4j JVM view."""
        return self.spark._jvm

    def input(self, node) -> Any:
        """What an operator over ``node`` reads: a watermarked source, or
        another operator's rows (its rule's translation), as a
        :class:`~gpuwm.spark.front.translation.Translation`."""
        return self.reader(self, node)
