"""Size tiers for state kept as a list of sorted runs, oldest first (the
dedup's key runs, a join side's rows): one policy, so that a row is copied
O(log state) times while it is held and a probe searches few runs.

The newest run merges into the one before while that one holds at most
``ratio`` times its rows and fewer than ``max(freeze_min, held rows //
freeze_parts)`` — a run that large takes no more merges: rows leave state
about oldest first, so it only shrinks and goes whole. Beyond ``max_runs``
runs, the adjacent pair with the fewest rows merges.
"""

from __future__ import annotations

from typing import Callable, TypeVar

R = TypeVar("R")


class Tiers:
    """The tier policy's knobs (an operator class's attributes, so a test
    can make every merge happen, or none)."""

    MERGE_RATIO = 4
    FREEZE_MIN = 1 << 20
    FREEZE_PARTS = 8
    MAX_RUNS = 16

    def _tiered(self, runs: list[R], live: Callable[[R], int], merge: Callable[[R, R], R]) -> list[R]:
        """``runs`` after the merges the policy asks for (``live``: a run's
        held rows; ``merge(older, newer)``: the two as one run)."""
        runs = list(runs)
        frozen = max(self.FREEZE_MIN, sum(live(r) for r in runs) // self.FREEZE_PARTS)
        while len(runs) > 1 and live(runs[-2]) < frozen and live(runs[-2]) <= self.MERGE_RATIO * live(runs[-1]):
            runs[-2:] = [merge(runs[-2], runs[-1])]
        while len(runs) > self.MAX_RUNS:
            i = min(range(len(runs) - 1), key=lambda j: live(runs[j]) + live(runs[j + 1]))
            runs[i:i + 2] = [merge(runs[i], runs[i + 1])]
        return runs

