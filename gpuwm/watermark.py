"""The watermark filter and the watermark merger.

A :class:`WatermarkFilter` derives per-split watermarks from an event-time
column (bounded out-of-orderness), drops late rows and counts them, and
combines the split watermarks into one (min, global max, or min over
non-idle splits — see :mod:`gpuwm.profiles`). A :class:`WatermarkMerger`
combines watermarks reported by named inputs, with idleness and alignment.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kernels import NONE, align_admit, ts_candidates, watermark_filter
from kernels.watermark import periodic_points
from kernels.xp import to_numpy

from . import staging
from .backend import Backend, get_backend
from .errors import ConfigError, SchemaError, WatermarkError
from .frame import Frame, arrow_to_numpy, filter_table
from .profiles import Profile, resolve
from .schema import same_schema, schema_from_text, schema_to_text
from .timecol import TimeDomain, check_delay, event_time_domain, parse_interval


def _now(now: datetime | None) -> datetime:
    if now is None:
        return datetime.now(timezone.utc)
    if now.tzinfo is None:
        now = now.replace(tzinfo=timezone.utc)
    return now


def split_key(key: Any) -> Any:
    """A split key back from JSON (lists were tuples)."""
    return tuple(key) if isinstance(key, list) else key


def combine_split_watermarks(
    wms: Sequence[int],
    active: Sequence[bool],
    mode: str,
) -> int | None:
    """The combined watermark of splits before the never-decrease clamp.

    ``wms`` use :data:`kernels.NONE` for "not reported". ``active[i]`` is
    False for an idle split (only with an ``idle_timeout``: ``min`` and
    ``min-non-idle`` then both leave it out). Returns None where the splits
    can't yet agree (a split that counts has not reported, or every split is
    idle: the caller keeps its last value).
    """
    if mode == "max":
        vals = [w for w in wms if w != NONE]
        return max(vals) if vals else None
    counted = [w for w, a in zip(wms, active) if a]
    if not counted or any(w == NONE for w in counted):
        return None
    return min(counted)


def _check_idle(idle_timeout: Any) -> Any:
    value = parse_interval(idle_timeout)
    if value is not None and (not isinstance(value, timedelta) or value <= timedelta(0)):
        raise ConfigError(f"idle_timeout must be a positive timedelta, got {idle_timeout!r}")
    return value


#: the column a Pipeline's watermark ``expr`` is evaluated into (the filter leaves it out of its output)
EXPR_COLUMN = "__gpuwm_watermark"


def _check_every(every: Any, emit: str | None) -> Any:
    if (every is None) != (emit != "on-periodic"):
        raise ConfigError("emit='on-periodic' needs every= (rows of a split, or an interval of event time), and "
                          f"every= needs emit='on-periodic'; got emit={emit!r}, every={every!r}")
    if every is None:
        return None
    if isinstance(every, int) and not isinstance(every, bool):
        if every < 1:
            raise ConfigError(f"every (rows) must be >= 1, got {every}")
        return every
    value = parse_interval(every)
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise ConfigError(f"every must be a number of rows or a positive interval of event time, got {every!r}")
    return value


def _check_splits_apply(profile: Profile, idle_timeout: Any, max_drift: Any) -> None:
    """Idleness and alignment act on split watermarks; one global maximum
    over all rows (``combine='max'``, the spark profile) has none."""
    if profile.combine != "max":
        return
    for name, value in (("idle_timeout", idle_timeout), ("max_drift", max_drift)):
        if value is not None:
            raise ConfigError(
                f"{name} has no effect under combine='max' (profile {profile.name!r}: one watermark over all rows, "
                f"which no split holds back); use profile 'risingwave' or 'flink' (or combine='min') with a split "
                f"column, or drop {name}")


@dataclass(frozen=True)
class WatermarkSpec:
    """What builds a :class:`WatermarkFilter` in a task: the same arguments,
    validated when the spec is made (a frozen, picklable value; ``knobs`` as
    ``((name, value), ...)``).

    >>> WatermarkSpec("ts", "5 seconds", profile="spark").build("cpu").profile.lag
    1
    """

    column: str
    delay: Any
    profile: str = "risingwave"
    emit: str | None = None
    split: str | None = None
    idle_timeout: Any = None
    max_drift: Any = None
    allowed_lateness: Any = 0
    knobs: tuple = ()
    candidate: str | None = None
    punctuated: str | None = None
    every: Any = None
    #: a Spark SQL expression the Pipeline evaluated into column :data:`EXPR_COLUMN` (the candidate), left out
    #: of the filter's output
    expr: str | None = None

    def __post_init__(self) -> None:
        if self.expr is not None:
            if self.candidate is not None or self.punctuated is not None:
                raise ConfigError("a watermark 'expr' is a strategy of its own: not with candidate or punctuated")
            object.__setattr__(self, "candidate", EXPR_COLUMN)
        object.__setattr__(self, "every", _check_every(self.every, self.emit))
        if self.candidate is not None and self.punctuated is not None:
            raise ConfigError("candidate and punctuated are two watermark strategies: give one")
        knobs = tuple(sorted(dict(self.knobs).items()))
        object.__setattr__(self, "knobs", knobs)
        object.__setattr__(self, "delay", check_delay(self.delay))
        object.__setattr__(self, "allowed_lateness", check_delay(self.allowed_lateness or 0, "allowed_lateness"))
        object.__setattr__(self, "idle_timeout", _check_idle(self.idle_timeout))
        object.__setattr__(self, "max_drift", parse_interval(self.max_drift))
        _check_splits_apply(resolve(self.profile, emit=self.emit, **dict(knobs)),  # the knobs' names and values
                            self.idle_timeout, self.max_drift)

    @property
    def resolved_profile(self) -> Profile:
        return resolve(self.profile, emit=self.emit, **dict(self.knobs))

    @property
    def names(self) -> tuple[str, ...]:
        """The named inputs whose watermarks this is: none, one input's
        (:class:`~gpuwm.inputs.InputsSpec` has several)."""
        return ()

    def build(self, backend: str | None = None) -> "WatermarkFilter":
        return WatermarkFilter(self.column, self.delay, profile=self.profile, emit=self.emit, split=self.split,
                               idle_timeout=self.idle_timeout, max_drift=self.max_drift,
                               allowed_lateness=self.allowed_lateness, candidate=self.candidate,
                               punctuated=self.punctuated, every=self.every, keep_candidate=self.expr is None,
                               backend=backend, **dict(self.knobs))

    def describe(self) -> dict:
        """The spec as JSON-able values; the strategies only when set, so a
        checkpoint's recorded pipeline from before them still matches."""
        from .operator import _plain

        return {k: _plain(getattr(self, k)) for k in self.__dataclass_fields__
                if k not in ("candidate", "punctuated", "every", "expr") or getattr(self, k) is not None}


