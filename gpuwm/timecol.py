"""The event-time column's domain: integer or timestamp, and its unit.

Inside gpuwm every event time and watermark is an int64 in the column's own
unit (epoch-based for timestamps). This module converts what users pass —
``timedelta``, ``"5 minutes"``, ``datetime``, ``pd.Timestamp``, ``int`` — to
that unit, exactly, and converts watermarks back: ``pd.Timestamp`` in UTC
(a ``datetime`` subclass that keeps nanoseconds) for timestamp columns, a
plain ``int`` for integer columns.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pandas as pd
import pyarrow as pa

from .errors import ConfigError, SchemaError

_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_INTERVAL = re.compile(r"^\s*(-?\d+)\s*([a-zA-Z]+)\s*$")
_WORDS = {
    "ms": "milliseconds", "millisecond": "milliseconds", "milliseconds": "milliseconds",
    "msec": "milliseconds", "msecs": "milliseconds",
    "s": "seconds", "sec": "seconds", "secs": "seconds", "second": "seconds", "seconds": "seconds",
    "m": "minutes", "min": "minutes", "mins": "minutes", "minute": "minutes", "minutes": "minutes",
    "h": "hours", "hour": "hours", "hours": "hours",
    "d": "days", "day": "days", "days": "days",
    "us": "microseconds", "microsecond": "microseconds", "microseconds": "microseconds",
}


def parse_interval(value: Any) -> Any:
    """``"10 seconds"`` -> ``timedelta(seconds=10)``; other values unchanged.

    >>> parse_interval("4 seconds"), parse_interval("1 hour")
    (datetime.timedelta(seconds=4), datetime.timedelta(seconds=3600))
    """
    if not isinstance(value, str):
        return value
    m = _INTERVAL.match(value)
    if not m or m.group(2).lower() not in _WORDS:
        raise ConfigError(
            f"cannot parse interval {value!r}: expected '<integer> <unit>' with unit in "
            "us, ms, seconds, minutes, hours, days (e.g. '10 seconds')"
        )
    return timedelta(**{_WORDS[m.group(2).lower()]: int(m.group(1))})


def positive_interval(value: Any, what: str) -> Any:
    """A window size, slide or gap: a positive ``timedelta`` (an interval
    string is parsed) or a positive int."""
    from .errors import ConfigError

    value = parse_interval(value)
    if isinstance(value, bool) or not isinstance(value, (int, timedelta)):
        raise ConfigError(f"{what} must be a timedelta, an interval string or an int, got {value!r}")
    if (isinstance(value, int) and value <= 0) or (isinstance(value, timedelta) and value <= timedelta(0)):
        raise ConfigError(f"{what} must be > 0, got {value!r}")
    return value


class TimeDomain:
    """How one event-time column stores time."""

    def __init__(self, column: str, type_: pa.DataType):
        self.column = column
        self.type = type_
        if pa.types.is_timestamp(type_):
            self.is_timestamp = True
            self.unit = type_.unit
            self.per_second = _PER_SECOND[type_.unit]
        elif pa.types.is_integer(type_):
            self.is_timestamp = False
            self.unit = None
            self.per_second = None
        else:
            hint = ""
            if pa.types.is_string(type_) or pa.types.is_large_string(type_):
                hint = "; string timestamps must be cast first, e.g. pc.strptime or CAST(... AS TIMESTAMP)"
            raise SchemaError(
                f"event-time column {column!r} has type {type_}; expected a timestamp or an integer type{hint}"
            )

    # -- durations -------------------------------------------------------------
    def duration(self, value: Any, what: str, *, allow_zero: bool = True, signed: bool = False) -> int:
        """A duration (delay, window size, slide) in the column's unit;
        ``signed``: it may be negative (a join's time bound)."""
        value = parse_interval(value)
        if self.is_timestamp:
            if isinstance(value, pd.Timedelta):
                raw_ns = value.value
                raw = raw_ns * self.per_second // 1_000_000_000
                if raw * 1_000_000_000 != raw_ns * self.per_second:
                    raise ConfigError(f"{what}={value!r} is not a whole number of {self.unit}")
            elif isinstance(value, timedelta):
                us = value // timedelta(microseconds=1)
                if self.per_second >= 1_000_000:
                    raw = us * (self.per_second // 1_000_000)
                else:
                    div = 1_000_000 // self.per_second
                    if us % div:
                        raise ConfigError(f"{what}={value!r} is not a whole number of {self.unit}")
                    raw = us // div
            else:
                raise ConfigError(
                    f"{what} must be a timedelta (or a string like '10 seconds') for timestamp "
                    f"column {self.column!r}, got {value!r}"
                )
        else:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(
                    f"{what} must be an int in the unit of integer column {self.column!r}, got {value!r}"
                )
            raw = int(value)
        if signed:
            return raw
        if raw < 0 or (raw == 0 and not allow_zero):
            raise ConfigError(f"{what} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
        return raw

    def one_ms(self) -> int:
        """Flink's "- 1": one unit for integers, 1 ms (at least one unit) for timestamps."""
        if not self.is_timestamp:
            return 1
        return max(self.per_second // 1_000, 1)

    # -- instants --------------------------------------------------------------
    def end_of_time(self) -> int:
        """The raw watermark that ends the input (+infinity, Flink's
        ``MAX_WATERMARK``): 2**62 for integers, 2200-01-01 for timestamps —
        far past any event time, with room for window arithmetic and still a
        ``pd.Timestamp``."""
        if not self.is_timestamp:
            return END_INT
        return END_SECONDS * self.per_second

    def to_raw(self, value: Any) -> int | None:
        """A watermark or event time as an int in the column's unit."""
        if value is None:
            return None
        if self.is_timestamp:
            if isinstance(value, bool):
                raise ConfigError(f"watermark {value!r} is not a time")
            if isinstance(value, int):
                return int(value)  # already raw
            if isinstance(value, (datetime, pd.Timestamp)):
                ts = pd.Timestamp(value)
                if ts.tzinfo is None:
                    ts = ts.tz_localize("UTC")
                ns = ts.as_unit("ns").value
                return ns // (1_000_000_000 // self.per_second)
            raise ConfigError(f"watermark for timestamp column {self.column!r} must be a datetime, got {value!r}")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"watermark for integer column {self.column!r} must be an int, got {value!r}")
        return int(value)

    def from_raw(self, raw: int | None) -> Any:
        if raw is None:
            return None
        if not self.is_timestamp:
            return int(raw)
        return pd.Timestamp(int(raw), unit=self.unit, tz=timezone.utc)


END_INT = 1 << 62
END_SECONDS = 7_258_118_400  # 2200-01-01T00:00:00Z


def event_time_domain(schema: pa.Schema, column: str) -> TimeDomain:
    if column not in schema.names:
        raise SchemaError(f"event-time column {column!r} not found; the table has columns {schema.names}")
    return TimeDomain(column, schema.field(column).type)


def check_delay(delay: Any, what: str = "delay") -> Any:
    """A delay (or lateness) as ``parse_interval`` reads it, checked: an int or
    ``timedelta``, not negative."""
    delay = parse_interval(delay)
    if isinstance(delay, bool) or not isinstance(delay, (int, timedelta)):
        raise ConfigError(f"{what} must be a timedelta, an interval string or an int, got {delay!r}")
    if (isinstance(delay, int) and delay < 0) or (isinstance(delay, timedelta) and delay < timedelta(0)):
        raise ConfigError(f"{what} must be >= 0, got {delay!r}")
    return delay
