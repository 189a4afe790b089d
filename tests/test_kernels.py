"""Kernels on their own: ordering (both paths), group-reduce, window math,
segmented scans (both paths) — against plain Python."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpuwm
from gpuwm.frame import Frame
from kernels import NONE, assign_windows, group_reduce, order_indices
from kernels.order import merge_order, sort_rows
from kernels.watermark import _segment_exclusive_cummax

I64 = st.integers(-(2**63) + 1, 2**63 - 1)


@given(st.lists(st.tuples(st.integers(-5, 5), st.integers(-3, 3)), min_size=1, max_size=60))
def test_order_indices_packed_path(rows):
    a = np.array([r[0] for r in rows], dtype=np.int64)
    b = np.array([r[1] for r in rows], dtype=np.int64)
    assert order_indices(np, [a, b]).tolist() == sorted(range(len(rows)), key=lambda i: (rows[i], i))


@given(st.lists(st.tuples(I64, st.integers(-3, 3)), min_size=1, max_size=60))
def test_order_indices_wide_values_use_stable_fallback(rows):
    a = np.array([r[0] for r in rows], dtype=np.int64)
    b = np.array([r[1] for r in rows], dtype=np.int64)
    assert order_indices(np, [a, b]).tolist() == sorted(range(len(rows)), key=lambda i: (rows[i], i))
    perm, (sa, sb) = sort_rows(np, [a, b])
    assert sa.tolist() == a[perm].tolist() and sb.tolist() == b[perm].tolist()


@given(st.lists(st.tuples(st.integers(-2**40, 2**40), st.integers(-3, 3)), min_size=1, max_size=60))
def test_sort_rows_recovers_sorted_columns_from_words(rows):
    a = np.array([r[0] for r in rows], dtype=np.int64)
    b = np.array([r[1] for r in rows], dtype=np.int64)
    perm, (sa, sb) = sort_rows(np, [a, b])
    assert perm.tolist() == sorted(range(len(rows)), key=lambda i: (rows[i], i))
    assert sa.tolist() == a[perm].tolist() and sb.tolist() == b[perm].tolist()


@pytest.mark.parametrize("device_branch", [False, True])
@given(rows=st.lists(st.tuples(st.integers(-2**58, 2**58), st.integers(-3, 3)), min_size=1, max_size=60),
       dup=st.integers(0, 3))
def test_sort_rows_keys_too_wide_for_the_row_index(device_branch, rows, dup, monkeypatch):
    """62 key bits leave 2 for the row index: NumPy sorts 4-row pieces and
    merges them; a device sorts (key, position) pairs in one stable pass
    (pieces were a sort launch each: 14 s a batch on an H200). Both keep
    ties in input order."""
    import kernels.xp

    rows = rows + rows[:dup]  # full ties
    a = np.array([r[0] for r in rows], dtype=np.int64)
    b = np.array([r[1] for r in rows], dtype=np.int64)
    monkeypatch.setattr(kernels.xp, "CUPY_BRANCHES", device_branch)
    perm, (sa, sb) = sort_rows(np, [a, b])
    assert perm.tolist() == sorted(range(len(rows)), key=lambda i: (rows[i], i))
    assert sa.tolist() == a[perm].tolist() and sb.tolist() == b[perm].tolist()


@pytest.mark.parametrize("device_branch", [False, True])
@given(a=st.lists(st.tuples(st.integers(-3, 3), st.one_of(st.integers(-9, 9), I64)), min_size=1, max_size=40),
       b=st.lists(st.tuples(st.integers(-3, 3), st.one_of(st.integers(-9, 9), I64)), min_size=1, max_size=40),
       share=st.integers(0, 5))
def test_merge_order_of_two_sorted_runs(device_branch, a, b, share, monkeypatch):
    """Two sorted runs (a join's state and its new rows) merged: the order
    of their concatenation, ties with ``a``'s rows first. NumPy sorts the
    packed keys once (timsort merges the two runs) where they fit 63 bits
    (else, and on a device, binary searches); rows both runs hold too."""
    import kernels.xp

    a, b = sorted(a), sorted(b + a[:share])
    monkeypatch.setattr(kernels.xp, "CUPY_BRANCHES", device_branch)
    perm = merge_order(np, *([np.array([r[i] for r in rows], dtype=np.int64) for i in (0, 1)] for rows in (a, b)))
    both = a + b
    assert perm.tolist() == sorted(range(len(both)), key=lambda i: (both[i], i))


@given(st.lists(st.tuples(st.integers(0, 4), st.integers(-9, 9)), min_size=1, max_size=60))
def test_group_reduce(rows):
    k = np.array([r[0] for r in rows], dtype=np.int64)
    v = np.array([r[1] for r in rows], dtype=np.int64)
    keys, (s, lo, hi), _, _ = group_reduce(np, [k], [v, v, v], ["add", "min", "max"])
    exp = {}
    for kk, vv in rows:
        exp.setdefault(kk, []).append(vv)
    assert keys[0].tolist() == sorted(exp)
    assert s.tolist() == [sum(exp[x]) for x in sorted(exp)]
    assert lo.tolist() == [min(exp[x]) for x in sorted(exp)]
    assert hi.tolist() == [max(exp[x]) for x in sorted(exp)]


@given(st.lists(st.tuples(st.integers(0, 4), st.integers(-9, 9)), min_size=1, max_size=60), st.booleans())
def test_group_reduce_first_and_last_are_by_input_position(rows, dense):
    """first / last: the value of each group's first / last row in input
    order, on the dense and the sort path (the sort is stable)."""
    k = np.array([r[0] for r in rows], dtype=np.int64)
    v = np.array([r[1] for r in rows], dtype=np.int64)
    keys, (first, last, n), _, _ = group_reduce(np, [k], [v, v, None], ["first", "last", "add"], allow_dense=dense)
    exp = {}
    for kk, vv in rows:
        exp.setdefault(kk, []).append(vv)
    assert keys[0].tolist() == sorted(exp)
    assert first.tolist() == [exp[x][0] for x in sorted(exp)]
    assert last.tolist() == [exp[x][-1] for x in sorted(exp)]
    assert n.tolist() == [len(exp[x]) for x in sorted(exp)]


@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 400), st.integers(-9, 9)), max_size=80),
       st.booleans())
def test_group_reduce_row_counts_without_ones(rows, dense):
    """A None accumulator is the row count, on the dense and the sort path."""
    k1 = np.array([r[0] for r in rows], dtype=np.int64)
    k2 = np.array([r[1] for r in rows], dtype=np.int64)
    v = np.array([r[2] for r in rows], dtype=np.int64)
    ones = np.ones(len(rows), dtype=np.int64)
    got = group_reduce(np, [k1, k2], [None, v, None], ["add", "max", "add"], allow_dense=dense)
    exp = group_reduce(np, [k1, k2], [ones, v, ones], ["add", "max", "add"], allow_dense=False)
    assert [a.tolist() for a in got[0]] == [a.tolist() for a in exp[0]]
    assert [a.tolist() for a in got[1]] == [a.tolist() for a in exp[1]]
    assert all(a.dtype == np.int64 for a in (got[1][0], got[1][2]))
    with pytest.raises(ValueError, match="must be 'add'"):
        group_reduce(np, [k1], [None], ["max"])


@given(st.lists(st.integers(-100, 100), max_size=30), st.integers(1, 5), st.integers(1, 4))
def test_assign_windows(ts, slide, k):
    size = slide * k
    rows, widx = assign_windows(np, np.array(ts, dtype=np.int64), size, slide)
    got = sorted(zip(rows.tolist(), (widx * slide).tolist()))
    exp = sorted((i, s) for i, t in enumerate(ts) for s in range(t - size + 1, t + 1) if s % slide == 0)
    assert got == exp


def _ref_excl(v, c):
    out, best = [], {}
    for x, s in zip(v, c):
        out.append(best.get(s, NONE))
        if x != NONE:
            best[s] = max(best.get(s, NONE), x)
    return out


@given(st.lists(st.tuples(st.one_of(st.just(NONE), st.integers(-50, 50)), st.integers(0, 4)), max_size=50))
def test_segmented_exclusive_cummax(rows):
    v = np.array([r[0] for r in rows], dtype=np.int64)
    c = np.array([r[1] for r in rows], dtype=np.int64)
    exp = _ref_excl(v.tolist(), c.tolist())
    assert _segment_exclusive_cummax(np, v, c, 5).tolist() == exp  # a running max per split
    assert _segment_exclusive_cummax(np, v, c, 5, loop_max=0).tolist() == exp  # lifted ranges, one running max


@given(st.lists(st.tuples(st.one_of(st.just(NONE), I64), st.integers(0, 3)), max_size=30))
def test_segmented_exclusive_cummax_overflow_fallback(rows):
    v = np.array([r[0] for r in rows], dtype=np.int64)
    c = np.array([r[1] for r in rows], dtype=np.int64)
    assert _segment_exclusive_cummax(np, v, c, 4, loop_max=0).tolist() == _ref_excl(v.tolist(), c.tolist())


def test_frame_round_trip_types_and_nulls(backend):
    b = gpuwm.get_backend(backend)
    t = pa.table({
        "i8": pa.array([1, None, -3], pa.int8()),
        "u64": pa.array([2**64 - 1, 0, None], pa.uint64()),
        "f": pa.array([1.5, None, float("inf")]),
        "b": pa.array([True, None, False]),
        "ts": pa.array([0, 1, None], pa.timestamp("ns", tz="UTC")),
        "d": pa.array([1, None, 3], pa.date32()),
        "s": pa.array(["a", None, "ccc"]),
    })
    f = Frame.from_arrow(t.slice(1), b)  # non-zero offsets
    assert f.to_arrow().equals(t.slice(1))
    xp = b.xp
    assert f.take(xp.asarray([1, 0])).to_arrow().to_pylist() == t.slice(1).take([1, 0]).to_pylist()
    assert Frame.concat([f, f.filter(xp.asarray([True, False]))]).to_arrow().to_pylist() == \
        pa.concat_tables([t.slice(1), t.slice(1, 1)]).to_pylist()


def test_backend_choice(monkeypatch):
    with pytest.raises(gpuwm.ConfigError, match="backend must be one of"):
        gpuwm.set_backend("tpu")
    monkeypatch.setenv("GPUWM_BACKEND", "quantum")
    with pytest.raises(gpuwm.ConfigError, match="GPUWM_BACKEND"):
        gpuwm.get_backend()
    monkeypatch.setenv("GPUWM_BACKEND", "cpu")
    assert gpuwm.get_backend().name == "cpu"
    if not gpuwm.gpu_available():
        with pytest.raises(gpuwm.BackendError, match="no usable GPU"):
            gpuwm.WatermarkFilter("t", delay=1, backend="gpu")
        monkeypatch.setenv("GPUWM_BACKEND", "auto")
        assert gpuwm.get_backend().name == "cpu"


def test_operators_import_without_cupy():
    import subprocess
    import sys

    code = ("import sys; sys.modules['cupy'] = None; import gpuwm, kernels; "
            "print(gpuwm.get_backend('auto').name)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "cpu" and "cupy" not in out.stdout


@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 3)), min_size=1, max_size=80), st.integers(57, 62))
def test_sorted_pieces_merge(rows, key_bits):
    """Force the piece-and-merge path (tiny pieces) and compare with Python."""
    from kernels.order import _sort_packed

    word = np.array([(a << 2) | b for a, b in rows], dtype=np.uint64)
    perm, keys = _sort_packed(np, word, key_bits)
    got = perm.tolist()
    assert keys.tolist() == sorted(word.tolist())
    assert got == sorted(range(len(rows)), key=lambda i: (rows[i], i))


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-2, 2), st.floats(-1e6, 1e6, allow_nan=False)),
                min_size=1, max_size=60), st.booleans())
def test_group_reduce_dense_and_sort_paths_agree(rows, wide):
    """The direct-address path (dense keys) and the sort path give identical groups."""
    k1 = np.array([r[0] for r in rows], dtype=np.int64)
    k2 = np.array([r[1] for r in rows], dtype=np.int64)
    v = np.array([r[2] for r in rows])
    iv = np.array([int(r[2]) for r in rows], dtype=np.int64)
    dense = group_reduce(np, [k1, k2], [v, v, iv, iv], ["min", "max", "add", "max"])
    spread = (k2 * 10**12) if wide else k2  # a sparse key range: sorting is the only way
    sparse = group_reduce(np, [k1, spread], [v, v, iv, iv], ["min", "max", "add", "max"], allow_dense=False)
    assert dense[2] is None and sparse[2] is not None
    assert dense[0][0].tolist() == sparse[0][0].tolist()
    assert [x.tolist() for x in dense[1]] == [x.tolist() for x in sparse[1]]


@given(values=st.lists(st.integers(-(1 << 62), 1 << 62), max_size=70), runs=st.lists(st.integers(1, 6), max_size=30))
def test_cupy_side_shims_equal_numpy_ufunc_methods(values, runs, monkeypatch):
    """CuPy has ufunc.accumulate / reduceat for add only (cupy#7082): the
    running max by doubling and the per-run min/max by scatter that CuPy
    gets, run here on NumPy, equal NumPy's own ufunc methods."""
    import kernels.xp as kx

    v = np.array(values, dtype=np.int64)
    native = [np.maximum.accumulate(v)]
    bounds = np.cumsum([0] + runs)
    bounds = bounds[bounds < len(v)]
    if len(v):
        native += [uf.reduceat(v, bounds) for uf in (np.minimum, np.maximum)]
        native.append(np.add.reduceat(v >> 8, bounds))  # no int64 overflow in the sums
    monkeypatch.setattr(kx, "CUPY_BRANCHES", True)
    shim = [kx.cummax(np, v)]
    if len(v):
        shim += [kx.reduceat(np, op, v, bounds) for op in ("min", "max")]
        shim.append(kx.reduceat(np, "add", v >> 8, bounds))
    assert [a.tolist() for a in shim] == [a.tolist() for a in native]


_FLOATS = st.floats(allow_nan=True, allow_infinity=True)


@given(rows=st.lists(st.tuples(st.integers(0, 5), _FLOATS), max_size=60),
       init=st.lists(_FLOATS, min_size=6, max_size=6), width=st.sampled_from([np.float64, np.float32]))
def test_float_scatter_min_max_exact_on_the_cupy_side(rows, init, width, monkeypatch):
    """The CuPy side of scatter_min/max takes floats through integer atomics
    on their ordered bits (CuPy's float64 maximum.at rounded to float32
    precision on an H100); run on NumPy it equals NumPy's maximum.at /
    minimum.at bit for bit up to the sign of zero: NaN propagates, +-inf,
    subnormals, both widths."""
    import kernels.xp as kx

    idx = np.array([r[0] for r in rows], dtype=np.int64)
    with np.errstate(all="ignore"):
        vals = np.array([r[1] for r in rows], dtype=np.float64).astype(width)
        start = np.array(init, dtype=np.float64).astype(width)
    want = {}
    for uf in (np.maximum, np.minimum):
        a = start.copy()
        with np.errstate(invalid="ignore"):
            uf.at(a, idx, vals)
        want[uf.__name__] = a
    monkeypatch.setattr(kx, "CUPY_BRANCHES", True)
    for name, fn in (("maximum", kx.scatter_max), ("minimum", kx.scatter_min)):
        got = start.copy()
        fn(np, got, idx, vals)
        assert got.dtype == want[name].dtype
        assert np.array_equal(got, want[name], equal_nan=True), (name, got, want[name])


@pytest.mark.gpu
@pytest.mark.skipif(not gpuwm.gpu_available(), reason="no usable GPU (cupy)")
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize("slots", [1, 8, 300, 512])
@pytest.mark.parametrize("seed", [0, 1])
def test_private_scatter_equals_numpys_at_on_a_gpu(dtype, slots, seed):
    """The privatised scatter min/max (a copy of the slots per warp in shared
    memory, one global atomic per slot and block) equals its NumPy twin,
    ``minimum.at``/``maximum.at``, on inputs that take it (at least
    PRIVATE_ROWS rows, at most PRIVATE_SLOTS slots): random values with the
    type's extremes among them, slots no row hits, and an initial ``out``
    that already beats some rows."""
    import cupy

    import kernels.xp as kx

    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    n = kx.PRIVATE_ROWS + int(rng.integers(0, 200_000))
    idx = rng.integers(0, max(1, slots - (slots > 4)), n).astype([np.int8, np.int16][seed] if slots < 128
                                                                 else np.int64)
    vals = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    vals[rng.integers(0, n, 5)] = info.min
    vals[rng.integers(0, n, 5)] = info.max
    start = rng.integers(info.min // 2, info.max // 2, slots, dtype=dtype)
    for name, uf, fn in (("max", np.maximum, kx.scatter_max), ("min", np.minimum, kx.scatter_min)):
        want = start.copy()
        uf.at(want, idx.astype(np.int64), vals)
        got = cupy.asarray(start)
        fn(cupy, got, cupy.asarray(idx), cupy.asarray(vals))
        assert got.dtype == want.dtype
        assert np.array_equal(cupy.asnumpy(got), want), name
        assert (np.dtype(dtype).str, name) in kx._private_kernels  # the privatised kernel ran


@given(ts=st.lists(st.integers(-2**62, 2**62), max_size=40), lo=st.one_of(st.none(), st.integers(-2**61, 2**61)),
       width=st.integers(-5, 2**61), parts=st.integers(1, 9))
def test_range_parts(ts, lo, width, parts):
    """Range i holds [lo + i*step, lo + (i+1)*step), step = ceil(width / parts);
    below lo: 0, from hi on: the last; no lo (or an empty interval): 0."""
    from kernels import range_parts

    hi = (0 if lo is None else lo) + width
    got = range_parts(np, np.array(ts, dtype=np.int64), lo, hi, parts).tolist()

    def ref(t):
        if lo is None or hi <= lo:
            return 0
        step = -(-(hi - lo) // parts)
        return next((i for i in range(parts) if t < lo + (i + 1) * step), parts - 1)

    assert got == [ref(t) for t in ts]
    order = sorted(range(len(ts)), key=lambda i: ts[i])
    assert [got[i] for i in order] == sorted(got)  # ordered rows: consecutive ranges


@given(keys=st.lists(I64, min_size=1, max_size=50), probes=st.lists(I64, max_size=50), per_key=st.integers(1, 9))
def test_key_filter_has_no_false_negatives(keys, probes, per_key):
    """Every key present probes True, whatever the keys' spread (full int64
    range included); keys outside [min, max] probe False."""
    from kernels import key_filter, key_filter_probe

    k = np.sort(np.array(keys, dtype=np.int64))
    f = key_filter(np, k, per_key)
    p = np.array(keys + probes, dtype=np.int64)
    got = key_filter_probe(np, f, p).tolist()
    assert all(got[: len(keys)])
    assert all(not g for g, v in zip(got, p.tolist()) if v < k[0] or v > k[-1])


def test_key_filter_rejects_most_absent_keys():
    """The point of the filter: evenly spread keys, 8 buckets a key -> about
    1/8 of absent keys probe "maybe" (measured, not assumed)."""
    from kernels import key_filter, key_filter_probe

    rng = np.random.default_rng(7)
    k = np.unique(rng.integers(0, 50_000_000, 1_000_000))
    absent = np.setdiff1d(rng.integers(0, 50_000_000, 200_000), k)
    fp = key_filter_probe(np, key_filter(np, k), absent).mean()
    assert 0.02 < fp < 0.2
