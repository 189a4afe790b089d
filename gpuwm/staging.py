"""Pinned staging (#17): a batch's fixed-width columns cross the bus in one
copy each way.

In: every fixed-width column's data buffer and validity bitmap (Arrow's
bytes as they are: bit-packed booleans and bitmaps unpack on the device)
are packed, each at a 64-byte aligned offset, into one page-locked host
buffer, which goes to the device in one asynchronous copy; the columns are
views of that one device buffer. The host buffers are a ring of two per
thread, reused across batches and grown as needed: a batch packs into one
while the copy of the batch before may still be running from the other
(a CUDA event says when a buffer is free again).

Out: the output's columns (values, bit-packed booleans and validity) are
written into one device buffer, which comes back in one copy into a
page-locked block from CuPy's pinned pool; the Arrow buffers are views of
that block, so it returns to the pool when the last of them is dropped.
Null counts are left for Arrow to count on the host (``null_count=-1``),
so no column's count is read from the device.

The backend does the copies (:meth:`Backend.empty_pinned`,
:meth:`Backend.upload`, :meth:`Backend.download`); this module only lays the
bytes out, so the CPU tests (gpu-sim) run the same layout the GPU gets.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

ALIGN = 64  #: every part starts at a multiple of this (Arrow's alignment, and coalesced device loads)
_PAR_BYTES = 4 << 20  #: host packing copies are split into pieces of this size over the thread pool


def aligned(n: int) -> int:
    return (n + ALIGN - 1) & ~(ALIGN - 1)


def _bitmap_bytes(buf: pa.Buffer, offset: int, n: int) -> np.ndarray:
    """The bytes of an Arrow bitmap that hold bits ``offset .. offset+n``."""
    first, stop = offset // 8, (offset + n + 7) // 8
    return np.frombuffer(buf, dtype=np.uint8, count=stop)[first:]


def input_parts(arr: pa.Array, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray | None]:
    """The host bytes of a fixed-width Arrow array to copy to the device:
    (data, validity bitmap or None). Booleans stay bit-packed."""
    n, off, bufs = len(arr), arr.offset, arr.buffers()
    if dtype == np.dtype(bool):
        data = _bitmap_bytes(bufs[1], off, n)
    else:
        data = np.frombuffer(bufs[1], dtype=dtype, count=off + n)[off:].view(np.uint8)
    valid = _bitmap_bytes(bufs[0], off, n) if arr.null_count else None
    return data, valid


class _Slot:
    __slots__ = ("buf", "event")

    def __init__(self) -> None:
        self.buf: np.ndarray | None = None
        self.event: Any = None  #: the copy that last read ``buf`` (None: none pending)


class PinnedRing:
    """Page-locked host buffers reused across batches: ``SLOTS`` per thread,
    taken in turn; a slot is written only after the copy that last read it
    has finished."""

    SLOTS = 2

    def __init__(self) -> None:
        self._local = threading.local()

    def _slots(self) -> tuple[list[_Slot], list[int]]:
        loc = self._local
        if not hasattr(loc, "slots"):
            loc.slots, loc.next = [_Slot() for _ in range(self.SLOTS)], [0]
        return loc.slots, loc.next

    def take(self, backend: Any, nbytes: int) -> _Slot:
        slots, nxt = self._slots()
        slot = slots[nxt[0]]
        nxt[0] = (nxt[0] + 1) % len(slots)
        if slot.event is not None:
            backend.wait(slot.event)
            slot.event = None
        if slot.buf is None or slot.buf.shape[0] < nbytes:
            # a quarter more than before at least (few regrowths), not double: it is page-locked memory
            size = max(nbytes, 0 if slot.buf is None else slot.buf.shape[0] * 5 // 4, 1 << 20)
            slot.buf = None  # free the smaller one first
            slot.buf = backend.empty_pinned(aligned(size))
        return slot


RING = PinnedRing()


_POOL = None


def pool():
    """The process's thread pool for host copies and per-column Arrow work
    (NumPy's copies and Arrow's kernels release the GIL)."""
    global _POOL
    if _POOL is None:
        import os
        from concurrent.futures import ThreadPoolExecutor

        _POOL = ThreadPoolExecutor(max_workers=max(os.cpu_count() or 1, 1), thread_name_prefix="gpuwm")
    return _POOL


def _fill(dst: np.ndarray, moves: Sequence[tuple[int, np.ndarray]]) -> None:
    """``dst[o:o+len(src)] = src`` for each move; large ones in parallel
    pieces (NumPy's copies release the GIL)."""
    pieces = []
    for o, src in moves:
        n = src.shape[0]
        if n < _PAR_BYTES:
            dst[o:o + n] = src
            continue
        pieces.extend((o + s, src[s:s + _PAR_BYTES]) for s in range(0, n, _PAR_BYTES))
    if not pieces:
        return
    if len(pieces) == 1:
        o, src = pieces[0]
        dst[o:o + src.shape[0]] = src
        return
    def put(move: tuple[int, np.ndarray]) -> None:
        o, src = move
        dst[o:o + src.shape[0]] = src

    list(pool().map(put, pieces))


def _layout(parts: Sequence[Any | None]) -> tuple[list[int], int]:
    """Each part's offset in one buffer (64-byte aligned), and its size."""
    offsets, total = [], 0
    for p in parts:
        offsets.append(total)
        total += 0 if p is None else aligned(int(p.shape[0]))
    return offsets, total


def upload(backend: Any, parts: Sequence[np.ndarray | None]) -> list[Any]:
    """Host byte arrays to the device in one copy through the pinned ring:
    one device ``uint8`` view per part (None stays None)."""
    offsets, total = _layout(parts)
    if total == 0:
        return [None if p is None else backend.xp.empty(0, dtype=np.uint8) for p in parts]
    slot = RING.take(backend, total)
    _fill(slot.buf, [(o, p) for o, p in zip(offsets, parts) if p is not None])
    dev, slot.event = backend.upload(slot.buf[:total])
    return [None if p is None else dev[o:o + p.shape[0]] for o, p in zip(offsets, parts)]


def download(backend: Any, parts: Sequence[Any | None]) -> list[np.ndarray | None]:
    """Device ``uint8`` arrays to the host in one copy, into one page-locked
    block: one host view per part (None stays None). Sizes are the arrays'
    shapes, known on the host: nothing is read back to lay them out."""
    xp = backend.xp
    offsets, total = _layout(parts)
    if total == 0:
        return [None if p is None else np.empty(0, dtype=np.uint8) for p in parts]
    dev = xp.empty(total, dtype=np.uint8)
    for o, p in zip(offsets, parts):
        if p is not None and p.shape[0]:
            dev[o:o + p.shape[0]] = p
    host = backend.empty_pinned(total)
    backend.download(dev, host)
    return [None if p is None else host[o:o + p.shape[0]] for o, p in zip(offsets, parts)]


def as_bytes(xp: Any, a: Any) -> Any:
    """A device array's bytes as a flat ``uint8`` device array."""
    return xp.ascontiguousarray(a).reshape(-1).view(np.uint8)


def upload_arrays(backend: Any, arrays: Sequence[np.ndarray | None]) -> list[Any]:
    """Small host arrays (an operator's per-split or per-key state) to the
    device in one copy: device arrays of the same dtypes and shapes (the
    arrays themselves on the CPU backend). An array already on the device
    (a Frame's split codes) stays as it is."""
    if not backend.is_gpu:
        return list(arrays)
    host = [np.ascontiguousarray(a) if isinstance(a, np.ndarray) else a for a in arrays]
    dev = iter(upload(backend, [a.reshape(-1).view(np.uint8) for a in host if isinstance(a, np.ndarray)]))
    return [next(dev).view(a.dtype).reshape(a.shape) if isinstance(a, np.ndarray) else a for a in host]


def download_arrays(backend: Any, arrays: Sequence[Any | None]) -> list[np.ndarray | None]:
    """Device arrays to the host in one copy: host arrays of the same dtypes
    and shapes (the arrays themselves on the CPU backend)."""
    if not backend.is_gpu:
        return list(arrays)
    xp = backend.xp
    host = download(backend, [None if a is None else as_bytes(xp, a) for a in arrays])
    return [None if a is None else h.view(a.dtype).reshape(a.shape) for a, h in zip(arrays, host)]


def read_ints(backend: Any, scalars: Sequence[Any]) -> list[int]:
    """Device integer scalars (0-d arrays: counts, bounds) as Python ints,
    all in one copy: one synchronisation however many there are."""
    if not scalars:
        return []
    xp = backend.xp
    host = download_arrays(backend, [xp.stack([xp.asarray(s).astype(xp.int64) for s in scalars])])[0]
    return [int(v) for v in host.tolist()]


def mask_indexes(backend: Any, masks: Sequence[Any | None]) -> list[Any | None]:
    """The positions of each bool mask's True entries (None stays None),
    every mask counted in one read (:func:`read_ints`), then
    :func:`kernels.xp.mask_index`: one sync however many masks."""
    from kernels.xp import mask_index

    counts = iter(read_ints(backend, [backend.xp.count_nonzero(m) for m in masks if m is not None]))
    return [None if m is None else mask_index(backend.xp, m, next(counts)) for m in masks]
