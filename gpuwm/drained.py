"""What :class:`~gpuwm.StreamSort` and :class:`~gpuwm.WindowAggregate` share:
the watermark of the last drain (it never goes back, and rows behind it are
late), a drain seen before the first row fixed the column type, and the row
counters — with their place in a snapshot."""

from __future__ import annotations

from typing import Any

import pandas as pd

from .errors import WatermarkError


def encode_instant(v: Any) -> Any:
    """A watermark given before the column type was known, as JSON."""
    if v is None or isinstance(v, int):
        return v
    return {"datetime": pd.Timestamp(v).isoformat()}


def decode_instant(v: Any) -> Any:
    if isinstance(v, dict):
        return pd.Timestamp(v["datetime"])
    return v


class Drained:
    """Mixin: needs ``self._schema`` (None until bound) and ``self._domain``."""

    _schema: Any
    _domain: Any

    def _init_drained(self) -> None:
        self._drained: int | None = None
        self._pending_drain: Any = None
        self.late_rows = 0
        self.null_rows = 0
        self.rows_in = 0
        self.rows_out = 0

    def _bind_pending_drain(self) -> None:
        """On binding the schema: a drain seen before any row now has a type."""
        if self._pending_drain is not None:
            self._drained = self._domain.to_raw(self._pending_drain)

    def _drain_to(self, watermark: Any) -> int | None:
        """Record a drain at ``watermark`` (raising if it goes back); its raw
        value, or None when there is nothing to release (no row seen yet, or
        no watermark)."""
        if self._schema is None:
            # nothing pushed yet: no rows, no schema; remember the watermark
            # so that later rows behind it count as late
            if watermark is not None:
                self._pending_drain = watermark
            return None
        if watermark is None:
            return None
        w = self._domain.to_raw(watermark)
        if self._drained is not None and w < self._drained:
            raise WatermarkError(
                f"watermark went backwards: drain({watermark!r}) after a drain at "
                f"{self._domain.from_raw(self._drained)!r}"
            )
        self._drained = w
        return w

    @property
    def drained_watermark(self) -> Any:
        """The watermark of the last drain (None before any), in the column's type."""
        if self._drained is None or self._domain is None:
            return None
        return self._domain.from_raw(self._drained)

    def _drained_meta(self) -> dict:
        return {"drained": self._drained, "pending": encode_instant(self._pending_drain),
                "late_rows": self.late_rows, "null_rows": self.null_rows,
                "rows_in": self.rows_in, "rows_out": self.rows_out}

    def rescale_meta(self, olds: list, first: bool) -> None:
        """After :meth:`rescale_absorb`: the last drain of the operators the
        state came from (every vnode drained with the same watermark; the
        latest, should one be behind), and their counters summed on the
        first new vnode (zero on the others, so the sums stay the same)."""
        drained = [o._drained for o in olds if o._drained is not None]
        self._drained = max(drained) if drained else None
        pending = [o._pending_drain for o in olds if o._pending_drain is not None]
        if self._schema is None and pending:
            self._pending_drain = max(pending)
        for k in ("late_rows", "null_rows", "rows_in", "rows_out"):
            setattr(self, k, sum(getattr(o, k) for o in olds) if first else 0)

    def _load_drained_meta(self, meta: dict) -> None:
        self._drained = meta["drained"]
        if self._schema is None:
            self._pending_drain = decode_instant(meta.get("pending"))
        self.late_rows, self.null_rows = meta["late_rows"], meta["null_rows"]
        self.rows_in, self.rows_out = meta["rows_in"], meta["rows_out"]
