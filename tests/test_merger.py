"""WatermarkMerger: Flink alignment vector, idleness, monotonicity."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpuwm

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_flink_alignment_vector():
    m = gpuwm.WatermarkMerger(["a", "b"], max_drift=1000)
    assert m.update("a", 42, now=T0) is None  # b has not reported
    assert m.update("b", 42, now=T0) == 42
    assert m.max_allowed() == 1042
    m.update("b", 44, now=T0)
    assert m.max_allowed() == 1042  # min still 42
    m.update("a", 5000, now=T0)
    assert m.max_allowed() == 1044 and m.combined(now=T0) == 44
    assert m.held_back(now=T0) == ["a"]


def test_idle_input_stops_holding_back_and_all_idle_keeps_value():
    m = gpuwm.WatermarkMerger(["a", "b"], idle_timeout=timedelta(seconds=10))
    m.update("a", 10, now=T0)
    assert m.update("b", 3, now=T0) == 3
    assert m.update("a", 20, now=T0 + timedelta(seconds=11)) == 20  # b idle
    assert m.idle(now=T0 + timedelta(seconds=11)) == ["b"]
    assert m.update("b", 5, now=T0 + timedelta(seconds=12)) == 20  # never decreases
    assert m.combined(now=T0 + timedelta(hours=1)) == 20  # all idle: keep


def test_datetime_watermarks_and_errors():
    m = gpuwm.WatermarkMerger(["x"], max_drift=timedelta(seconds=1))
    assert m.update("x", T0, now=T0) == T0
    assert m.max_allowed() == T0 + timedelta(seconds=1)
    with pytest.raises(gpuwm.ConfigError, match="unknown input 'y'"):
        m.update("y", T0)
    with pytest.raises(gpuwm.ConfigError, match="distinct"):
        gpuwm.WatermarkMerger(["a", "a"])
    with pytest.raises(gpuwm.ConfigError, match="idle_timeout"):
        gpuwm.WatermarkMerger(["a"], idle_timeout=timedelta(0))


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 100), st.integers(0, 30)), max_size=40))
def test_combined_is_min_of_live_and_monotone(updates):
    m = gpuwm.WatermarkMerger(["a", "b", "c"], idle_timeout=timedelta(seconds=10))
    latest, at, prev, now = {}, {}, None, 0
    for name, wm, dt in updates:
        now += dt
        got = m.update(name, wm, now=T0 + timedelta(seconds=now))
        latest[name] = max(latest.get(name, wm), wm)
        at[name] = now
        if len(latest) == 3:
            live = [latest[i] for i in "abc" if now - at[i] <= 10]
            cand = min(live) if live else None
            if cand is not None and (prev is None or cand > prev):
                prev = cand
        assert got == prev
