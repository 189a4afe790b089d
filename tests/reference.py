"""Plain-Python, row-at-a-time reference of gpuwm's documented semantics.

Written from gpuwm/DESIGN.md's watermark contract and the RFC pseudo-code, not
from the kernels: no numpy, no vectorisation, one row at a time. Event times
are ints (or None for null); rows are tuples whose first field is the event
time.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Callable

INF = float("inf")  # the watermark that ends an input under end_of_input="all"


@dataclass
class RefFilter:
    delay: int  # already including Flink's extra 1
    inclusive: bool
    on_event: bool
    lag: int
    combine: str  # min | max | min-non-idle
    nulls: str  # drop | keep
    idle_timeout: int | None = None  # in the same "now" units as process(now=)
    splits: list = field(default_factory=list)
    wm: dict = field(default_factory=dict)
    wm_lag: dict = field(default_factory=dict)
    active: dict = field(default_factory=dict)
    combined: Any = None
    combined_prev: Any = None
    late: int = 0
    lateness: int = 0  # allowed lateness: a row is tested as ts + lateness
    end_of_input: str = "watermark"  # watermark | all
    ended_all: bool = False  # the input ended at +infinity: every split, new ones too, at INF
    cand_of: Callable[[tuple], Any] | None = None  # a row's watermark candidate (None: none); default ts - delay
    every: int | None = None  # on-periodic: a split's watermark advances after every `every`-th row with a ts
    every_time: int | None = None  # on-periodic: ... in steps of this much event time
    seen: dict = field(default_factory=dict)  # on-periodic rows: the largest candidate so far
    count: dict = field(default_factory=dict)  # ... and the rows with an event time so far

    def _test(self, r: tuple, w: Any, kept: list) -> bool:
        """Keep row ``r`` unless it is late against ``w`` (a null event time:
        kept, or dropped once a watermark exists under nulls='drop'); False
        for a null event time."""
        if r[0] is None:
            if not (self.nulls == "drop" and w is not None):
                kept.append(r)
            return False
        if self._late(r[0], w):
            self.late += 1
        else:
            kept.append(r)
        return True

    def _cand(self, r: tuple) -> Any:
        c = r[0] - self.delay if self.cand_of is None else self.cand_of(r)
        if c is not None and self.every_time:
            c -= c % self.every_time  # held at a multiple of the interval
        return c

    def _late(self, ts: int, w: Any) -> bool:
        if w is None:
            return False
        ts += self.lateness
        return ts <= w if self.inclusive else ts < w

    def process(self, rows: list[tuple], split_of: Callable[[tuple], Any], now: int = 0) -> list[tuple]:
        if self.combine == "max":
            split_of = lambda r: None  # noqa: E731  one global watermark
        for r in rows:
            s = split_of(r)
            if s not in self.wm:
                self.splits.append(s)
                self.wm[s] = INF if self.ended_all else None
                self.wm_lag[s] = INF if self.ended_all else None
                self.active[s] = None
        test = dict(self.wm_lag if self.lag else self.wm)
        kept = []
        running = dict(test)
        if self.every:
            return self._periodic(rows, split_of, now, running)
        for r in rows:
            s = split_of(r)
            if not self._test(r, running[s] if self.on_event else test[s], kept):
                continue
            if self.on_event:
                cand = self._cand(r)
                if cand is not None and (running[s] is None or cand > running[s]):
                    running[s] = cand
        new = dict(self.wm)
        for r in rows:
            ts, s = r[0], split_of(r)
            if ts is None:
                continue
            cand = self._cand(r)
            if cand is not None and (new[s] is None or cand > new[s]):
                new[s] = cand
            self.active[s] = now
        self.wm_lag = dict(self.wm)
        self.wm = new
        for r in rows:  # null rows are activity too
            self.active[split_of(r)] = now
        self.combined_prev = self.combined
        cand = self._combine(now)
        if cand is not None and (self.combined is None or cand > self.combined):
            self.combined = cand
        return kept

    def _periodic(self, rows: list[tuple], split_of: Callable[[tuple], Any], now: int, running: dict) -> list[tuple]:
        """on-periodic in rows: each row is tested against the watermark its
        split emitted last; after every ``every``-th row with an event time
        the split emits the largest candidate so far."""
        kept = []
        for r in rows:
            s = split_of(r)
            self.active[s] = now
            if not self._test(r, running[s], kept):
                continue
            cand = self._cand(r)
            if cand is not None and (self.seen.get(s) is None or cand > self.seen[s]):
                self.seen[s] = cand
            self.count[s] = self.count.get(s, 0) + 1
            if self.count[s] % self.every == 0 and self.seen.get(s) is not None:
                if running[s] is None or self.seen[s] > running[s]:
                    running[s] = self.seen[s]
        self.wm_lag = dict(self.wm)
        self.wm = dict(running)
        self.combined_prev = self.combined
        cand = self._combine(now)
        if cand is not None and (self.combined is None or cand > self.combined):
            self.combined = cand
        return kept

    def _combine(self, now: int) -> Any:
        ws = [self.wm[s] for s in self.splits]
        if self.combine == "max":
            vals = [w for w in ws if w is not None]
            return max(vals) if vals else None
        # min and min-non-idle: a split idle for longer than idle_timeout (if any) does not count
        live = [self.wm[s] for s in self.splits
                if self.idle_timeout is None or (self.active[s] is not None and now - self.active[s] <= self.idle_timeout)]
        return None if (not live or None in live) else min(live)

    def idle(self, now: int) -> list:
        if self.idle_timeout is None or self.combine == "max":
            return []
        return [s for s in self.splits if not (self.active[s] is not None and now - self.active[s] <= self.idle_timeout)]

    def end_input(self) -> Any:
        """The end of the input (after its last batch, a no-data one): under
        ``all`` the watermark is +infinity and every later row is late."""
        if self.end_of_input == "all":
            self.ended_all = True
            for s in self.splits:
                self.wm[s] = self.wm_lag[s] = INF
            self.combined = self.combined_prev = INF
        return self.output_watermark

    @property
    def output_watermark(self) -> Any:
        return self.combined_prev if self.lag else self.combined


@dataclass
class RefAligned:
    """Watermark alignment (FLIP-182's pause and resume) in front of a
    :class:`RefFilter`: each split is a reader with a queue (its held rows,
    then its new rows, in arrival order). Before the batch the bound is the
    slowest non-idle split's watermark plus the drift; a reader whose
    watermark is above it is paused. A running reader reads its rows one by
    one, its watermark moving as it emits (row by row under on-event, at
    every N-th row under on-periodic, not before the batch ends under
    on-batch), and pauses once it is above the bound; what it does not read
    stays queued. Splits with rows (read or queued) are active."""

    f: RefFilter
    drift: int
    held: list = field(default_factory=list)

    def bound(self, now: int) -> Any:
        f = self.f
        live = [f.wm[s] for s in f.splits if f.wm[s] is not None
                and (f.idle_timeout is None or (f.active[s] is not None and now - f.active[s] <= f.idle_timeout))]
        return min(live) + self.drift if live else None

    def process(self, rows: list[tuple], split_of: Callable[[tuple], Any], now: int = 0,
                align: bool = True) -> list[tuple]:
        f = self.f
        queue = self.held + rows
        bound = self.bound(now) if align and not f.ended_all else None
        read, held = [], []
        reader: dict = {}  # each split's watermark as its reader emits it
        count, seen = dict(f.count), dict(f.seen)
        for r in queue:
            s = split_of(r)
            w = reader.get(s, f.wm.get(s))
            if bound is not None and w is not None and w > bound:
                held.append(r)
                continue
            read.append(r)
            if r[0] is None or not f.on_event:  # on-batch: the watermark moves after the batch
                continue
            c = f._cand(r)
            if f.every:  # on-periodic in rows
                if c is not None and (seen.get(s) is None or c > seen[s]):
                    seen[s] = c
                count[s] = count.get(s, 0) + 1
                c = seen.get(s) if count[s] % f.every == 0 else None
            if c is not None and (w is None or c > w):
                reader[s] = c
        self.held = held
        for r in held:  # a split with rows queued is active (not idle): it is paused, not silent
            s = split_of(r)
            if s not in f.wm:
                f.splits.append(s)
                f.wm[s] = f.wm_lag[s] = None
            f.active[s] = now
        return f.process(read, split_of, now)


@dataclass
class RefSort:
    inclusive: bool
    key_of: Callable[[tuple], tuple]
    buf: list = field(default_factory=list)
    drained: Any = None
    seq: int = 0
    late: int = 0
    nulls: int = 0
    late_out: list = field(default_factory=list)  # the rows dropped as late, in the order dropped

    def _below(self, ts: int, w: int) -> bool:
        return ts <= w if self.inclusive else ts < w

    def push(self, rows: list[tuple]) -> None:
        for r in rows:
            if r[0] is None:
                self.nulls += 1
                continue
            if self.drained is not None and self._below(r[0], self.drained):
                self.late += 1
                self.late_out.append(r)
                continue
            self.buf.append((r[0], self.key_of(r), self.seq, r))
            self.seq += 1

    def drain(self, w: int) -> list[tuple]:
        self.drained = w
        out = sorted((e for e in self.buf if self._below(e[0], w)), key=lambda e: (e[0], e[1], e[2]))
        self.buf = [e for e in self.buf if not self._below(e[0], w)]
        return [e[3] for e in out]

    def flush(self) -> list[tuple]:
        """Everything buffered, ordered; rows at or before the newest
        released event time are late afterwards."""
        if not self.buf:
            return []
        top = max(e[0] for e in self.buf)
        out = sorted(self.buf, key=lambda e: (e[0], e[1], e[2]))
        self.buf = []
        self.drained = top if self.inclusive else top + 1
        return [e[3] for e in out]


def _agg(fn: str, vals: list, star: bool) -> Any:
    """``vals`` in arrival order (first / last: of the rows, a null too)."""
    if fn == "count":
        return len(vals) if star else sum(v is not None for v in vals)
    if fn in ("first", "last"):
        return vals[0 if fn == "first" else -1] if vals else None
    vs = [v for v in vals if v is not None]
    if fn.endswith("_distinct"):
        fn, vs = fn.removesuffix("_distinct"), list(set(vs))
        if fn == "count":
            return len(vs)
    if not vs:
        return None
    if fn == "sum":
        return sum(vs)
    if fn == "min":
        return min(vs)
    if fn == "max":
        return max(vs)
    return sum(vs) / len(vs)


@dataclass
class RefWindow:
    size: int
    slide: int
    close_minus_one: bool
    key_of: Callable[[tuple], tuple]
    aggs: dict  # out -> (index into row or "*", fn)
    on_update: bool = False
    complete: bool = False  # Spark's complete mode: no window closes, a drain gives every window
    state: dict = field(default_factory=dict)  # (start, key) -> list of rows
    drained: Any = None
    late: int = 0
    nulls: int = 0
    late_out: list = field(default_factory=list)  # the rows dropped as late (once per closed window)

    def _starts(self, ts: int) -> list[int]:
        first = ts - (ts % self.slide)
        return [first - j * self.slide for j in range(self.size // self.slide)]

    def _closed(self, start: int, w: int) -> bool:
        return start + self.size <= w + (1 if self.close_minus_one else 0)

    def _row(self, start: int, key: tuple, rows: list) -> tuple:
        vals = []
        for _, (idx, fn) in self.aggs.items():
            col = [None] * len(rows) if idx == "*" else [r[idx] for r in rows]
            vals.append(_agg(fn, col, idx == "*"))
        return (start, start + self.size, *key, *vals)

    def push(self, rows: list[tuple]) -> list[tuple] | None:
        changed = set()
        for r in rows:
            if r[0] is None:
                self.nulls += 1
                continue
            for s in self._starts(r[0]):
                if self.drained is not None and self._closed(s, self.drained):
                    self.late += 1
                    self.late_out.append(r)
                    continue
                k = (s, self.key_of(r))
                self.state.setdefault(k, []).append(r)
                changed.add(k)
        if not self.on_update:
            return None
        return [self._row(s, k, self.state[(s, k)]) for s, k in sorted(changed, key=_none_first)]

    def drain(self, w: int) -> list[tuple]:
        if self.complete:
            return [self._row(s, k, self.state[(s, k)]) for s, k in sorted(self.state, key=_none_first)]
        self.drained = w
        closed = sorted((k for k in self.state if self._closed(k[0], w)), key=_none_first)
        out = [self._row(s, k, self.state.pop((s, k))) for s, k in closed]
        return [] if self.on_update else out


def _none_first(k: tuple) -> tuple:
    s, key = k
    return (s, tuple((v is not None, v if v is not None else 0) for v in key))


@dataclass
class RefSession:
    """Session windows, one row at a time per key (the documented batch rule:
    a chunk's rows merge with each other and the open sessions first; a
    session left ending at or before the last drain is late)."""

    gap: int
    close_minus_one: bool
    key_of: Callable[[tuple], tuple]
    aggs: dict  # out -> (index into row or "*", fn)
    complete: bool = False  # Spark's complete mode: no session closes, a drain gives every session
    sessions: dict = field(default_factory=dict)  # key -> [[start, end, rows], ...]
    drained: Any = None
    late: int = 0
    nulls: int = 0
    late_out: list = field(default_factory=list)  # the rows of sessions dropped as late

    @property
    def _c(self) -> int:
        return 1 if self.close_minus_one else 0

    def push(self, rows: list[tuple]) -> None:
        by_key: dict = {}
        for r in rows:
            if r[0] is None:
                self.nulls += 1
                continue
            by_key.setdefault(self.key_of(r), []).append(r)
        for key, rs in by_key.items():
            items = [(s, e, list(rr)) for s, e, rr in self.sessions.get(key, [])]
            items += [(r[0], r[0] + self.gap, [r]) for r in rs]
            items.sort(key=lambda x: x[0])
            merged: list = []
            for s, e, rr in items:
                if merged and s <= merged[-1][1]:  # overlapping or touching: one session
                    merged[-1][1] = max(merged[-1][1], e)
                    merged[-1][2] += rr
                else:
                    merged.append([s, e, rr])
            keep = []
            for m in merged:
                if self.drained is not None and m[1] - self._c <= self.drained:
                    self.late += len(m[2])
                    self.late_out += m[2]
                else:
                    keep.append(m)
            self.sessions[key] = keep

    def drain(self, w: int) -> list[tuple]:
        if not self.complete:
            self.drained = w
        out = []
        for key in list(self.sessions):
            for s, e, rr in self.sessions[key]:
                if self.complete or e - self._c <= w:
                    vals = []
                    for _, (idx, fn) in self.aggs.items():
                        col = [None] * len(rr) if idx == "*" else [r[idx] for r in rr]
                        vals.append(_agg(fn, col, idx == "*"))
                    out.append((s, e, *key, *vals))
            self.sessions[key] = [x for x in self.sessions[key] if self.complete or x[1] - self._c > w]
            if not self.sessions[key]:
                del self.sessions[key]
        return sorted(out, key=lambda r: (r[0], tuple((v is not None, v if v is not None else 0)
                                                      for v in r[2:2 + self._nkeys(out)])))

    def _nkeys(self, out: list[tuple]) -> int:
        return len(out[0]) - 2 - len(self.aggs) if out else 0

    @property
    def open_sessions(self) -> int:
        return sum(len(v) for v in self.sessions.values())


@dataclass
class RefDedup:
    """Spark's dropDuplicatesWithinWatermark, one row at a time: a key's
    first row is kept and holds the key until ``ts + delay <= W`` for a
    drain's ``W``; rows with the key meanwhile are duplicates. Null event
    times are dropped; a null key is a value like any other. ``delay``
    None: a key is held forever (Spark's dropDuplicates without the event
    time among its keys)."""

    delay: int | None
    key_of: Callable[[tuple], tuple]
    held: dict = field(default_factory=dict)  # key -> expires
    dups: int = 0
    nulls: int = 0

    def push(self, rows: list[tuple]) -> list[tuple]:
        out = []
        for r in rows:
            if r[0] is None:
                self.nulls += 1
            elif self.key_of(r) in self.held:
                self.dups += 1
            else:
                self.held[self.key_of(r)] = None if self.delay is None else r[0] + self.delay
                out.append(r)
        return out

    def drain(self, w: int) -> None:
        self.held = {k: e for k, e in self.held.items() if e is None or e > w}


@dataclass
class RefOver:
    """Over-window functions, one row at a time, on an ordered stream: rows
    ``(ts, key, v, id)`` ordered by ``(ts, id)``; per key, lag/lead of ``v``,
    row_number, and running sum/count/min/max of ``v`` (nulls ignored; null
    while no value). A row goes out once its ``ahead``-th successor in the
    key has arrived (or at :meth:`flush`), in arrival order."""

    funcs: dict  # output -> (fn, n)
    keyed: bool = True
    rows: dict = field(default_factory=dict)  # key -> [row dict in order]
    waiting: list = field(default_factory=list)  # (arrival, key, position)
    arrived: int = 0

    @property
    def ahead(self) -> int:
        return max([n for fn, n in self.funcs.values() if fn == "lead"], default=0)

    def push(self, batch: list[tuple]) -> list[tuple]:
        order = sorted(range(len(batch)), key=lambda i: (batch[i][0], batch[i][3]))
        for i in order:
            ts, k, v, rid = batch[i]
            key = k if self.keyed else None
            hist = self.rows.setdefault(key, [])
            hist.append({"row": batch[i], "arrival": self.arrived + i})
            self.waiting.append((self.arrived + i, key, len(hist) - 1))
        self.arrived += len(batch)
        return self._emit(final=False)

    def flush(self) -> list[tuple]:
        return self._emit(final=True)

    def _emit(self, final: bool) -> list[tuple]:
        out, keep = [], []
        for arrival, key, p in self.waiting:
            hist = self.rows[key]
            if final or p + self.ahead < len(hist):
                out.append((arrival, self._values(hist, p)))
            else:
                keep.append((arrival, key, p))
        self.waiting = keep
        return [v for _, v in sorted(out)]

    def _values(self, hist: list, p: int) -> tuple:
        vals = [h["row"][2] for h in hist[: p + 1]]
        seen = [x for x in vals if x is not None]
        res = []
        for fn, n in self.funcs.values():
            if fn == "lag":
                res.append(hist[p - n]["row"][2] if p - n >= 0 else None)
            elif fn == "lead":
                res.append(hist[p + n]["row"][2] if p + n < len(hist) else None)
            elif fn == "row_number" or fn == "count*":
                res.append(p + 1)
            elif fn == "count":
                res.append(len(seen))
            elif fn == "sum":
                res.append(sum(seen) if seen else None)
            elif fn == "min":
                res.append(min(seen) if seen else None)
            else:
                res.append(max(seen) if seen else None)
        return (*hist[p]["row"], *res)


@dataclass
class RefIntervalJoin:
    """A stream-stream interval join, one row at a time, batch by batch:
    rows ``(key, ts, id)``; left ``l`` and right ``r`` match when their keys
    are equal and not None and ``l.ts + lo <= r.ts <= l.ts + hi``. A drain
    joins the batch's new rows with the other side's state and with each
    other, keeps them, then at watermark ``w`` deletes left rows with
    ``ts <= w - hi - margin`` and right rows with ``ts <= w + lo - margin``
    (Spark's state watermarks), emitting the unmatched ones of an outer
    side with None for the other. Rows with ts None, or behind the last
    drain's watermark, never enter."""

    lo: int
    hi: int
    how: str
    inclusive: bool = True
    margin: int = 1
    keyed: bool = True  # False: the times alone decide (a join with no key pair), a null key too
    #: the residual condition: (left row position, op, right row position) comparisons a pair must pass
    where: tuple = ()
    left: list = field(default_factory=list)  # [row, matched]
    right: list = field(default_factory=list)
    new_left: list = field(default_factory=list)
    new_right: list = field(default_factory=list)
    drained: Any = None
    late: int = 0
    nulls: int = 0

    def push(self, side: str, rows: list[tuple]) -> None:
        for r in rows:
            if r[1] is None:
                self.nulls += 1
            elif self.drained is not None and (r[1] <= self.drained if self.inclusive else r[1] < self.drained):
                self.late += 1
            elif self.keyed and r[0] is None and self.how not in (("left", "full") if side == "left"
                                                                   else ("right", "full")):
                pass  # a null key never matches: only an outer side keeps it (for its null row)
            else:
                (self.new_left if side == "left" else self.new_right).append([r, False])

    def _match(self, left: list, right: list) -> bool:
        (lk, lt, _), (rk, rt, _) = left[0], right[0]
        ops = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "=": operator.eq,
               "!=": operator.ne}
        return (not self.keyed or lk is not None and lk == rk) \
            and (self.lo is None or lt + self.lo <= rt) and (self.hi is None or rt <= lt + self.hi) \
            and all(ops[op](left[0][a], right[0][b]) for a, op, b in self.where)

    def drain(self, w: Any) -> list[tuple]:
        out = []
        for lrow in self.new_left:
            for rrow in self.right + self.new_right:
                if self._match(lrow, rrow):
                    out.append(lrow[0] + rrow[0])
                    lrow[1] = rrow[1] = True
        for rrow in self.new_right:
            for lrow in self.left:
                if self._match(lrow, rrow):
                    out.append(lrow[0] + rrow[0])
                    lrow[1] = rrow[1] = True
        self.left += self.new_left
        self.right += self.new_right
        self.new_left, self.new_right = [], []
        if w is not None:
            self.drained = w
            keep_l, keep_r = [], []
            for lrow in self.left:  # no upper bound: a left row is kept
                if self.hi is not None and lrow[0][1] <= w - self.hi - self.margin:
                    if not lrow[1] and self.how in ("left", "full"):
                        out.append(lrow[0] + (None, None, None))
                else:
                    keep_l.append(lrow)
            for rrow in self.right:
                if self.lo is not None and rrow[0][1] <= w + self.lo - self.margin:
                    if not rrow[1] and self.how in ("right", "full"):
                        out.append((None, None, None) + rrow[0])
                else:
                    keep_r.append(rrow)
            self.left, self.right = keep_l, keep_r
        return out

    @property
    def state_rows(self) -> int:
        return len(self.left) + len(self.right)


@dataclass
class RefWindowJoin:
    """A window join, one row at a time: rows ``(key, ts, id)``; a row is in
    every window ``[s, s + size)`` with ``s`` a multiple of ``slide`` and
    ``s <= ts < s + size``; a drain at ``w`` closes windows with
    ``s + size - close_minus_one <= w``: the pairs of equal non-None keys of
    a closed window go out as ``(s, s + size) + left + right``, an outer
    side's rows without a partner there with None, and the window's rows
    leave. A row in a window closed at the last drain is late there.
    ``on_match`` (Spark's): a pair goes out at the first drain after both
    its rows came, and at close only an outer side's rows that never
    matched."""

    size: int
    slide: int
    how: str
    close_minus_one: int = 0
    on_match: bool = False
    keyed: bool = True  # False: the window alone decides (a join with no key pair), a null key too
    rows: dict = field(default_factory=lambda: {"left": [], "right": []})  # side -> [[row, start, matched, new]]
    drained: Any = None
    late: int = 0
    nulls: int = 0

    def _closed(self, s: int, w: int) -> bool:
        return s + self.size - self.close_minus_one <= w

    def _same(self, left: tuple, right: tuple) -> bool:
        return not self.keyed or left[0] is not None and left[0] == right[0]

    def push(self, side: str, rows: list[tuple]) -> None:
        for r in rows:
            if r[1] is None:
                self.nulls += 1
                continue
            s = r[1] - r[1] % self.slide
            while s > r[1] - self.size:
                if self.drained is not None and self._closed(s, self.drained):
                    self.late += 1
                elif not self.keyed or r[0] is not None or self.how in (("left", "full") if side == "left"
                                                                       else ("right", "full")):
                    self.rows[side].append([r, s, False, True])
                s -= self.slide

    def drain(self, w: Any) -> list[tuple]:
        out = []
        if self.on_match:  # every pair with a row new since the last drain, once
            for lrow in self.rows["left"]:
                for rrow in self.rows["right"]:
                    if (lrow[3] or rrow[3]) and lrow[1] == rrow[1] and self._same(lrow[0], rrow[0]):
                        out.append((lrow[1], lrow[1] + self.size) + lrow[0] + rrow[0])
                        lrow[2] = rrow[2] = True
            for side in self.rows.values():
                for row in side:
                    row[3] = False
        if w is None:
            return out
        self.drained = w
        closed = sorted({s for side in self.rows.values() for _, s, _, _ in side if self._closed(s, w)})
        for s in closed:
            left = [(r, m) for r, ws, m, _ in self.rows["left"] if ws == s]
            right = [(r, m) for r, ws, m, _ in self.rows["right"] if ws == s]
            hit_l, hit_r = {i for i, (_, m) in enumerate(left) if m}, {j for j, (_, m) in enumerate(right) if m}
            for i, (lr, _) in enumerate(left):
                for j, (rr, _) in enumerate(right):
                    if self._same(lr, rr):
                        if not self.on_match:
                            out.append((s, s + self.size) + lr + rr)
                        hit_l.add(i)
                        hit_r.add(j)
            if self.how in ("left", "full"):
                out += [(s, s + self.size) + lr + (None, None, None) for i, (lr, _) in enumerate(left)
                        if i not in hit_l]
            if self.how in ("right", "full"):
                out += [(s, s + self.size) + (None, None, None) + rr for j, (rr, _) in enumerate(right)
                        if j not in hit_r]
        for side in self.rows:
            self.rows[side] = [row for row in self.rows[side] if not self._closed(row[1], w)]
        return out

    @property
    def state_rows(self) -> int:
        return sum(len(v) for v in self.rows.values())


@dataclass
class RefTopN:
    """Rows ranked <= n per (tumbling window of r[0], key_of(r)) by ``order``
    (``[(index, descending, nulls_first)]``, ties by arrival), emitted with
    their rank when the window closes."""

    size: int
    key_of: Callable[[tuple], tuple]
    order: list
    n: int
    fn: str = "row_number"
    #: r[0] is not an event time but the partition's close time (TopN's ``until``): closed once r[0] <= w
    until: bool = False
    #: TopN's ``ttl``: a partition is the rows of one key; it closes once its greatest r[0] + ttl <= w
    ttl: int | None = None
    state: dict = field(default_factory=dict)  # (window, key) -> rows in arrival order
    drained: Any = None
    late: int = 0
    nulls: int = 0

    def push(self, rows: list[tuple]) -> None:
        for r in rows:
            if r[0] is None:
                self.nulls += 1
                continue
            w = r[0] + self.ttl if self.ttl is not None else r[0] if self.until else r[0] // self.size
            if self.drained is not None and self._closes(w, self.drained):
                self.late += 1
                continue
            if self.ttl is not None:  # the key's open partition, its close time moved to its latest row's
                old = next((p for p in self.state if p[1] == self.key_of(r)), None)
                rows_ = self.state.pop(old) if old is not None else []
                self.state[(max(w, old[0]) if old is not None else w, self.key_of(r))] = rows_ + [r]
                continue
            self.state.setdefault((w, self.key_of(r)), []).append(r)

    def _closes(self, w: int, watermark: int) -> bool:
        return w <= watermark if self.until or self.ttl is not None else (w + 1) * self.size <= watermark

    def _sort_key(self, r: tuple) -> tuple:
        out = []
        for i, desc, nulls_first in self.order:
            v = r[i]
            out += [(0 if nulls_first else 1) if v is None else (1 if nulls_first else 0),
                    0 if v is None else (-v if desc else v)]
        return tuple(out)

    def drain(self, w: int) -> list[tuple]:
        self.drained = w
        out = []
        for part in [p for p in self.state if self._closes(p[0], w)]:
            rows = sorted(self.state.pop(part), key=self._sort_key)  # stable: ties by arrival
            keys = [self._sort_key(r) for r in rows]
            for j, r in enumerate(rows):
                rank = {"row_number": j + 1, "rank": keys.index(keys[j]) + 1,
                        "dense_rank": len(set(keys[:j + 1]))}[self.fn]
                if rank <= self.n:
                    out.append((*r, rank))
        return out