class WatermarkFilter:
    """Drop late rows and track the watermark of an event-time column.

    Parameters
    ----------
    column : name of the event-time column (timestamp or integer type).
    delay : bounded out-of-orderness: a ``timedelta`` or ``"5 minutes"`` for
        timestamp columns, an ``int`` in the column's unit for integer columns.
    profile : ``"risingwave"``, ``"spark"`` or ``"flink"`` (see gpuwm/README.md, "Profiles").
    emit : ``"on-batch"`` (one watermark per chunk) or ``"on-event"`` (row by
        row in arrival order within a split); default from the profile.
    split : name of a split column (e.g. Kafka ``partition``); None for one split.
    splits : split values expected up front; under ``combine="min"`` the
        combined watermark waits until all have reported.
    idle_timeout : processing time after which a split with no rows stops
        holding the combined watermark back (``min`` and ``min-non-idle``;
        refused under ``max``); it counts while no batch has rows too
        (a no-data batch re-combines at its own time).
    max_drift : alignment (Flink's ``watermark.alignment.max-drift``,
        FLIP-182's pause and resume; refused under ``max``): a split whose
        watermark is more than this ahead of the slowest non-idle split's
        is paused — its rows are held in this filter's state (not emitted,
        not moving its watermark) and read, in arrival order, in a later
        batch once the others have caught up. The bound (slowest + drift)
        is the one before the batch; under ``on-event`` a split reads its
        rows until one moves it past the bound, under ``on-batch`` all or
        none. Held rows are in :attr:`held_rows`; :meth:`flush` releases
        them all (the end of a bounded input).
    candidate : strategy "expression" (RisingWave's ``WATERMARK FOR col AS
        expr``, a Flink ``WatermarkGenerator``): the name of a column, of the
        event-time column's type, holding each row's watermark candidate; a
        split's watermark is the largest candidate so far, taken as it is
        (``delay`` and the profile's ``- 1`` do not apply); a null
        candidate, or a null event time, leaves the watermark where it is.
        Rows are still late by their event time. ``keep_candidate=False``:
        the output (and the late rows) leave that column out (a column
        made only for the watermark, as a Pipeline's ``expr`` makes).
    punctuated : strategy "punctuated" (Flink's ``onEvent`` emitting on
        marked events): the name of a boolean column; only rows where it is
        true carry a candidate, ``ts - delay`` under the profile's rules.
    every : with ``emit="on-periodic"`` (Flink's periodic emission): the
        split's watermark advances only after every ``every``-th row of the
        split that has an event time (an ``int``, counted across batches),
        or in steps of ``every`` of event time (a ``timedelta`` or
        ``"10 seconds"``: the watermark is held at a multiple of it); rows
        are tested, as under ``on-event``, against the watermark emitted
        last before them.
    allowed_lateness : a row is late only when it is this far behind the
        watermark: ``ts + allowed_lateness < W`` (``<=`` under
        ``late_inclusive``); default 0. A session-window pipeline sets it to
        the gap: a row whose own session ``[ts, ts + gap)`` is still open can
        join an open session (Spark drops session rows the same way).
    backend : ``"auto"``, ``"cpu"`` or ``"gpu"`` (default: :func:`gpuwm.set_backend`).
    **knobs : any profile knob, e.g. ``late_inclusive=False``.

    Examples
    --------
    >>> import pyarrow as pa, gpuwm
    >>> f = gpuwm.WatermarkFilter("t", delay=2, profile="risingwave")
    >>> f.process(pa.table({"t": [5, 9, 3]}))["t"].to_pylist()
    [5, 9, 3]
    >>> f.watermark, f.process(pa.table({"t": [6, 7, 10]}))["t"].to_pylist(), f.late_rows
    (7, [7, 10], 1)
    """

    def __init__(
        self,
        column: str,
        delay: Any,
        profile: str | Profile = "risingwave",
        emit: str | None = None,
        split: str | None = None,
        *,
        splits: Iterable[Any] | None = None,
        idle_timeout: Any = None,
        max_drift: Any = None,
        allowed_lateness: Any = 0,
        candidate: str | None = None,
        punctuated: str | None = None,
        every: Any = None,
        keep_candidate: bool = True,
        backend: str | None = None,
        **knobs: Any,
    ):
        self.column = column
        self.keep_candidate = keep_candidate
        if candidate is not None and punctuated is not None:
            raise ConfigError("candidate and punctuated are two watermark strategies: give one")
        self.candidate, self.punctuated = candidate, punctuated
        self.delay = check_delay(delay)
        self.allowed_lateness = check_delay(allowed_lateness or 0, "allowed_lateness")
        self.profile = resolve(profile, emit=emit, **knobs)
        self.every = _check_every(every, self.profile.emit)
        self.split = split if self.profile.combine != "max" else None
        self.split_column = split
        self.idle_timeout = _check_idle(idle_timeout)
        self.max_drift = parse_interval(max_drift)
        _check_splits_apply(self.profile, self.idle_timeout, self.max_drift)
        self.ended = False  # end_input() was called
        self._backend: Backend = get_backend(backend)
        self._schema: pa.Schema | None = None
        self._domain: TimeDomain | None = None
        self._eff_delay: int | None = None
        self._drift_raw: int | None = None
        # per split state (host arrays; tiny: one value per split)
        self._keys: list[Any] = []
        self._code: dict[Any, int] = {}
        self._self_coded = 0  # splits 0..n-1 (ints) have codes 0..n-1: no lookup needed
        self._wm = np.zeros(0, dtype=np.int64)
        self._wm_lag = np.zeros(0, dtype=np.int64)
        self._active_at: list[datetime | None] = []
        self._seen = np.zeros(0, dtype=np.int64)  # on-periodic in rows: the largest candidate so far
        self._count = np.zeros(0, dtype=np.int64)  # ... and the rows so far, modulo every
        self._combined: int | None = None
        self._combined_prev: int | None = None
        self._held: pa.Table | None = None  # alignment: rows of splits that ran ahead, in arrival order
        self.late_rows = 0
        self.null_rows = 0
        self.null_rows_dropped = 0
        self.rows_in = 0
        self.batches = 0
        if self.split is None:
            self._add_split(None)
        for s in splits or ():
            self._add_split(s)

    # -- splits ----------------------------------------------------------------
    def _add_split(self, key: Any) -> int:
        code = len(self._keys)
        if type(key) is int and key == code == self._self_coded:
            self._self_coded += 1
        self._keys.append(key)
        self._code[key] = code
        ended = self.ended and self.profile.end_of_input == "all" and self._domain is not None
        start = self._end_raw() if ended else NONE
        self._wm = np.append(self._wm, np.int64(start))  # after an end at +infinity a new split is late too
        self._wm_lag = np.append(self._wm_lag, np.int64(start))
        self._active_at.append(None)
        self._seen = np.append(self._seen, np.int64(NONE))
        self._count = np.append(self._count, np.int64(0))
        return code

    def _split_codes(self, data: pa.Table | Frame) -> tuple[Any, np.ndarray] | None:
        """Each row's split code, on the backend (or on the host for host
        input on the CPU), and the distinct codes present (host); new split
        keys are registered."""
        if self.split is None:
            return None
        if self.split not in data.schema.names:
            raise SchemaError(f"split column {self.split!r} not found; the table has columns {data.schema.names}")
        xp, col = np, None
        if isinstance(data, Frame):
            c = data.columns[self.split]
            if not c.fixed or not pa.types.is_integer(c.type):  # strings, or rare: keyed by value on the host
                col = pa.chunked_array([c.to_arrow(self._backend)])
            else:
                xp = self._backend.xp
                v, valid = c.values, c.valid
                nulls = 0 if valid is None else int(valid.shape[0] - xp.count_nonzero(valid))
        else:
            col = data.column(self.split)
        if col is not None:
            nulls = col.null_count
        if nulls:
            raise SchemaError(f"split column {self.split!r} has {nulls} null value(s); every row needs a split")
        if col is not None and pa.types.is_integer(col.type) and col.num_chunks:
            vals = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
            v = arrow_to_numpy(vals, np.dtype(vals.type.to_pandas_dtype()))[0]
        if col is None or (pa.types.is_integer(col.type) and col.num_chunks):
            # small non-negative integer splits (Kafka partitions): a lookup
            # table indexed by value, O(rows), no hashing
            if v.shape[0] and 0 <= int(v.min()) and (top := int(v.max())) < 1 << 16:
                if v.dtype == xp.uint64:  # not safely castable to an index type
                    v = v.astype(xp.int64)
                if top < self._self_coded:  # known splits, each its own code (Kafka partitions)
                    return v, None  # the splits present: from the kernel's per-split maxima
                present = to_numpy(xp, xp.flatnonzero(xp.bincount(v)))
                lut = np.zeros(int(present[-1]) + 1, dtype=np.int64)
                for value in present.tolist():  # one per distinct split
                    lut[value] = self._code[value] if value in self._code else self._add_split(value)
                if np.array_equal(lut[present], present):  # splits 0..k-1 are their own codes: no gather
                    return v, present
                return xp.asarray(lut)[v], lut[present]
            if col is None:
                col = pa.chunked_array([pa.array(self._backend.to_numpy(v))])
        enc = pc.dictionary_encode(col).combine_chunks()
        remap = np.array([self._code.get(v) if v in self._code else self._add_split(v)
                          for v in enc.dictionary.to_pylist()], dtype=np.int64)
        idx = enc.indices.to_numpy(zero_copy_only=False)
        return (remap[idx] if remap.shape[0] else idx.astype(np.int64)), remap

    # -- set-up on the first table ---------------------------------------------
    def bind(self, schema: pa.Schema) -> "WatermarkFilter":
        """Fix the input schema before any row (checked on every call)."""
        self._bind(schema)
        return self

    def _bind(self, schema: pa.Schema) -> None:
        if self._schema is not None:
            same_schema(self._schema, schema, "WatermarkFilter.process")
            return
        dom = event_time_domain(schema, self.column)
        for name, want in ((self.candidate, schema.field(self.column).type), (self.punctuated, pa.bool_())):
            if name is None:
                continue
            if name not in schema.names:
                raise SchemaError(f"watermark {'candidate' if want != pa.bool_() else 'punctuation'} column "
                                  f"{name!r} not found; the table has columns {schema.names}")
            if schema.field(name).type != want:
                raise SchemaError(f"watermark column {name!r} must be {want} (the event-time column's type for a "
                                  f"candidate, bool for punctuation), got {schema.field(name).type}")
        delay = dom.duration(self.delay, "delay")
        self._eff_delay = delay + (dom.one_ms() if self.profile.minus_one else 0)
        self._grain = dom.one_ms() if self.profile.ms_watermark and dom.is_timestamp else 1
        self._lateness = 0 if not self.allowed_lateness else dom.duration(self.allowed_lateness, "allowed_lateness")
        if self.max_drift is not None:
            self._drift_raw = dom.duration(self.max_drift, "max_drift")
        self._every_raw = None if not isinstance(self.every, timedelta) else dom.duration(self.every, "every")
        self._domain = dom
        self._schema = schema

    # -- the work --------------------------------------------------------------
    def process(self, table: pa.Table, now: datetime | None = None, *, align: bool = True) -> pa.Table:
        """Filter one chunk / micro-batch; returns the kept rows, same schema.

        An empty table is a no-data batch: it advances Spark-style lagged
        watermarks and idleness (and, with ``max_drift``, reads the held
        rows of splits the others have caught up with), nothing else.
        ``align=False``: no split is held back this batch (every held row is
        read first).
        """
        held: list = []
        kept, stats = self.filter_local(table, now=now, align=align, held_out=held)
        self.advance([stats], now, held=held)
        return kept

    def flush(self, now: datetime | None = None) -> pa.Table:
        """A no-data batch that reads every held row (alignment: the input
        ended, so no split has anyone to wait for); returns what it kept.
        Call it before :meth:`finish` / :meth:`end_input` at the end of a
        bounded input."""
        return self.process(self._schema.empty_table() if self._schema is not None else pa.table({}), now,
                            align=False)

    @property
    def held_rows(self) -> int:
        """Rows held back by alignment, waiting in this filter's state."""
        return 0 if self._held is None else self._held.num_rows

    def held_table(self) -> pa.Table | None:
        """The held rows (input schema, arrival order), or None."""
        return self._held

    def _slowest(self, now: datetime) -> int | None:
        """The slowest non-idle split's watermark (None: none has one yet)."""
        act = self._activity(now)
        live = [int(w) for w, a in zip(self._wm.tolist(), act) if a and w != NONE]
        return min(live) if live else None

    def _align_bound(self, now: datetime) -> int | None:
        """Alignment's bound: the slowest non-idle split's watermark plus the
        drift (None: no drift, or no such split yet)."""
        low = None if self._drift_raw is None else self._slowest(now)
        return None if low is None else low + self._drift_raw

    def _splits_ahead(self, bound: int) -> list[Any]:
        """The splits whose watermark is above ``bound``."""
        return [k for k, w in zip(self._keys, self._wm.tolist()) if w != NONE and w > bound]

    def _align(self, table: pa.Table | Frame, queued: str, align: Any, now: datetime | None
               ) -> tuple[pa.Table | Frame, pa.Table | None, dict]:
        """Alignment before the filter: the held rows first (``queued``:
        ``prepend`` — from this filter's state; ``only`` — ``table`` is
        them; ``skip`` — another task reads them), then which rows each
        split reads under the bound. Returns (rows read, rows held, counts
        and the splits of the held rows)."""
        b = self._backend
        is_frame = isinstance(table, Frame)
        queue = table.num_rows if queued == "only" else 0
        if queued == "prepend" and self._held is not None and self._held.num_rows:
            queue = self._held.num_rows
            if is_frame:
                table = Frame.concat([Frame.from_arrow(self._held, b), table])
            else:
                table = pa.concat_tables([self._held.cast(table.schema), table])
        info = {"queue": queue, "released": queue, "held": 0, "held_codes": []}
        bound = None if align is False or self.ended else self._align_bound(_now(now)) if align is True else align
        n = table.num_rows
        if bound is None or not n:
            return table, None, info
        split = self._split_codes(table)
        codes = None if split is None else b.asarray(split[0])
        xp = b.xp
        frame = table if is_frame else Frame.from_arrow(table, b) if b.is_gpu else None
        if frame is None:
            xp = np
        contrib = None
        if self.profile.emit != "on-batch":  # what each row moves its split's watermark to
            ts, valid = self._values(table, frame, self.column)
            contrib = self._candidates(table, frame, ts, valid)
            if contrib is None:
                src = ts.astype(xp.int64, copy=False)
                contrib = ts_candidates(xp, src if valid is None else xp.where(valid, src, NONE),
                                        self._eff_delay, self._grain)
            if isinstance(self.every, int):  # on-periodic in rows: the emission points
                contrib = periodic_points(xp, contrib, valid, codes, len(self._keys), xp.asarray(self._seen),
                                          xp.asarray(self._count), self.every)[0]
        mask = align_admit(xp, n, contrib, codes, len(self._keys), xp.asarray(self._wm), bound)
        if mask is None:
            return table, None, info
        keep = to_numpy(xp, mask) if frame is None else mask
        if frame is not None:
            held = frame.filter(~mask).to_arrow()
            read = frame.filter(mask)
            read = read if is_frame else read.to_arrow()
        else:
            held, read = filter_table(table, ~keep), filter_table(table, keep)
        info["held"] = held.num_rows
        info["released"] = int(xp.count_nonzero(mask[:queue])) if queue else 0
        info["held_codes"] = [] if codes is None else np.unique(to_numpy(xp, codes[~mask])).tolist()
        return read, held, info

    def filter_local(self, table: pa.Table | Frame, late_out: list | None = None,
                     against: int | None = None, *, held_out: list | None = None, queued: str = "prepend",
                     align: Any = True, now: datetime | None = None) -> tuple[pa.Table | Frame, dict]:
        """The first half of :meth:`process`; it changes no state (new split keys are
        registered, with no watermark):
        the kept rows and this chunk's statistics (per-split watermark
        candidates, counts) as a JSON-able dict.

        A micro-batch spread over several tasks (Spark) runs this in every
        task against the same prior state, and :meth:`advance` once with all
        the tasks' statistics: under ``on-batch`` that equals one
        :meth:`process` over the whole batch (maxima and counts combine).

        ``late_out``: a list that gets the rows dropped as late (an Arrow
        table, when there are any), for a side output.

        ``against``: rows are tested against this raw watermark instead of
        their split's — one input of several tests against the inputs'
        combined watermark (:class:`~gpuwm.inputs.InputFilters`);
        :data:`kernels.NONE`: none is late.

        ``table`` may be a :class:`~gpuwm.frame.Frame` already on this
        filter's backend; the kept rows then stay a Frame, on the device, for
        the next operator (the Spark runtime moves a batch to the GPU once).

        Alignment (``max_drift``): ``held_out`` (required then) is a list
        that gets the rows held back (an Arrow table), for :meth:`advance`'s
        ``held``. ``queued``: where the rows already held come from —
        ``prepend``: this filter's state, read before ``table``; ``only``:
        ``table`` is them (a task of their own); ``skip``: another task
        reads them. ``align``: True — the bound from this filter's state at
        processing time ``now``; an int — this bound (an alignment group of
        several inputs); False — hold nothing back.
        """
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        self._bind(table.schema)
        aligned = None
        if self._drift_raw is not None:
            if held_out is None:
                raise WatermarkError("with max_drift, filter_local() needs held_out= (a list that gets the rows "
                                     "held back) for advance(held=...)")
            table, held, aligned = self._align(table, queued, align, now)
            if held is not None:
                held_out.append(held)
        split = self._split_codes(table)
        codes, present = (None, None) if split is None else split
        b = self._backend
        xp = b.xp
        frame = table if isinstance(table, Frame) else None
        if frame is None and b.is_gpu:
            frame = Frame.from_arrow(table, b)
        ts, valid = self._values(table, frame, self.column)
        n = table.num_rows
        nnull = 0 if valid is None else int(n - xp.count_nonzero(valid))
        if nnull and self.profile.nulls == "error":
            raise WatermarkError(
                f"{nnull} row(s) have a null event time in {self.column!r} and profile "
                f"{self.profile.name!r} refuses nulls (nulls='error'); filter them out or set nulls='drop'/'keep'"
            )
        test = self._wm_lag if self.profile.lag else self._wm
        rows_every = self.every if isinstance(self.every, int) else None
        # the per-split state goes to the device in one copy
        codes, test_d, wm_d, seen_d, count_d = staging.upload_arrays(b, [
            codes, test, self._wm, *((None, None) if rows_every is None else (self._seen, self._count))])
        res = watermark_filter(
            xp, ts, valid, codes, len(self._keys), test_d, wm_d,
            delay=self._eff_delay, inclusive=self.profile.late_inclusive, lateness=self._lateness,
            on_event=self.profile.emit != "on-batch",
            drop_nulls=self.profile.nulls == "drop", against=against, grain=self._grain,
            cand=self._candidates(table, frame, ts, valid),
            periodic=None if rows_every is None else (seen_d, count_d, rows_every),
        )
        # and comes back in one: the new watermarks, each split's top (or row count), the periodic counters
        tops = None if codes is None or present is not None else res.top if valid is None else xp.bincount(codes)
        new_wm, tops, p_seen, p_count = staging.download_arrays(b, [res.watermarks, tops, res.seen, res.count])
        new_wm = np.asarray(new_wm, dtype=np.int64)
        if not n:
            seen = np.zeros(0, dtype=np.int64)
        elif codes is None:
            seen = np.array([0])
        else:
            if present is None:  # self-coded splits: those with rows (a null-ts row still counts)
                present = np.flatnonzero(tops != NONE) if valid is None else np.flatnonzero(tops)
            seen = np.sort(present)
        stats = {
            "splits": [[self._keys[c], None if new_wm[c] == NONE else int(new_wm[c])] for c in seen.tolist()],
            "late": res.late, "nulls": nnull, "nulls_dropped": res.nulls_dropped, "rows": n,
        }
        if aligned is not None:  # held rows are input when they arrive, not when read; their splits are active
            stats["rows"] += aligned["held"] - aligned["queue"]
            stats["held"], stats["released"] = aligned["held"], aligned["released"]
            got = set(seen.tolist())
            stats["splits"] += [[self._keys[c], None] for c in aligned["held_codes"] if c not in got]
        if res.seen is not None:  # on-periodic in rows: where each split's count and largest candidate are
            stats["periodic"] = [[self._keys[c], int(p_seen[c]), int(p_count[c])] for c in seen.tolist()]
        hide = [] if self.keep_candidate or self.candidate is None else [self.candidate]
        if late_out is not None and res.late:  # the late rows themselves (not dropped nulls), for a side output
            late = ~res.keep if valid is None else ~res.keep & valid
            rows = frame.filter(late, res.late).to_arrow() if frame is not None else filter_table(table, late)
            late_out.append(rows.drop_columns(hide) if hide else rows)
        if res.keep is None:
            kept = table
        elif isinstance(table, Frame):
            kept = frame.filter(res.keep, res.kept)
        elif frame is not None:
            kept = frame.filter(res.keep, res.kept).to_arrow()
        else:
            kept = filter_table(table, res.keep)
        if hide:
            kept = kept.drop(hide) if isinstance(kept, Frame) else kept.drop_columns(hide)
        return kept, stats

    def _values(self, table: pa.Table | Frame, frame: Frame | None, name: str) -> tuple[Any, Any | None]:
        """(values, valid) of column ``name``: the Frame's, or host views of
        the table's (int64 for event times)."""
        if frame is not None:
            return frame.values(name)
        col = table.column(name)
        arr = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
        if isinstance(arr, pa.ChunkedArray):
            arr = pa.array([], type=col.type)
        dtype = np.dtype(np.int64) if pa.types.is_timestamp(arr.type) else np.dtype(arr.type.to_pandas_dtype())
        return arrow_to_numpy(arr, dtype)

    def _candidates(self, table: pa.Table | Frame, frame: Frame | None, ts: Any, valid: Any | None) -> Any | None:
        """Each row's watermark candidate under the ``candidate`` or
        ``punctuated`` strategy (:data:`NONE`: none), or None for ``ts - delay``;
        held at multiples of ``every`` when that is an interval."""
        if self.candidate is None and self.punctuated is None and self._every_raw is None:
            return None
        xp = self._backend.xp if frame is not None else np
        src = ts.astype(xp.int64, copy=False)
        if valid is not None:
            src = xp.where(valid, src, NONE)
        if self.candidate is not None:
            c, cvalid = self._values(table, frame, self.candidate)
            c = c.astype(xp.int64, copy=False)
            cand = xp.where(src != NONE, c, NONE) if cvalid is None else \
                xp.where(cvalid & (src != NONE), c, NONE)  # a row without an event time has none either
        else:
            cand = ts_candidates(xp, src, self._eff_delay, self._grain)
            if self.punctuated is not None:
                mark, mvalid = self._values(table, frame, self.punctuated)
                cand = xp.where(mark if mvalid is None else mark & mvalid, cand, NONE)
        if self._every_raw is None:
            return cand
        return xp.where(cand != NONE, cand - cand % self._every_raw, NONE)

    def advance(self, stats: Sequence[dict], now: datetime | None = None,
                held: Sequence[pa.Table] | None = None) -> None:
        """Fold chunk statistics from :meth:`filter_local` into the state:
        split watermarks, idleness, the combined watermark, counters.
        ``held``: every task's held rows of this batch, in arrival order
        (the held rows before it, then each task's), which replace the held
        rows in the state (None: leave them as they are)."""
        now = _now(now)
        if held is not None:
            held = [t for t in held if t is not None and t.num_rows]
            self._held = None if not held else held[0] if len(held) == 1 else pa.concat_tables(
                [t.cast(held[0].schema) for t in held])
        self._wm_lag = self._wm.copy()
        for st in stats:
            for key, wm in st["splits"]:
                key = split_key(key)
                code = self._code[key] if key in self._code else self._add_split(key)
                self._active_at[code] = now
                if wm is not None and wm > self._wm[code]:
                    self._wm[code] = wm
            for key, top, count in st.get("periodic", ()):
                code = self._code[split_key(key)]
                self._seen[code], self._count[code] = max(int(self._seen[code]), top), count
            self.late_rows += st["late"]
            self.null_rows += st["nulls"]
            self.null_rows_dropped += st["nulls_dropped"]
            self.rows_in += st["rows"]
        self._combined_prev = self._combined
        self._combine(now)
        self.batches += 1

    def _activity(self, now: datetime) -> list[bool]:
        if self.idle_timeout is None:
            return [True] * len(self._keys)
        return [a is not None and now - a <= self.idle_timeout for a in self._active_at]

    def _combine(self, now: datetime) -> None:
        cand = combine_split_watermarks(self._wm.tolist(), self._activity(now), self.profile.combine)
        if cand is not None and (self._combined is None or cand > self._combined):
            self._combined = cand

    def _end_raw(self) -> int:
        return self._domain.end_of_time()

    def end_input(self) -> Any:
        """The input has ended (after the last batch's :meth:`process` or
        :meth:`advance`, which a no-data batch makes): under the profile's
        ``end_of_input='all'`` (flink) the watermark becomes +infinity —
        :meth:`~gpuwm.timecol.TimeDomain.end_of_time` — so every operator
        drained with :attr:`output_watermark` releases everything, and every
        later row is late; under ``'watermark'`` (spark, risingwave) it stays
        the final watermark. Returns :attr:`output_watermark`.

        >>> import pyarrow as pa, gpuwm
        >>> f = gpuwm.WatermarkFilter("t", delay=2, profile="flink")
        >>> _ = f.process(pa.table({"t": [10]}))
        >>> f.watermark, f.end_input() == 2 ** 62, f.process(pa.table({"t": [99]})).num_rows
        (7, True, 0)
        """
        self.ended = True
        if self.profile.end_of_input == "all" and self._domain is not None:
            end = self._end_raw()
            self._wm[:] = end
            self._wm_lag[:] = end
            self._combined = self._combined_prev = end
        return self.output_watermark

    def finish(self, now: datetime | None = None) -> Any:
        """The end of the input as one call: a no-data batch at ``now`` (the
        final watermark: Spark's last micro-batch), then :meth:`end_input`.
        Returns the watermark to drain every operator with a last time.
        Rows held back by alignment must be read first (:meth:`flush`)."""
        if self.held_rows:
            raise WatermarkError(f"{self.held_rows} row(s) are held back by alignment: read them with flush() "
                                 "before finish()")
        self.advance([], now)
        return self.end_input()

    # -- what users read -------------------------------------------------------
    def _out(self, raw: int | None) -> Any:
        if raw is None:
            return None
        return self._domain.from_raw(raw) if self._domain else raw

    @property
    def watermark(self) -> Any:
        """The combined watermark after the last batch (never decreases);
        ``pd.Timestamp`` (UTC) for timestamp columns, ``int`` for integer
        columns, None before any."""
        return self._out(self._combined)

    @property
    def watermark_raw(self) -> int | None:
        return self._combined

    @property
    def output_watermark(self) -> Any:
        """The watermark downstream operators drain with after this batch:
        the combined watermark, or (``lag=1``, Spark) the one before it."""
        return self._out(self.output_watermark_raw)

    @property
    def max_event_time_raw(self) -> int | None:
        """The newest event time seen (the largest split watermark plus the delay)."""
        top = self._domain.end_of_time() if self._domain is not None else None
        live = [int(w) for w in self._wm.tolist() if w != NONE and w != top]
        return None if not live or self._eff_delay is None else max(live) + self._eff_delay

    @property
    def output_watermark_raw(self) -> int | None:
        return self._combined_prev if self.profile.lag else self._combined

    @property
    def split_watermarks(self) -> dict[Any, Any]:
        """Each split's own watermark (None: not reported yet)."""
        return {k: self._out(None if w == NONE else int(w)) for k, w in zip(self._keys, self._wm.tolist())}

    def idle_splits(self, now: datetime | None = None) -> list[Any]:
        act = self._activity(_now(now))
        return [k for k, a in zip(self._keys, act) if not a]

    def next_idle(self, now: datetime | None = None) -> datetime | None:
        """When the next split that is active at ``now`` goes idle if no row
        comes (None: no ``idle_timeout``, or none active): a no-data batch
        then re-combines without it."""
        if self.idle_timeout is None:  # (refused under combine="max")
            return None
        now = _now(now)
        at = [a for a in self._active_at if a is not None and now - a <= self.idle_timeout]
        return min(at) + self.idle_timeout + timedelta(milliseconds=1) if at else None

    def held_back(self, now: datetime | None = None) -> list[Any]:
        """Splits whose watermark is ahead of the slowest non-idle split by
        more than ``max_drift`` (alignment): paused, the next batch holds
        their rows back."""
        bound = self._align_bound(_now(now))
        return [] if bound is None else self._splits_ahead(bound)

    def releasable(self, now: datetime | None = None) -> bool:
        """Some held row would be read by a batch at ``now`` (its split is
        no longer ahead): a no-data batch then makes progress."""
        if self._held is None:
            return False
        bound = self._align_bound(_now(now))
        return bound is None or self.ended or self._held_releasable(bound)

    def _held_releasable(self, bound: int) -> bool:
        """Some split with held rows is within ``bound``."""
        if self._held is None:
            return False
        split = self._split_codes(self._held)  # a host table: host codes
        codes = np.zeros(1, dtype=np.int64) if split is None else np.unique(np.asarray(split[0]))
        return bool((self._wm[codes] <= bound).any())

    # -- state -----------------------------------------------------------------
    def snapshot(self) -> pa.Table:
        """Per-split state as a table (metadata holds the rest)."""
        meta = {
            "combined": self._combined, "combined_prev": self._combined_prev,
            "late_rows": self.late_rows, "null_rows": self.null_rows,
            "null_rows_dropped": self.null_rows_dropped, "rows_in": self.rows_in,
            "batches": self.batches, "schema": schema_to_text(self._schema), "ended": self.ended,
        }
        keys = [json.dumps(k) for k in self._keys]
        return pa.table(
            {
                "split": pa.array(keys, pa.string()),
                "watermark": pa.array([None if w == NONE else int(w) for w in self._wm.tolist()], pa.int64()),
                "watermark_lag": pa.array([None if w == NONE else int(w) for w in self._wm_lag.tolist()], pa.int64()),
                "active_at": pa.array(self._active_at, pa.timestamp("us", tz="UTC")),
                "periodic_seen": pa.array([None if w == NONE else int(w) for w in self._seen.tolist()], pa.int64()),
                "periodic_count": pa.array(self._count.tolist(), pa.int64()),
            }
        ).replace_schema_metadata({"gpuwm.filter": json.dumps(meta), **self._held_meta()})

    def _held_meta(self) -> dict:
        from .frame import table_to_bytes

        return {} if self._held is None else {"gpuwm.held": table_to_bytes(self._held)}

    def restore(self, snapshots: pa.Table | Sequence[pa.Table]) -> "WatermarkFilter":
        """Restore from one snapshot (exact continuation) or several (rescale:
        each split takes the maximum over all persisted values, and the
        combined watermark the maximum of the persisted ones, so it never goes
        backwards). Counters add up."""
        if isinstance(snapshots, pa.Table):
            snapshots = [snapshots]
        if self.batches:
            raise WatermarkError("restore() must be called on a fresh WatermarkFilter")
        from .frame import bytes_to_table

        combined = combined_prev = None
        held = []
        for snap in snapshots:
            meta = json.loads(snap.schema.metadata[b"gpuwm.filter"])
            if b"gpuwm.held" in snap.schema.metadata:
                held.append(bytes_to_table(snap.schema.metadata[b"gpuwm.held"]))
            schema = schema_from_text(meta.get("schema"))
            if schema is not None:
                self._bind(schema)
            for k in ("late_rows", "null_rows", "null_rows_dropped", "rows_in"):
                setattr(self, k, getattr(self, k) + meta[k])
            self.batches = max(self.batches, meta["batches"])
            self.ended = self.ended or meta.get("ended", False)
            combined = _max_opt(combined, meta["combined"])
            combined_prev = _max_opt(combined_prev, meta["combined_prev"])
            for row in snap.to_pylist():
                key = split_key(json.loads(row["split"]))
                code = self._code[key] if key in self._code else self._add_split(key)
                for arr, col in ((self._wm, "watermark"), (self._wm_lag, "watermark_lag")):
                    if row[col] is not None and (arr[code] == NONE or row[col] > arr[code]):
                        arr[code] = row[col]
                act = row["active_at"]
                if act is not None and (self._active_at[code] is None or act > self._active_at[code]):
                    self._active_at[code] = act
                if row.get("periodic_seen") is not None and row["periodic_seen"] > self._seen[code]:
                    self._seen[code] = row["periodic_seen"]
                self._count[code] = max(int(self._count[code]), row.get("periodic_count") or 0)
        self._combined, self._combined_prev = combined, combined_prev
        self._held = None if not held else pa.concat_tables(held)
        return self


