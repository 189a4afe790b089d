"""gpuwm kernels: pure array functions over an array namespace ``xp``.

No state, no Spark, no I/O, and no module-level GPU import. Each function
runs the same steps on ``numpy`` and on ``cupy``.
"""

from .dedup import lookup
from .order import KeyFilter, group_starts, key_filter, key_filter_probe, order_indices, sort_rows
from .sort import cut, merge_released, range_parts
from .watermark import FilterResult, align_admit, per_split_max, ts_candidates, watermark_filter
from .window import (
    assign_windows,
    derive_watermarks,
    group_reduce,
    in_intervals,
    reduce_runs,
    segmented_cummax,
    sessionize,
    tumble_start,
)
from .xp import NONE

__all__ = [
    "NONE",
    "FilterResult",
    "align_admit",
    "KeyFilter",
    "assign_windows",
    "cut",
    "derive_watermarks",
    "group_reduce",
    "group_starts",
    "key_filter",
    "key_filter_probe",
    "lookup",
    "merge_released",
    "order_indices",
    "per_split_max",
    "range_parts",
    "reduce_runs",
    "segmented_cummax",
    "sessionize",
    "in_intervals",
    "sort_rows",
    "tumble_start",
    "ts_candidates",
    "watermark_filter",
]
