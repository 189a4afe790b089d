"""gpuwm's translation rules, one module a Catalyst node (or a part of
one's translation), each registered on import (:mod:`..registry`):

- ``source`` — the watermarked source (``EventTimeWatermark``, the
  filters and new columns between it and the operator, the filters
  Spark's optimizer moves below it);
- ``inputs`` — what an operator reads: down through views, selects and
  filters to the source or another operator's rule;
- ``project`` — filters and computed columns over a stage's rows;
- ``windowing`` — ``window`` / ``session_window`` read from the plan;
- ``aggregate`` (``Aggregate``), ``topn`` (``Window``, at the top),
  ``dedup`` (``Deduplicate``, ``DeduplicateWithinWatermark``), ``join``
  (``Join``), with ``join_condition`` (time bounds) and ``join_graph``
  (sides that are stages' rows).
"""

from __future__ import annotations

from . import aggregate, dedup, join, topn  # noqa: F401  (each registers its rule)
