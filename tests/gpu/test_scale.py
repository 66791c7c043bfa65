"""Scale (GPU tier, slow): data and outputs past 2^31 elements, in every mode.

Every array is int8 and holds a known pattern: element ``f`` (its flat index
in C order of the logical array) is ``pattern(f)``, a 64-bit hash cut to 8
bits, written by a GPU kernel.  A second kernel recomputes every output
element from the indices and counts mismatches on the GPU, so nothing of the
gigabytes travels to the host.  Each test skips when the GPU lacks the
memory it needs.
"""

from __future__ import annotations

import numpy as np
import pytest

from support import gpu as g

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

GIB = 1 << 30
BIG = 3 * GIB + 7  # elements of a 1-D table: well past 2^31

_PREAMBLE = r"""
__device__ __forceinline__ signed char pattern(unsigned long long x)
{
    x ^= x >> 31;
    x *= 0x9E3779B97F4A7C15ULL;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ULL;
    return (signed char)(x >> 56);
}

// mode: 0 raise (indices in range), 1 wrap, 2 clip, 3 numpy clip, 4 fill.
__device__ __forceinline__ bool resolve(long long& k, long long n, int mode)
{
    if (mode == 1) { k %= n; if (k < 0) k += n; return true; }
    if (mode == 3) { k = k < 0 ? 0 : (k >= n ? n - 1 : k); return true; }
    if (k < 0) k += n;
    if (mode == 2) { k = k < 0 ? 0 : (k >= n ? n - 1 : k); return true; }
    return k >= 0 && k < n;
}
"""
MODE_CODES = {"raise": 0, "wrap": 1, "clip": 2, "clip_numpy": 3, "fill": 4}
FILL = -5
_kernels: dict = {}


def _k(name):
    cp = g.cp()
    if name in _kernels:
        return _kernels[name]
    if name == "init":  # data[f] = pattern(f), f the C-order index
        k = cp.ElementwiseKernel("", "T y", "y = (T)pattern((unsigned long long)i)",
                                 "cugather_test_init", preamble=_PREAMBLE)
    elif name == "init_t":  # base (cols, rows) whose transpose holds the pattern
        k = cp.ElementwiseKernel(
            "int64 rows, int64 cols", "T y",
            r"""
            const long long b = (long long)i, c = b / rows, r = b % rows;
            y = (T)pattern((unsigned long long)(r * cols + c));
            """, "cugather_test_init_t", preamble=_PREAMBLE)
    elif name == "indices":  # indices spread over [-n, n), some out of range when oor
        k = cp.ElementwiseKernel(
            "int64 n, uint64 seed, int32 oor", "I y",
            r"""
            unsigned long long h = ((unsigned long long)i + seed) * 0x9E3779B97F4A7C15ULL;
            h ^= h >> 29; h *= 0xBF58476D1CE4E5B9ULL; h ^= h >> 32;
            long long v = (long long)(h % (unsigned long long)(2 * n)) - n;
            if (oor && (h >> 20) % 13 == 0) {
                const long long far[6] = {n, -n - 1, 2 * n + 3, -3 * n, n + (long long)(h >> 44),
                                          -n - 1 - (long long)(h >> 45)};
                v = far[(h >> 8) % 6];
            }
            y = (I)v;
            """, "cugather_test_indices")
    elif name == "take":  # out viewed as (outer, n_idx, row): check against data (outer, n, row)
        k = cp.ElementwiseKernel(
            "T got, raw I idx, int64 n, int64 row, int64 n_idx, int32 mode, T fill",
            "raw uint64 bad",
            r"""
            const long long p = (long long)i;
            const long long r = p % row, q = p / row, j = q % n_idx, o = q / n_idx;
            long long k = (long long)idx[j];
            const bool keep = resolve(k, n, mode);
            const T want = keep ? (T)pattern((unsigned long long)((o * n + k) * row + r)) : fill;
            if (got != want) {
                atomicAdd(&bad[0], 1ULL);
                atomicMin(&bad[1], (unsigned long long)p);
            }
            """, "cugather_test_check_take", preamble=_PREAMBLE)
    elif name == "elements":  # out[r, c] = data[r, idx[r, c]] with data (rows, n)
        k = cp.ElementwiseKernel(
            "T got, I idx, int64 n, int64 cols, int32 mode, T fill", "raw uint64 bad",
            r"""
            const long long p = (long long)i;
            const long long r = p / cols;
            long long k = (long long)idx;
            const bool keep = resolve(k, n, mode);
            const T want = keep ? (T)pattern((unsigned long long)(r * n + k)) : fill;
            if (got != want) {
                atomicAdd(&bad[0], 1ULL);
                atomicMin(&bad[1], (unsigned long long)p);
            }
            """, "cugather_test_check_elements", preamble=_PREAMBLE)
    elif name == "count_ne":
        k = cp.ElementwiseKernel("T x, T v", "raw uint64 bad",
                                 "if (x != v) atomicAdd(&bad[0], 1ULL);", "cugather_test_count_ne")
    _kernels[name] = k
    return k


