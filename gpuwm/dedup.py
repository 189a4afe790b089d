"""Deduplication within the watermark (Spark's ``dropDuplicatesWithinWatermark``).

The first row of each key is emitted at once; later rows with that key are
dropped (and counted in ``duplicate_rows``) while the key is held. A key is
held from its first row until ``first event time + delay <= W`` for a
drain's watermark ``W``; then it is forgotten, and a later row with that key
is a first row again. State is bounded by the watermark. With no delay
(``delay=None``: Spark's ``dropDuplicates`` without the event-time column
among its keys) a key is held forever, as Spark holds it: state grows with
the distinct keys.

State is a list of *runs*, one per push that kept rows: the kept keys,
distinct and sorted, with the time each expires. A push looks its chunk's
keys up, sorted, in every run (a binary search per key with one key column)
— not a scan of the state —, and a drain forgets a run once all of it
expired, rewrites one that is mostly expired, and merges runs in size
tiers, so that there are few runs and a key is copied O(log state) times. The store saves each run as a
part, so a batch writes its new run and what it rewrote, not the state.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kernels import group_starts, sort_rows
from kernels.dedup import lookup
from kernels.order import merge_order
from kernels.xp import INT64_MAX, mask_index

from . import staging
from .backend import Backend, get_backend
from .drained import Drained
from .errors import ConfigError, SchemaError, StateError, WatermarkError
from .frame import Frame
from .keys import KeyCodec, dictionary_tables, load_dictionaries
from .operator import Capabilities, Operator, OperatorSpec, StageContext, json_options, snapshot_meta
from .runs import Tiers
from .schema import same_schema, schema_from_text, schema_to_text
from .timecol import TimeDomain, check_delay, event_time_domain


@dataclass(frozen=True)
class DedupSpec(OperatorSpec):
    """Deduplicate on ``key`` within ``delay`` of event time ``column``
    (``None``: every key held forever).

    >>> DedupSpec(("id",), "ts", 10).keys()
    ('id',)
    """

    key: tuple[str, ...]
    column: str
    delay: Any

    capabilities: ClassVar[Capabilities] = Capabilities(arrival_order=True, rescale=True)
    kind: ClassVar[str] = "dedup"

    def __post_init__(self) -> None:
        key = (self.key,) if isinstance(self.key, str) else tuple(self.key)
        if not key or not all(isinstance(k, str) for k in key):
            raise ConfigError(f"dedup needs key columns, e.g. key=['id'], got {self.key!r}")
        object.__setattr__(self, "key", key)
        if self.delay is not None:
            object.__setattr__(self, "delay", check_delay(self.delay))

    @classmethod
    def from_json(cls, options: dict, ctx: StageContext) -> "DedupSpec":
        """``{"dedup": {"key": [columns]}}``: within the watermark's delay of the input's event time;
        ``"forever": true``: every key held forever (Spark's ``dropDuplicates`` without the event time)."""
        o = json_options("dedup", options, {"key", "forever"}, ("key",), '{"dedup": {"key": ["id"]}}')
        if not isinstance(o.get("forever", False), bool):
            raise ConfigError(f"dedup's 'forever' is true or false, got {o['forever']!r}")
        if None not in ctx.watermarks and ctx.inputs:
            raise ConfigError("dedup after several inputs is not supported yet (it takes the watermark's delay)")
        return cls(o["key"], ctx.event_time, None if o.get("forever") else ctx.watermark().delay)

    def build(self, profile: Any = None, backend: str | None = None) -> "Dedup":
        return Dedup(self.key, self.column, self.delay, backend=backend)

    def keys(self) -> tuple[str, ...]:
        return self.key

    def output_schema(self, schema: pa.Schema) -> pa.Schema:
        dom = event_time_domain(schema, self.column)
        if self.delay is not None:
            dom.duration(self.delay, "delay")
        for k in self.key:
            if k not in schema.names:
                raise SchemaError(f"dedup key column {k!r} not found; the table has columns {schema.names}")
        return schema


class _Run:
    """Distinct keys, sorted, with the time each expires; ``live``: how many
    had not expired at the last drain."""

    __slots__ = ("keys", "expires", "id", "saved", "live", "lo", "hi")

    def __init__(self, keys: list[Any], expires: Any, rid: int, saved: bool = False, live: int | None = None,
                 bounds: tuple[int, int] | None = None):
        self.keys, self.expires, self.id, self.saved = keys, expires, rid, saved
        self.live = int(expires.shape[0]) if live is None else live
        # bounds on the expiries: lo <= every expiry <= hi (exact where the
        # caller read them; merges and rewrites keep bounds, read nothing)
        if bounds is None:
            bounds = (int(expires.min()), int(expires.max())) if expires.shape[0] else (0, 0)
        self.lo, self.hi = bounds

    @property
    def rows(self) -> int:
        return int(self.expires.shape[0])


class Dedup(Operator, Drained, Tiers):
    """Emit the first row of each key; drop its duplicates until the key expires.

    Parameters
    ----------
    key : key columns (any types; nulls are a value, as in Spark).
    column : event-time column (timestamp or integer).
    delay : how long after its first row a key is held (the watermark's
        delay, as Spark uses it): the key expires once ``ts + delay <= W``;
        ``None``: never (Spark's ``dropDuplicates`` without the event time
        among its keys).
    backend : ``"auto"``, ``"cpu"`` or ``"gpu"``.

    ``push`` returns the first rows, in arrival order; ``drain(W)`` forgets
    the expired keys and returns no rows. Rows with a null event time are
    dropped and counted in ``null_rows``.

    Examples
    --------
    >>> import pyarrow as pa, gpuwm
    >>> d = gpuwm.Dedup(["id"], "ts", delay=10)
    >>> d.push(pa.table({"id": [1, 2, 1], "ts": [5, 6, 7]})).to_pydict()
    {'id': [1, 2], 'ts': [5, 6]}
    >>> d.drain(15).num_rows, d.state_rows       # id 1 expires at 15, id 2 at 16
    (0, 1)
    >>> d.push(pa.table({"id": [1, 2], "ts": [20, 21]})).to_pydict(), d.duplicate_rows
    ({'id': [1], 'ts': [20]}, 2)
    """

    def __init__(self, key: Sequence[str], column: str, delay: Any, *, backend: str | None = None):
        self.spec = DedupSpec(key, column, delay)
        self.key, self.column = list(self.spec.key), column
        self._backend: Backend = get_backend(backend)
        self._schema: pa.Schema | None = None
        self._domain: TimeDomain | None = None
        self._codecs: list[KeyCodec] = []
        self._runs: list[_Run] = []
        self._fresh: set[int] = set()  # runs pushed since the last drain
        self._next_run = 0
        self.duplicate_rows = 0
        self._init_drained()

    def bind(self, schema: pa.Schema) -> "Dedup":
        """Fix the input schema before any row (checked on every push)."""
        if self._schema is not None:
            same_schema(self._schema, schema, "Dedup.push")
            return self
        self.spec.output_schema(schema)
        self._domain = event_time_domain(schema, self.column)
        self._delay = None if self.spec.delay is None else self._domain.duration(self.spec.delay, "delay")
        self._codecs = [KeyCodec(k, schema.field(k).type) for k in self.key]
        self._schema = schema
        self._bind_pending_drain()
        return self

    # -- push ------------------------------------------------------------------
    def push(self, table: pa.Table | Frame) -> pa.Table:
        """The chunk's first rows of keys not held, in arrival order; the
        rest are duplicates (counted)."""
        table = self._chunk(table)
        n = table.num_rows
        if n == 0:
            return self._schema.empty_table()
        b = self._backend
        xp = b.xp
        frame, ts, rows = self._event_times(table, self.column)  # ts: the non-null ones
        codes = [c.encode(xp, frame.columns[c.name], b) for c in self._codecs]
        nnull = 0
        if rows is not None:
            nnull = n - int(rows.shape[0])
            codes = [c[rows] for c in codes]
        # the chunk's keys sorted, each key's first row: the runs are searched
        # with sorted keys (each binary search starts near the last one)
        perm, skeys = sort_rows(xp, codes)
        starts = group_starts(xp, skeys)
        sidx = mask_index(xp, starts, int(xp.count_nonzero(starts)))
        first = perm[sidx]  # positions among the non-null rows
        fkeys = [k[sidx] for k in skeys]
        held = xp.zeros(first.shape[0], dtype=bool)
        for run in self._runs:
            at = lookup(xp, run.keys, fkeys)
            hit = at >= 0
            if self._drained is not None and run.id not in self._fresh and run.lo <= self._drained:
                hit &= run.expires[xp.maximum(at, 0)] > self._drained  # expired by the last drain: not held
            held |= hit
        new = ~held
        # how many are new, and the bounds of their expiries: one read
        exp = ts[first] + self._delay if self._delay is not None else xp.full(first.shape, INT64_MAX, xp.int64)
        kept, lo, hi = staging.read_ints(b, [xp.count_nonzero(new), xp.where(new, exp, INT64_MAX).min(),
                                             xp.where(new, exp, -INT64_MAX).max()]) if first.shape[0] else (0, 0, 0)
        nidx = mask_index(xp, new, kept)
        keep = first[nidx]
        self.duplicate_rows += n - nnull - kept
        if kept:  # the new run: its keys are sorted already
            self._runs.append(_Run([k[nidx] for k in fkeys], exp[nidx], self._next_run, bounds=(lo, hi)))
            self._fresh.add(self._next_run)  # held until the next drain, whatever they expire at
            self._next_run += 1
        keep = xp.sort(keep)  # back in arrival order
        keep = keep if rows is None else rows[keep]
        self.rows_out += kept
        if kept == n:  # no duplicate, no null: the chunk as it came
            return table if isinstance(table, pa.Table) else frame.to_arrow()
        return frame.take(keep).to_arrow()

    # -- drain -----------------------------------------------------------------
    def drain(self, watermark: Any) -> pa.Table:
        """Forget every key that expired by ``watermark`` (``first ts + delay <= W``);
        no rows (a dedup emits on push)."""
        w = self._drain_to(watermark)
        if w is None:
            return pa.table({}) if self._schema is None else self._schema.empty_table()
        b = self._backend
        xp = b.xp
        runs = [r for r in self._runs if r.hi > w]  # else all of it expired: the run goes
        scan = [r for r in runs if r.lo <= w]  # some expired: scanned, their held keys counted in one read
        lives = [r.expires > w for r in scan]
        counts = staging.read_ints(b, [xp.count_nonzero(m) for m in lives])
        for run in runs:
            run.live = run.rows
        for run, live, c in zip(scan, lives, counts):
            run.live = c
            if 0 < 2 * run.live < run.rows:  # mostly expired: rewritten with what is held
                idx = mask_index(xp, live, run.live)
                run.keys, run.expires, run.saved = [k[idx] for k in run.keys], run.expires[idx], False
                run.lo = max(run.lo, w + 1)  # all it holds now expires after w
        runs = [r for r in runs if r.live]  # (bounds are bounds: a run may turn out to hold nothing)
        # size tiers (gpuwm.runs; a push searches each run): a key is copied
        # O(log state) times while it is held
        runs = self._tiered(runs, lambda r: r.live, lambda a, b: self._merge(xp, a, b, w))
        self._runs = runs
        self._fresh = set()
        self._compact_keys()
        return self._schema.empty_table()

    @staticmethod
    def _merge(xp: Any, a: _Run, b: _Run, w: int) -> _Run:
        """Two runs as one, without what expired by ``w`` (distinct keys: a
        key is held in one run at most)."""
        # what each holds (counted at this drain: nothing read back), each still sorted by key
        ia, ib = (mask_index(xp, r.expires > w, r.live) for r in (a, b))
        ka, kb = [k[ia] for k in a.keys], [k[ib] for k in b.keys]
        order = merge_order(xp, ka, kb)  # binary searches, no sort
        keys = [xp.concatenate([x, y])[order] for x, y in zip(ka, kb)]
        exp = xp.concatenate([a.expires[ia], b.expires[ib]])[order]
        return _Run(keys, exp, a.id, bounds=(max(min(a.lo, b.lo), w + 1), max(a.hi, b.hi)))

    def _compact_keys(self) -> None:
        """Forget dictionary keys no run references (code order is kept, so runs stay sorted)."""
        b = self._backend
        for i, c in enumerate(self._codecs):
            new = c.compact_codes(b.xp, [r.keys[i] for r in self._runs], self.state_rows, b.to_numpy)
            for r, codes in zip(self._runs, new or ()):
                r.keys[i] = codes
                r.saved = False

    # -- state -----------------------------------------------------------------
    @property
    def state_rows(self) -> int:
        """Keys held (not expired at the last drain)."""
        return sum(r.live for r in self._runs)

    @property
    def state_bytes(self) -> int:
        return sum(r.expires.nbytes + sum(k.nbytes for k in r.keys) for r in self._runs)

    def counters(self) -> dict[str, int]:
        return {**super().counters(), "duplicate_rows": self.duplicate_rows}

    def snapshot(self, rows: bool = True) -> dict[str, pa.Table]:
        """``{"state": counters and runs (their rows with ``rows=True``), "dict.<col>": key dictionaries}``."""
        meta = {**self._drained_meta(), "schema": schema_to_text(self._schema), "next_run": self._next_run,
                "duplicate_rows": self.duplicate_rows, "runs": [r.id for r in self._runs],
                "fresh": sorted(self._fresh)}
        out = dictionary_tables(self._codecs)
        state = pa.concat_tables([self._run_table(r) for r in self._runs]) if rows and self._runs else \
            pa.table({"run": pa.array([], pa.int64())})
        out["state"] = state.replace_schema_metadata({"gpuwm.dedup": json.dumps(meta)})
        return out

    def rescale_rows(self) -> pa.Table | None:
        """The keys held (by value) and when each expires (``__expires``),
        for a rescale (:func:`gpuwm.partition.rescale`)."""
        if self._schema is None or not self._runs:
            return None
        to_np = self._backend.to_numpy
        w = self._drained
        parts = []
        for r in self._runs:
            exp = to_np(r.expires)
            held = np.ones(exp.shape[0], dtype=bool) if w is None or r.id in self._fresh else exp > w
            cols = [c.decode(to_np(k)[held]) for c, k in zip(self._codecs, r.keys)]
            parts.append(pa.Table.from_arrays(cols + [pa.array(exp[held], pa.int64())],
                                              names=[*self.key, "__expires"]))
        return pa.concat_tables(parts)

    def rescale_absorb(self, rows: pa.Table) -> None:
        """Hold the keys of :meth:`rescale_rows` (distinct: a key was held on one vnode) as one run."""
        b = self._backend
        xp = b.xp
        frame = Frame.from_arrow(rows, b)
        codes = [c.encode(xp, frame.columns[c.name], b) for c in self._codecs]
        order, skeys = sort_rows(xp, codes)
        self._runs.append(_Run(skeys, frame.values("__expires")[0][order], self._next_run))
        self._next_run += 1

    def rescale_meta(self, olds: list, first: bool) -> None:
        Drained.rescale_meta(self, olds, first)
        self.duplicate_rows = sum(o.duplicate_rows for o in olds) if first else 0

    def _run_table(self, run: _Run) -> pa.Table:
        to_np = self._backend.to_numpy
        cols = {"run": np.full(run.rows, run.id, dtype=np.int64)}
        cols.update({f"key.{c.name}": to_np(k) for c, k in zip(self._codecs, run.keys)})
        cols["expires"] = to_np(run.expires)
        return pa.table(cols)

    def state_parts(self) -> dict[str, bool]:
        """One part per run, written when new or rewritten: ``{name: must_write}``."""
        return {f"run.{r.id}": not r.saved for r in self._runs}

    def snapshot_part(self, name: str) -> pa.Table:
        for r in self._runs:
            if f"run.{r.id}" == name:
                return self._run_table(r)
        raise StateError(f"the dedup state holds no run {name!r}")

    def mark_saved(self, written: Sequence[str] = ()) -> None:
        for r in self._runs:
            r.saved = True

    def restore(self, snapshot: dict[str, pa.Table], parts: dict[str, pa.Table] | None = None) -> "Dedup":
        """Continue exactly where the snapshotted operator stopped: from
        ``snapshot()``, or from ``snapshot(rows=False)`` and its parts."""
        if self._schema is not None and (self._runs or self.rows_in):
            raise WatermarkError("restore() must be called on a fresh Dedup")
        state = snapshot["state"]
        meta = snapshot_meta(snapshot, "dedup", "a Dedup")
        schema = schema_from_text(meta["schema"])
        if schema is not None:
            self.bind(schema)
            load_dictionaries(self._codecs, snapshot)
        b = self._backend
        for rid in meta["runs"]:
            if parts is not None:
                if f"run.{rid}" not in parts:
                    raise StateError(f"dedup state is missing its part 'run.{rid}'")
                t = parts[f"run.{rid}"]
            else:
                t = state.filter(pc.equal(state.column("run"), rid))
            keys = [b.asarray(t.column(f"key.{k}").to_numpy()) for k in self.key]
            exp = t.column("expires").to_numpy()
            live = len(exp) if meta["drained"] is None or rid in meta["fresh"] else int((exp > meta["drained"]).sum())
            self._runs.append(_Run(keys, b.asarray(exp), rid, saved=parts is not None, live=live))
        self._load_drained_meta(meta)
        self._next_run = meta["next_run"]
        self._fresh = set(meta["fresh"])
        self.duplicate_rows = meta["duplicate_rows"]
        return self
