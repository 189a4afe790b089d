"""Watermark profiles: the conventions on which engines differ, by name.

Each knob can also be set on its own (``WatermarkFilter(..., profile="flink",
late_inclusive=False)``). The table in gpuwm/DESIGN.md ("Watermark semantics") is the contract.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from .errors import ConfigError

EMITS = ("on-batch", "on-event", "on-periodic")
COMBINES = ("min", "max", "min-non-idle")
NULLS = ("drop", "keep", "error")
ENDS = ("watermark", "all")
LATENESS = ("row", "window")
WINDOW_JOINS = ("close", "match")


@dataclass(frozen=True)
class Profile:
    """One engine's watermark conventions.

    Attributes
    ----------
    name : the profile's name.
    minus_one : the watermark is ``max(ts) - delay - 1`` (1 in an integer
        column's unit, 1 ms for timestamps) instead of ``max(ts) - delay``.
    late_inclusive : a row is late when ``ts <= W`` (else ``ts < W``).
    emit : default emit strategy, ``on-batch`` or ``on-event`` (or, given
        explicitly with ``every``, ``on-periodic``).
    lag : micro-batches the watermark lags the rows. 0: batch N filters with
        the watermark before it and drains with the one after it. 1 (Spark):
        batch N filters with the watermark of batch N-1's start (W_{N-2}) and
        drains with the one at its own start (W_{N-1}).
    combine : how split watermarks combine: ``min`` (all splits must report),
        ``max`` (one global watermark over all rows, splits ignored), or
        ``min-non-idle`` (idle splits don't hold the others back). With an
        ``idle_timeout``, ``min`` leaves idle splits out too; ``max`` has
        nothing an idle split could hold back and refuses one.
    close_minus_one : a window ``[s, e)`` closes when ``W >= e - 1`` (else ``W >= e``).
    release_inclusive : the stream sort releases rows with ``ts <= W`` (else ``ts < W``).
    nulls : null event times in the filter: ``drop`` once a watermark exists
        (they pass before), ``keep`` (always pass), ``error`` (raise).
    derive_watermarks : a tumbling/hopping window stage's output watermark
        (on ``window_time``) is derived from its input watermark —
        RisingWave's window_end derivation, minus 1 unit — instead of being
        the input watermark passed on (Spark's and Flink's aggregations).
    window_lateness : in a pipeline whose first stage is a tumbling or
        hopping window, ``row``: the filter drops every row behind the
        watermark; ``window`` (Spark: its aggregation drops a (row, window)
        pair when the window's end is at or before the watermark, so a row
        behind the watermark still counts in a window that is open): the
        filter keeps rows up to one window size behind it, and the window
        stage drops the pairs of closed windows.
    end_of_input : what the end of a bounded input releases. ``watermark``:
        what the final watermark closes (Spark's last no-data micro-batch;
        RisingWave's emit-on-window-close with the final watermark);
        ``all``: the end is a watermark of +infinity (Flink's
        ``MAX_WATERMARK``): every window fires, every buffered row is
        released, and rows that arrive after it are late.
    window_join : when a window join emits a pair. ``close`` (Flink's window
        join, RisingWave's): all of a window's pairs when the watermark
        closes it. ``match`` (Spark's stream-stream join with the window in
        its keys): each pair in the batch where its later row arrives; the
        rows stay in state until their window closes (and then, in an outer
        join, those that never matched go out with nulls).
    ms_watermark : a timestamp column's watermark comes from its newest event
        time truncated to whole milliseconds (Spark keeps its event-time
        statistics in ms): ``trunc_ms(max(ts)) - delay``.
    """

    name: str
    minus_one: bool
    late_inclusive: bool
    emit: str
    lag: int
    combine: str
    close_minus_one: bool
    release_inclusive: bool
    nulls: str
    derive_watermarks: bool = False
    end_of_input: str = "watermark"
    window_lateness: str = "row"
    ms_watermark: bool = False
    window_join: str = "close"

    def __post_init__(self) -> None:
        if self.emit not in EMITS:
            raise ConfigError(f"emit must be one of {EMITS}, got {self.emit!r}")
        if self.combine not in COMBINES:
            raise ConfigError(f"combine must be one of {COMBINES}, got {self.combine!r}")
        if self.nulls not in NULLS:
            raise ConfigError(f"nulls must be one of {NULLS}, got {self.nulls!r}")
        if self.end_of_input not in ENDS:
            raise ConfigError(f"end_of_input must be one of {ENDS}, got {self.end_of_input!r}")
        if self.window_lateness not in LATENESS:
            raise ConfigError(f"window_lateness must be one of {LATENESS}, got {self.window_lateness!r}")
        if self.window_join not in WINDOW_JOINS:
            raise ConfigError(f"window_join must be one of {WINDOW_JOINS}, got {self.window_join!r}")
        if self.lag not in (0, 1):
            raise ConfigError(f"lag must be 0 or 1, got {self.lag!r}")
        if self.lag == 1 and self.emit != "on-batch":
            raise ConfigError("lag=1 (Spark's timing) needs emit='on-batch'")


PROFILES: dict[str, Profile] = {
    "risingwave": Profile("risingwave", False, False, "on-batch", 0, "min", False, False, "drop", True),
    "spark": Profile("spark", False, True, "on-batch", 1, "max", False, True, "keep", window_lateness="window",
                     ms_watermark=True, window_join="match"),
    "flink": Profile("flink", True, True, "on-event", 0, "min-non-idle", True, True, "error", end_of_input="all"),
}

KNOBS = tuple(f.name for f in fields(Profile) if f.name != "name")


def resolve(profile: str | Profile, **overrides: Any) -> Profile:
    """A profile by name (or as given), with any knob overridden.

    >>> resolve("risingwave", late_inclusive=True).late_inclusive
    True
    """
    if isinstance(profile, Profile):
        base = profile
    else:
        if profile not in PROFILES:
            raise ConfigError(f"unknown profile {profile!r}; expected one of {sorted(PROFILES)}")
        base = PROFILES[profile]
    given = {k: v for k, v in overrides.items() if v is not None}
    unknown = set(given) - set(KNOBS)
    if unknown:
        raise ConfigError(f"unknown profile knob(s) {sorted(unknown)}; knobs are {list(KNOBS)}")
    return replace(base, **given) if given else base
