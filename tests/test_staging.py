"""Pinned staging (#17, :mod:`gpuwm.staging`): a Frame's fixed-width columns
cross to the device in one copy and back in one, whatever their number,
types, nulls and offsets; the pinned ring is reused without a batch's bytes
reaching another's columns."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpuwm
from gpuwm import staging
from gpuwm.frame import Frame

from . import sync_sim
from .sync_sim import COUNTS

TYPES = [pa.bool_(), pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint64(), pa.float32(),
         pa.float64(), pa.timestamp("us"), pa.timestamp("ns", tz="UTC"), pa.date32(), pa.time64("us"),
         pa.duration("ms"), pa.string()]


def _column(rng: np.random.Generator, t: pa.DataType, n: int, nulls: bool) -> pa.Array:
    mask = rng.random(n) < 0.3 if nulls else None
    if pa.types.is_boolean(t):
        vals = rng.random(n) < 0.5
    elif pa.types.is_floating(t):
        vals = rng.normal(size=n).astype(t.to_pandas_dtype())
    elif pa.types.is_string(t):
        return pa.array([f"s{x}" for x in rng.integers(0, 100, n)], t, mask=mask)
    elif pa.types.is_integer(t):
        info = np.iinfo(t.to_pandas_dtype())
        vals = rng.integers(info.min, info.max, n, dtype=t.to_pandas_dtype(), endpoint=True)
    else:
        width = 32 if pa.types.is_date32(t) else 64
        vals = rng.integers(0, 10**12 if width == 64 else 10**5, n)
    return pa.array(vals, mask=mask).cast(t) if not pa.types.is_date32(t) else \
        pa.array(vals.astype(np.int32), mask=mask).cast(t)


def _table(seed: int, n: int, ncols: int, nulls: bool) -> pa.Table:
    rng = np.random.default_rng(seed)
    types = [TYPES[i] for i in rng.integers(0, len(TYPES), ncols)]
    return pa.table({f"c{i}": _column(rng, t, n, nulls) for i, t in enumerate(types)})


@pytest.fixture
def counting(monkeypatch):
    sync_sim.install(monkeypatch)
    return COUNTS


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 300), ncols=st.integers(1, 12), nulls=st.booleans(),
       cut=st.integers(0, 17), chunks=st.booleans())
def test_round_trip_is_one_copy_each_way(counting, seed, n, ncols, nulls, cut, chunks):
    """Any mix of fixed-width types, nulls, slice offsets (not multiples of
    8: bitmaps start mid-byte) and chunked columns comes back equal, in one
    host->device copy and one device->host copy; gathers and filters on the
    device in between read nothing back but the filter's count."""
    t = _table(seed, n + cut, ncols, nulls).slice(cut)
    if chunks and t.num_rows > 2:
        t = pa.concat_tables([t.slice(0, t.num_rows // 2), t.slice(t.num_rows // 2)])
    b = gpuwm.get_backend("gpu")
    fixed = sum(1 for f in t.schema if not pa.types.is_string(f.type))
    COUNTS.reset()
    f = Frame.from_arrow(t, b)
    assert COUNTS.h2d == (1 if fixed and t.num_rows else 0) and COUNTS.syncs == 0
    COUNTS.reset()
    assert f.to_arrow().equals(t.combine_chunks())
    assert COUNTS.d2h == (1 if fixed and t.num_rows else 0) and COUNTS.syncs == 0
    keep = np.random.default_rng(seed).random(t.num_rows) < 0.5
    COUNTS.reset()
    got = f.filter(b.asarray(keep)).to_arrow()
    assert got.equals(t.filter(pa.array(keep)).combine_chunks())
    assert COUNTS.syncs == 1  # the count, once for every column


def test_null_counts_are_arrows_not_the_devices(counting):
    """Output validity comes back as bitmaps and Arrow counts the nulls on the
    host: no per-column count is read from the device."""
    t = pa.table({"a": pa.array([1, None, 3, None, 5]), "b": pa.array([None, 2.0, 3.0, 4.0, None]),
                  "c": pa.array([True, False, None, True, True]), "d": pa.array([1, 2, 3, 4, 5])})
    f = Frame.from_arrow(t, gpuwm.get_backend("gpu"))
    COUNTS.reset()
    out = f.to_arrow()
    assert COUNTS.snapshot() == {"syncs": 0, "d2h": 1, "h2d": 0}
    assert [c.null_count for c in out.columns] == [2, 2, 1, 0]
    assert out.equals(t)


class _Event:
    def __init__(self, log: list, i: int) -> None:
        self.log, self.i = log, i

    def synchronize(self) -> None:
        self.log.append(self.i)


def test_ring_reuses_buffers_after_their_copy_and_grows(monkeypatch):
    """Uploads take the ring's slots in turn; a slot is written again only
    after waiting for the copy that last read it; a larger batch grows the
    slot; no batch's bytes show in another's columns."""
    log: list = []
    uploads: list = []

    class Gpu(sync_sim.CountingGpu):
        def upload(self, host):
            uploads.append(host.__array_interface__["data"][0])
            return np.array(host, copy=True).view(sync_sim.Dev), _Event(log, len(uploads))

    monkeypatch.setattr(gpuwm.backend, "gpu_available", lambda: True)
    monkeypatch.setattr(gpuwm.backend, "_gpu_backend", lambda: Gpu("gpu", sync_sim.SIM_XP, None))
    monkeypatch.setattr(staging, "RING", staging.PinnedRing())
    b = gpuwm.get_backend("gpu")
    tables = [pa.table({"x": pa.array(np.full(n, i, dtype=np.int64))}) for i, n in enumerate([10, 10, 10, 300_000])]
    frames = [Frame.from_arrow(t, b) for t in tables]
    assert log == [1, 2]  # the 3rd upload waited for the 1st (its slot), the 4th for the 2nd
    assert uploads[0] == uploads[2] and uploads[0] != uploads[1]  # two slots, reused
    slots, _ = staging.RING._slots()
    assert [s.buf.shape[0] for s in slots] == [1 << 20, 300_000 * 8]  # the 4th needed more than 1 MiB: its slot grew
    for f, t in zip(frames, tables):
        assert f.to_arrow().equals(t)


def test_cpu_backend_is_zero_copy():
    """The CPU backend does not stage: its columns are views of Arrow's buffers."""
    t = pa.table({"x": pa.array(np.arange(1000, dtype=np.int64))})
    f = Frame.from_arrow(t, gpuwm.get_backend("cpu"))
    assert np.shares_memory(f.columns["x"].values, np.frombuffer(t.column(0).chunk(0).buffers()[1], np.int64))


def test_layout_aligns_every_part():
    """Every part starts at a multiple of 64 bytes (Arrow's alignment, and
    views of any width on the device)."""
    got: list = []

    class B(sync_sim.CountingGpu):
        def upload(self, host):
            got.append(host.shape[0])
            return np.array(host, copy=True).view(sync_sim.Dev), None

    b = B("gpu", sync_sim.SIM_XP, None)
    parts = [np.arange(n, dtype=np.uint8) for n in (1, 63, 64, 65, 0)]
    dev = staging.upload(b, [parts[0], None, *parts[1:]])
    assert got == [64 + 64 + 64 + 128 + 0]
    assert dev[1] is None
    for d, p in zip([dev[0], *dev[2:]], parts):
        assert np.array_equal(np.asarray(d), p)
        assert (d.__array_interface__["data"][0] - dev[0].__array_interface__["data"][0]) % staging.ALIGN == 0


@pytest.mark.parametrize("keep_late", [False, True])
def test_aggregates_move_only_the_columns_they_read(monkeypatch, keep_late):
    """A window or session aggregate given host Arrow on a GPU uploads its
    time, key and aggregated columns only — unless it keeps late rows, which
    are whole rows; the output is the same either way."""
    sent: list = []

    class Gpu(sync_sim.CountingGpu):
        def upload(self, host):
            sent.append(host.shape[0])
            return super().upload(host)

    monkeypatch.setattr(gpuwm.backend, "gpu_available", lambda: True)
    monkeypatch.setattr(gpuwm.backend, "_gpu_backend", lambda: Gpu("gpu", sync_sim.SIM_XP, None))
    monkeypatch.setattr("kernels.xp.CUPY_BRANCHES", True)
    n = 10_000
    rng = np.random.default_rng(3)
    t = pa.table({"t": np.sort(rng.integers(0, 1000, n)), "k": rng.integers(0, 50, n), "v": rng.random(n),
                  **{f"wide{i}": rng.random(n) for i in range(8)}})
    for win in (gpuwm.Tumble("t", 10), gpuwm.Session("t", 3)):
        outs = []
        for backend in ("cpu", "gpu"):
            a = gpuwm.WindowAggregate(win, by=["k"], aggs={"n": ("*", "count"), "m": ("v", "max")}, backend=backend)
            if keep_late:
                a.keep_late()
            sent.clear()
            a.push(t)
            outs.append(a.drain(2000))
            if backend == "gpu":
                assert len(sent) == 1
                assert (sent[0] >= 11 * 8 * n) == keep_late  # 3 columns of 8 bytes, or all 11
        assert outs[0].equals(outs[1])


def test_many_batches_through_the_ring_stay_intact(backend):
    """Batches of growing and shrinking size one after another, every Frame
    kept: none shows another's bytes (on a real GPU: the ring's async copies
    and its reuse after their events), and outputs survive later batches."""
    b = gpuwm.get_backend(backend)
    tables = [_table(seed, n, 5, nulls=True) for seed, n in enumerate([1000, 50_000, 10, 200_000, 3, 70_000])]
    frames = [Frame.from_arrow(t, b) for t in tables]
    outs = [f.to_arrow() for f in frames]
    more = [Frame.from_arrow(t, b).to_arrow() for t in reversed(tables)]  # the ring's slots written again
    for t, out, again in zip(tables, outs, reversed(more)):
        assert out.equals(t) and again.equals(t)


def test_upload_arrays_leaves_device_arrays_where_they_are():
    """A Frame's split codes are already on the device: upload_arrays keeps
    them as they are and uploads the host arrays beside them. CuPy refuses
    the implicit device -> host conversion that a host copy would make (the
    on-event filter over a device Frame failed so on an H200)."""
    from .conftest import HostGpu

    class DeviceArray:  # what CuPy's ndarray does when NumPy asks for its values
        def __array__(self, *a, **k):
            raise TypeError("Implicit conversion to a NumPy array is not allowed")

    b = HostGpu("gpu", np, None)
    dev = DeviceArray()
    host = np.array([[1, 2], [3, 4]], dtype=np.int32)
    out = staging.upload_arrays(b, [host, dev, None, np.array([7], dtype=np.int64)])
    assert out[1] is dev and out[2] is None
    assert out[0].dtype == np.int32 and out[0].tolist() == [[1, 2], [3, 4]] and out[3].tolist() == [7]