def _max_opt(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


class WatermarkMerger:
    """Combine the watermarks of named inputs (streams, splits, stages).

    The combined watermark is the minimum over inputs that are not idle; it
    is None until every input has reported, and it never decreases. An input
    is idle when it has not reported for longer than ``idle_timeout``
    (processing time); any report makes it active again; when all inputs are
    idle the last value stays. With ``max_drift`` (alignment), inputs whose
    watermark is ahead of the minimum by more than the drift are
    :meth:`held_back`, and :meth:`max_allowed` is the bound they may reach.

    Watermarks may be ints or datetimes; ``max_drift`` is then an int or a
    timedelta accordingly.

    Examples
    --------
    >>> m = WatermarkMerger(["a", "b"], max_drift=1000)
    >>> m.update("a", 42, now=None) is None
    True
    >>> m.update("b", 44), m.max_allowed(), m.update("a", 5000), m.max_allowed(), m.held_back()
    (42, 1042, 44, 1044, ['a'])
    """

    def __init__(self, inputs: Sequence[str], idle_timeout: Any = None, max_drift: Any = None):
        inputs = list(inputs)
        if not inputs:
            raise ConfigError("WatermarkMerger needs at least one input")
        if len(set(inputs)) != len(inputs):
            raise ConfigError(f"WatermarkMerger inputs must be distinct, got {inputs}")
        self.inputs = inputs
        self.idle_timeout = _check_idle(idle_timeout)
        self.max_drift = parse_interval(max_drift)
        self._wm: dict[str, Any] = {}
        self._at: dict[str, datetime] = {}
        self._combined: Any = None

    def update(self, input: str, watermark: Any, now: datetime | None = None) -> Any:
        """Report ``input``'s watermark at processing time ``now``; returns the
        combined watermark (None until every input has reported)."""
        if input not in self.inputs:
            raise ConfigError(f"unknown input {input!r}; inputs are {self.inputs}")
        if watermark is None:
            raise WatermarkError(f"input {input!r} reported a None watermark")
        now = _now(now)
        old = self._wm.get(input)
        if old is None or watermark > old:
            self._wm[input] = watermark
        self._at[input] = now
        return self.combined(now)

    def _live(self, now: datetime) -> list[str]:
        if self.idle_timeout is None:
            return list(self.inputs)
        return [i for i in self.inputs if i in self._at and now - self._at[i] <= self.idle_timeout]

    def idle(self, now: datetime | None = None) -> list[str]:
        live = set(self._live(_now(now)))
        return [i for i in self.inputs if i not in live]

    def combined(self, now: datetime | None = None) -> Any:
        """The combined watermark at processing time ``now``."""
        now = _now(now)
        if len(self._wm) == len(self.inputs):
            live = self._live(now)
            if live:
                cand = min(self._wm[i] for i in live)
                if self._combined is None or cand > self._combined:
                    self._combined = cand
        return self._combined

    def max_allowed(self, now: datetime | None = None) -> Any:
        """Alignment bound: min over non-idle inputs' watermarks + max_drift."""
        if self.max_drift is None:
            return None
        live = [self._wm[i] for i in self._live(_now(now)) if i in self._wm]
        return None if not live else min(live) + self.max_drift

    def held_back(self, now: datetime | None = None) -> list[str]:
        bound = self.max_allowed(now)
        if bound is None:
            return []
        return [i for i in self._live(_now(now)) if i in self._wm and self._wm[i] > bound]

    def snapshot(self) -> dict:
        return {"watermarks": dict(self._wm), "active_at": dict(self._at), "combined": self._combined}

    def restore(self, snap: dict) -> "WatermarkMerger":
        self._wm = dict(snap["watermarks"])
        self._at = dict(snap["active_at"])
        self._combined = snap["combined"]
        return self
