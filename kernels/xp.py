"""Array-namespace helpers shared by every kernel.

Every kernel takes ``xp`` (``numpy`` or ``cupy``) and runs the same steps on
both. Where the two modules differ, the difference lives here, in a small,
named shim with one behaviour — never a second algorithm.

No module-level cupy import: a kernel only ever sees the module it was given.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Sentinel for "no watermark yet" / "no value" in int64 event-time arrays.
NONE = np.iinfo(np.int64).min
INT64_MAX = np.iinfo(np.int64).max


#: Tests set this to run the CuPy side of the shims below on NumPy (the
#: ``gpu-sim`` backend), so that the algorithms CuPy gets are checked in CI.
CUPY_BRANCHES = False


def is_numpy(xp: Any) -> bool:
    return xp is np


def _numpy_path(xp: Any) -> bool:
    return is_numpy(xp) and not CUPY_BRANCHES


def to_numpy(xp: Any, a: Any) -> np.ndarray:
    """The explicit device -> host boundary."""
    if is_numpy(xp):
        return np.asarray(a)
    return xp.asnumpy(a)


def scalar(a: Any) -> int:
    """A 0-d array (host or device) as a Python int."""
    return int(a)


def mask_index(xp: Any, mask: Any, count: int) -> Any:
    """Positions of the ``count`` True entries of ``mask`` (``count`` already
    on the host): ``flatnonzero`` without the second read of the count that
    CuPy's (and each boolean-mask index) makes. Gathers by these positions
    then select rows from any number of columns with no further sync.

    >>> mask_index(np, np.array([False, True, True, False, True]), 3).tolist()
    [1, 2, 4]
    """
    if _numpy_path(xp):
        return np.flatnonzero(mask)
    out = xp.empty(count + 1, dtype=xp.int64)
    at = xp.where(mask, xp.cumsum(mask, dtype=xp.int64) - 1, count)  # the others all land in slot ``count``
    out[at] = xp.arange(mask.shape[0])
    return out[:count]


def stable_argsort(xp: Any, a: Any) -> Any:
    """Stable argsort: numpy needs ``kind='stable'``; cupy is always stable."""
    if is_numpy(xp):
        return np.argsort(a, kind="stable")
    return xp.argsort(a)


def sort_unique(xp: Any, a: Any) -> Any:
    """Sort of values known to be distinct: stability is irrelevant, so numpy
    may use its (SIMD) quicksort; cupy's radix sort is used as is."""
    if is_numpy(xp):
        return np.sort(a)
    return xp.sort(a)


def _ordered_bits(xp: Any, a: Any) -> Any:
    """Floats as signed integers of the same width in the same order
    (IEEE 754: flip the magnitude bits of negatives); its own inverse."""
    it = xp.int64 if a.dtype.itemsize == 8 else xp.int32
    b = a.view(it)
    return xp.where(b < 0, b ^ xp.iinfo(it).max, b)


def _scatter_extreme(xp: Any, out: Any, idx: Any, vals: Any, op: str) -> None:
    """``out[idx] = op(out[idx], vals)`` with repeated indices, as NumPy's
    ``maximum.at``/``minimum.at`` give it (NaN propagates).

    On CuPy, floats go through integer atomics on their ordered bits: CuPy
    14's float64 ``maximum.at`` (and ``scatter_max``) returned values
    rounded to float32 precision on an H100 (0.13959463899653946 ->
    0.1395946443080902), which no aggregate may do."""
    uf = xp.maximum if op == "max" else xp.minimum
    if _numpy_path(xp):
        uf.at(out, idx, vals)
        return
    if out.dtype.kind == "f" and out.dtype.itemsize in (4, 8):
        vals = xp.asarray(vals).astype(out.dtype, copy=False)
        keys = _ordered_bits(xp, out)
        _scatter_int(xp, keys, idx, _ordered_bits(xp, vals), op)
        nan = xp.isnan(out).astype(xp.int32)
        _scatter_int(xp, nan, idx, xp.isnan(vals).astype(xp.int32), "max")
        res = _ordered_bits(xp, keys).view(out.dtype)
        out[...] = xp.where(nan > 0, xp.asarray(np.nan, dtype=out.dtype), res)
        return
    _scatter_int(xp, out, idx, vals, op)


