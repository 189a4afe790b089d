"""The rule for Spark's ``Deduplicate`` and ``DeduplicateWithinWatermark``."""

from __future__ import annotations

from ...catalyst.plans import expr_id, node_kind
from ...jvm.objects import scala_iter
from ..registry import register
from ..translation import Refused, Translation, kind_of, unbounded_join


@register("Deduplicate", "DeduplicateWithinWatermark")
def translate_dedup(ctx, node) -> Translation:
    """``dropDuplicatesWithinWatermark(keys)``, or ``dropDuplicates(keys)``
    with the watermark's column among the keys: Spark keeps such a key
    until the watermark passes its event time and drops rows behind the
    watermark as late, so a duplicate can only come while the key is in
    state or as a late row — gpuwm's dedup, which keeps each key longer
    (its event time + the delay) and drops the same late rows, gives the
    same rows. ``dropDuplicates(keys)`` without the event time among the
    keys: Spark never forgets a key (its state grows with the distinct
    keys) but still drops the rows behind the watermark; gpuwm's dedup
    with no delay keeps every key, as ``explain`` says."""
    t = ctx.input(node.child())
    if unbounded_join(t):
        raise Refused("DEDUP_UNBOUNDED", node_kind(node), "a dedup over a join with no time bound (its rows have no watermark to drain by)")
    if any(expr_id(a) not in t.columns for a in scala_iter(node.keys())):
        raise Refused("DEDUP_KEY", node_kind(node), "a key the stage below does not give as a column")
    keys = [t.columns[expr_id(a)] for a in scala_iter(node.keys())]
    forever = node_kind(node) == "Deduplicate" and (t.time is None or t.time[1] not in keys)
    if forever and (t.time is None or t.stages):
        over = f"a {kind_of(t.stages[-1])}'s rows" if t.stages else "rows with no event time"
        raise Refused("DEDUP_FOREVER", "Deduplicate", f"dropDuplicates without the event-time column among its keys over {over}: "
                                     "gpuwm keeps every key forever over a watermarked source only")
    out = [a for a in scala_iter(node.output()) if expr_id(a) in t.columns]
    t.stages.append({"dedup": {"key": keys, **({"forever": True} if forever else {})}})
    t.output = [[[str(a.name()), {"col": t.columns[expr_id(a)]}] for a in out]]
    t.output_ids = {expr_id(a): str(a.name()) for a in out}
    call = "dropDuplicates" if node_kind(node) == "Deduplicate" else "dropDuplicatesWithinWatermark"
    t.shown.append(f"dedup      {call}({[str(a.name()) for a in scala_iter(node.keys())]})" + (
        ": no event time among the keys, every key kept in state (as Spark keeps it)" if forever else ""))
    return t
