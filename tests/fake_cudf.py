"""A stand-in for the few cuDF calls gpuwm makes, on PyArrow, so that the
``gpu-sim-cudf`` test backend runs gpuwm's cuDF branches in CI.

Only what gpuwm calls is here, each as cuDF documents it (checked against
the cuDF API reference, 24.x-26.x):

- ``cudf.Index.from_arrow(array)``; ``Index.to_arrow()`` hands strings back
  as ``large_string`` (cuDF >= 25 does), so gpuwm must cast back to its schema;
- ``Index.take(indices)``: positions only (an integer array), no masks;
- ``Index[start:stop]``: positional slice;
- ``Index.factorize(sort=False, use_na_sentinel=True)`` -> (codes, uniques):
  codes in the smallest integer type that holds them (older cuDF returns
  int8), -1 for a null, uniques in order of first appearance without nulls;
- ``Index.memory_usage()``; ``cudf.concat(objs, ignore_index=True)``.

It cannot check cuDF itself: a real GPU with cuDF runs the same tests on the
``gpu`` backend (``benchmarks/gpu.sh``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


class Index:
    def __init__(self, arr: pa.Array):
        assert isinstance(arr, pa.Array)
        self._a = arr

    @classmethod
    def from_arrow(cls, arr) -> "Index":
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if pa.types.is_dictionary(arr.type) or pa.types.is_struct(arr.type):
            raise NotImplementedError(f"fake cudf: {arr.type} is not simulated")
        if pa.types.is_string(arr.type):
            arr = arr.cast(pa.large_string())
        return cls(arr)

    def to_arrow(self) -> pa.Array:
        return self._a

    def __len__(self) -> int:
        return len(self._a)

    def take(self, indices) -> "Index":
        idx = np.asarray(indices)
        if idx.dtype.kind not in "iu":
            raise TypeError(f"fake cudf: take needs integer positions, got {idx.dtype}")
        return Index(self._a.take(pa.array(idx)))

    def __getitem__(self, key) -> "Index":
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("fake cudf: only positional slices are simulated")
        start, stop, _ = key.indices(len(self._a))
        return Index(self._a.slice(start, max(stop - start, 0)))

    def factorize(self, sort: bool = False, use_na_sentinel: bool = True):
        assert not sort and use_na_sentinel
        enc = pc.dictionary_encode(self._a, null_encoding="mask")
        codes = enc.indices.to_numpy(zero_copy_only=False)
        codes = np.where(enc.indices.is_null().to_numpy(zero_copy_only=False), -1,
                         np.nan_to_num(codes, nan=-1)).astype(np.int64)
        width = np.int8 if len(enc.dictionary) < 127 else np.int32
        return codes.astype(width), Index(enc.dictionary)

    def memory_usage(self, deep: bool = False) -> int:
        return self._a.nbytes


def concat(objs, ignore_index: bool = False) -> Index:
    assert all(isinstance(o, Index) for o in objs)
    return Index(pa.concat_arrays([o._a for o in objs]))