def _bad_counter():
    cp = g.cp()
    return cp.array([0, np.iinfo(np.uint64).max], dtype=cp.uint64)


def patterned(shape, transposed=False):
    """An int8 array of ``shape`` holding the pattern (through a transposed base if asked)."""
    cp = g.cp()
    if transposed:
        rows, cols = shape
        base = cp.empty((cols, rows), cp.int8)
        _k("init_t")(np.int64(rows), np.int64(cols), base)
        return base.T
    data = cp.empty(shape, cp.int8)
    _k("init")(data)
    return data


def indices(size_or_shape, n, dtype, seed, oor=False):
    cp = g.cp()
    idx = cp.empty(size_or_shape, dtype)
    _k("indices")(np.int64(n), np.uint64(seed), np.int32(oor), idx)
    return idx


def check_take(out, idx, n, row, mode):
    """(mismatches, first bad flat position) of out = take(pattern (outer, n, row), idx)."""
    bad = _bad_counter()
    _k("take")(out.reshape(-1), idx.reshape(-1), np.int64(n), np.int64(row), np.int64(idx.size),
               np.int32(MODE_CODES[mode]), np.int8(FILL), bad)
    count, first = (int(v) for v in bad.get())
    return count, first


def assert_take(out, idx, n, row, mode, what):
    count, first = check_take(out, idx, n, row, mode)
    assert count == 0, f"{what} mode={mode}: {count} wrong elements, first at flat {first}"


def count_ne(arr, value) -> int:
    bad = _bad_counter()
    _k("count_ne")(arr, arr.dtype.type(value), bad)
    return int(bad.get()[0])


def _release():
    cp = g.cp()
    cp.cuda.Device().synchronize()
    cp.get_default_memory_pool().free_all_blocks()


@pytest.fixture(autouse=True)
def _free_memory_after():
    yield
    _release()


def _plan_note(op, data, idx):
    plan = op.plan(data, idx)
    print(f"\n{plan.describe()}")
    return plan