#: ``_scatter_int`` takes the privatised kernel below up to this many slots
#: (a copy of them per warp in shared memory: 8 warps x 512 x 8 B = 32 KiB)
PRIVATE_SLOTS = 512
#: ... and from this many rows (below, one launch of CuPy's atomics is as fast)
PRIVATE_ROWS = 1 << 15

_PRIVATE_SRC = r"""
extern "C" __global__ void {name}(const int* idx, const {T}* vals, long long n, {T}* out, int slots) {{
  extern __shared__ unsigned long long smem[];
  {T}* acc = ({T}*)smem;
  const int warps = blockDim.x >> 5;
  for (int i = threadIdx.x; i < slots * warps; i += blockDim.x) acc[i] = {ident};
  __syncthreads();
  {T}* mine = acc + (threadIdx.x >> 5) * slots;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    atomic{Op}(mine + idx[i], vals[i]);
  __syncthreads();
  for (int s = threadIdx.x; s < slots; s += blockDim.x) {{
    {T} v = acc[s];
    for (int w = 1; w < warps; ++w) {{ {T} u = acc[w * slots + s]; v = (u {cmp} v) ? u : v; }}
    if (v != {ident}) atomic{Op}(out + s, v);
  }}
}}
"""

_private_kernels: dict[tuple[str, str], Any] = {}
_sm_count: dict[int, int] = {}