# ---------------------------------------------------------------- data past 2^31
@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
def test_table_past_2_31_elements_every_mode(index_dtype):
    g.require_free(BIG + 64 * 2**20)
    cp = g.cp()
    import cugather

    data = patterned((BIG,))
    # Random indices plus the far end of the table; int32 reaches it from below (-1, -n).
    specials = [0, BIG - 1, -1, -BIG, -(BIG // 2), 1 << 31, (1 << 31) + 1, BIG - 5,
                BIG - (1 << 20)]  # all in range: this is the raise-mode call
    if index_dtype == "int32":
        specials = [v for v in specials if -(1 << 31) <= v < (1 << 31)] + [-(1 << 31)]
    idx = indices((1 << 20,), BIG if index_dtype == "int64" else 1 << 31, index_dtype, 1)
    idx[:len(specials)] = cp.asarray(np.array(specials, dtype=index_dtype))
    _plan_note(cugather.GatherOp(0), data, idx)
    out = cugather.gather(data, idx, 0)
    assert_take(out, idx, BIG, 1, "raise", "gather")
    for mode in ("wrap", "clip", "fill"):
        oor = indices((1 << 20,), BIG, "int64", 2, oor=True)
        oor[:4] = cp.asarray(np.array([BIG, -BIG - 1, np.iinfo(np.int64).max,
                                       np.iinfo(np.int64).min], np.int64))
        if index_dtype == "int32":  # every int32 is in range for this table
            oor = cp.clip(oor, -(1 << 31), (1 << 31) - 1).astype(cp.int32)
        got = cugather.gather(data, oor, 0, mode=mode, fill_value=FILL)
        assert_take(got, oor, BIG, 1, mode, "gather")
    for mode, code in (("wrap", "wrap"), ("clip", "clip_numpy"), ("raise", "raise")):
        got = cugather.take(data, idx, mode=mode)
        assert_take(got, idx, BIG, 1, code, "take")
    if index_dtype == "int64":  # raise: the bad index is named and out is left alone
        bad = idx.copy()
        bad[777] = BIG
        out.fill(9)
        with pytest.raises(IndexError, match=rf"index {BIG} .*at indices\[777\]"):
            cugather.gather(data, bad, 0, out=out)
        assert count_ne(out, 9) == 0, "out was written although the call raised"


# ---------------------------------------------------------------- outputs past 2^31
def test_rows_output_past_2_31_elements():
    rows, row = (1 << 21) + 3, 1536          # 3 GiB of data
    n_idx = (1 << 21) + 5                    # 3 GiB of output
    g.require_free(rows * row + n_idx * row + n_idx * 8 + GIB)
    import cugather

    data = patterned((rows, row))
    for mode in ("raise", "wrap", "clip", "fill"):
        idx = indices((n_idx,), rows, "int64", 3, oor=mode != "raise")
        _plan_note(cugather.GatherOp(0, mode=mode), data, idx)
        out = cugather.gather(data, idx, 0, mode=mode, fill_value=FILL)
        assert out.size > 1 << 31
        assert_take(out, idx, rows, row, mode, "rows")
        del out


def test_one_element_rows_past_2_31_indices():
    """2^31 + 2^20 int32 indices into a small table: 64-bit row numbers, a long check."""
    n, n_idx = 1000, (1 << 31) + (1 << 20)
    g.require_free(n_idx * 5 + GIB)
    cp = g.cp()
    import cugather

    data = patterned((n,))
    for mode in ("raise", "wrap", "clip", "fill"):
        idx = indices((n_idx,), n, "int32", 4, oor=mode != "raise")
        _plan_note(cugather.GatherOp(0, mode=mode), data, idx)
        out = cugather.gather(data, idx, 0, mode=mode, fill_value=FILL)
        assert_take(out, idx, n, 1, mode, "one-element rows")
        if mode == "raise":
            pos = (1 << 31) + 12345  # past 2^31 in the index array
            idx[pos] = n
            out.fill(9)
            with pytest.raises(IndexError, match=rf"index {n} .*at indices\[{pos}\]"):
                cugather.gather(data, idx, 0, out=out)
            assert count_ne(out, 9) == 0, "out was written although the call raised"
        del out, idx
        cp.get_default_memory_pool().free_all_blocks()


def test_staged_rows_output_past_2_31_elements():
    """Gather along a short last axis of many rows (the shared-memory kernel)."""
    outer, n = (1 << 22) + 5, 768
    g.require_free(2 * outer * n + GIB)
    import cugather

    data = patterned((outer, n))
    for mode in ("raise", "wrap", "clip", "fill"):
        idx = indices((n,), n, "int64", 5, oor=mode != "raise")
        _plan_note(cugather.GatherOp(1, mode=mode), data, idx)
        out = cugather.gather(data, idx, 1, mode=mode, fill_value=FILL)
        assert out.size > 1 << 31
        assert_take(out, idx, n, 1, mode, "staged")
        del out


def test_strided_data_output_past_2_31_elements():
    """A transposed 3 GiB table (the general strided kernel), 3 GiB out."""
    rows, cols = 49152, 65536
    g.require_free(2 * rows * cols + GIB)
    import cugather

    data = patterned((rows, cols), transposed=True)
    assert not data.flags.c_contiguous
    for mode in ("raise", "wrap", "clip", "fill"):
        idx = indices((rows,), rows, "int64", 6, oor=mode != "raise")
        _plan_note(cugather.GatherOp(0, mode=mode), data, idx)
        out = cugather.gather(data, idx, 0, mode=mode, fill_value=FILL)
        assert out.size > 1 << 31
        assert_take(out, idx, rows, cols, mode, "strided")
        del out


# ---------------------------------------------------------------- the rest of the family
def test_gather_elements_past_2_31_elements():
    import cugather

    if not hasattr(cugather, "gather_elements"):
        pytest.skip("cugather has no gather_elements in this version")
    rows, n, k = (1 << 21) + 1, 1536, 1024
    g.require_free(rows * n + rows * k * 5 + GIB)
    data = patterned((rows, n))
    for mode in ("raise", "wrap", "clip", "fill"):
        idx = indices((rows, k), n, "int32", 7, oor=mode != "raise")
        out = cugather.gather_elements(data, idx, 1, mode=mode, fill_value=FILL)
        assert out.size > 1 << 31
        bad = _bad_counter()
        _k("elements")(out, idx, np.int64(n), np.int64(k), np.int32(MODE_CODES[mode]),
                       np.int8(FILL), bad)
        count, first = (int(v) for v in bad.get())
        assert count == 0, f"gather_elements mode={mode}: {count} wrong, first at {first}"
        del out, idx
        g.cp().get_default_memory_pool().free_all_blocks()


def test_gather_nd_past_2_31_elements():
    import cugather

    if not hasattr(cugather, "gather_nd"):
        pytest.skip("cugather has no gather_nd in this version")
    rows, row, n_idx = (1 << 21) + 3, 1536, (1 << 21) + 5
    g.require_free(rows * row + n_idx * row + n_idx * 8 + GIB)
    data = patterned((rows, row))
    for mode in ("raise", "wrap", "clip", "fill"):
        idx = indices((n_idx, 1), rows, "int64", 8, oor=mode != "raise")
        out = cugather.gather_nd(data, idx, 0, mode=mode, fill_value=FILL)
        assert out.shape == (n_idx, row)
        assert_take(out, idx, rows, row, mode, "gather_nd")
        del out


def test_take_along_axis_broadcast_past_2_31_elements():
    import cugather

    if not hasattr(cugather, "take_along_axis"):
        pytest.skip("cugather has no take_along_axis in this version")
    rows, n, k = (1 << 21) + 3, 1536, 1500
    g.require_free(rows * n + rows * k + GIB)
    data = patterned((rows, n))
    idx = indices((1, k), n, "int64", 9)  # broadcast over every row
    out = cugather.take_along_axis(data, idx, axis=1)
    assert out.shape == (rows, k) and out.size > 1 << 31
    assert_take(out, idx, n, 1, "raise", "take_along_axis")