def _private_scatter(xp: Any, out: Any, idx: Any, vals: Any, op: str) -> None:
    """``out[idx] = op(out[idx], vals)`` for a few slots (``out.size <=
    PRIVATE_SLOTS``; every ``0 <= idx < out.size``) on CuPy: each warp
    reduces into its own copy of the slots in shared memory, each block
    merges its warps' copies and makes one global atomic per slot.

    Why: with a few slots (a watermark's splits) CuPy's ``maximum.at``
    serialises 10 M atomics on 8 addresses, 2.6 ms of an on-batch filter's
    3.4 ms on an H200 (``benchmarks/gpu_profile.py``). Its NumPy twin is
    ``maximum.at``/``minimum.at`` (the other branches), tested equal on a GPU."""
    t = {8: "long long", 4: "int"}[out.dtype.itemsize]
    key = (out.dtype.str, op)
    kern = _private_kernels.get(key)
    if kern is None:
        info = np.iinfo(out.dtype)
        ident = f"({t}){info.min}LL" if op == "max" else f"({t}){info.max}LL"
        if op == "max" and out.dtype.itemsize == 8:
            ident = "(long long)(-9223372036854775807LL - 1)"  # INT64_MIN has no literal of its own
        name = f"gpuwm_private_{op}_{out.dtype.itemsize * 8}"
        src = _PRIVATE_SRC.format(name=name, T=t, ident=ident, Op="Max" if op == "max" else "Min",
                                  cmp=">" if op == "max" else "<")
        kern = _private_kernels[key] = xp.RawKernel(src, name)
    n = int(idx.shape[0])
    if n == 0:
        return
    idx = xp.ascontiguousarray(idx.astype(xp.int32, copy=False))
    vals = xp.ascontiguousarray(xp.asarray(vals).astype(out.dtype, copy=False))
    threads = 256
    dev = xp.cuda.runtime.getDevice()
    sms = _sm_count.get(dev) or _sm_count.setdefault(dev, xp.cuda.runtime.getDeviceProperties(dev)["multiProcessorCount"])
    blocks = max(1, min(4 * sms, -(-n // threads)))
    slots = int(out.shape[0])
    kern((blocks,), (threads,), (idx, vals, np.int64(n), out, np.int32(slots)),
         shared_mem=slots * (threads // 32) * out.dtype.itemsize)


def _scatter_int(xp: Any, out: Any, idx: Any, vals: Any, op: str) -> None:
    uf = xp.maximum if op == "max" else xp.minimum
    if (not is_numpy(xp) and out.ndim == 1 and out.flags.c_contiguous and out.shape[0] <= PRIVATE_SLOTS
            and out.dtype.kind == "i" and out.dtype.itemsize in (4, 8)
            and getattr(idx, "ndim", 0) == 1 and idx.shape[0] >= PRIVATE_ROWS
            and getattr(vals, "shape", None) == idx.shape):
        _private_scatter(xp, out, idx, vals, op)
        return
    if is_numpy(xp) or hasattr(uf, "at"):  # CuPy >= 13 has ufunc.at; scatter_max/min are deprecated there
        uf.at(out, idx, vals)
    else:
        import cupyx

        (cupyx.scatter_max if op == "max" else cupyx.scatter_min)(out, idx, vals)


def scatter_max(xp: Any, out: Any, idx: Any, vals: Any) -> None:
    """``out[idx] = max(out[idx], vals)`` with repeated indices."""
    _scatter_extreme(xp, out, idx, vals, "max")


def scatter_min(xp: Any, out: Any, idx: Any, vals: Any) -> None:
    """``out[idx] = min(out[idx], vals)`` with repeated indices."""
    _scatter_extreme(xp, out, idx, vals, "min")


def scatter_add(xp: Any, out: Any, idx: Any, vals: Any) -> None:
    """``out[idx] += vals`` with repeated indices."""
    if is_numpy(xp) or hasattr(xp.add, "at"):  # CuPy >= 13 has ufunc.at; scatter_add is deprecated there
        xp.add.at(out, idx, vals)
    else:
        import cupyx

        cupyx.scatter_add(out, idx, vals)


def bits_for(span: int) -> int:
    """Bits needed to hold every integer in ``[0, span]``."""
    return max(int(span).bit_length(), 1)


# CuPy implements ufunc.accumulate and ufunc.reduceat for ``add`` only
# (cupy/cupy#7082); running maxima and per-run min/max go through these.
def cummax(xp: Any, a: Any) -> Any:
    """Inclusive running maximum of a 1-d array. NumPy: ``maximum.accumulate``;
    CuPy: log2(n) doubling steps (Hillis-Steele), each one elementwise pass
    — a few passes over memory at GPU bandwidth.

    >>> cummax(np, np.array([3, 1, 4, 1, 5])).tolist()
    [3, 3, 4, 4, 5]
    """
    if _numpy_path(xp):
        return np.maximum.accumulate(a)
    out = a.copy()
    n = int(a.shape[0])
    d = 1
    while d < n:
        out[d:] = xp.maximum(out[d:], out[:-d])  # the right side is evaluated first: a new array
        d *= 2
    return out


def reduceat(xp: Any, op: str, a: Any, starts: Any) -> Any:
    """``ufunc.reduceat(a, starts)`` for runs that are not empty (``starts``
    strictly increasing, the first 0), ``op`` in add/min/max. CuPy has
    ``add.reduceat`` only: min and max scatter into one slot per run there.

    >>> reduceat(np, "max", np.array([3, 1, 4, 1, 5]), np.array([0, 2])).tolist()
    [3, 5]
    """
    uf = {"add": xp.add, "min": xp.minimum, "max": xp.maximum}[op]
    if _numpy_path(xp) or (op == "add" and not is_numpy(xp)):
        return uf.reduceat(a, starts)
    n = int(a.shape[0])
    mark = xp.zeros(n, dtype=xp.int64)
    mark[starts[1:]] = 1
    run = xp.cumsum(mark)  # each row's run
    if op == "add":
        out = xp.zeros(int(starts.shape[0]), dtype=a.dtype)
        scatter_add(xp, out, run, a)
        return out
    out = a[starts].copy()
    (scatter_max if op == "max" else scatter_min)(xp, out, run, a)
    return out
