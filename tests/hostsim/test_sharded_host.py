"""Host tier: the sharded kernel (cugather.distributed's peer reads) over NumPy shards.

The kernel source rendered for the GPU runs on the host (tests/hostsim)
with shard base addresses in its argument block, planned by the library's
planner: uneven and empty shards, up to MAX_RANKS shards, misaligned shard
bases (narrower units), rows of 1 byte to 8 KB, every mode and index dtype,
compared byte for byte with NumPy over the concatenated table.  Loads are
checked against each shard's own bytes.
"""

import zlib

import numpy as np
import pytest

from cugather.distributed.plan import MAX_RANKS
from hostsim import build, runner
from hostsim.sharded import ShardedCase

pytestmark = [
    pytest.mark.hostsim,
    pytest.mark.skipif(build.no_compiler_reason() is not None,
                       reason=build.no_compiler_reason() or ""),
]

MODES = ["raise", "wrap", "clip", "clip_numpy", "fill"]
FILLS = {"uint8": 7, "int8": -3, "float16": 2.5, "int32": -7, "float32": 1.5, "int64": -9,
         "float64": 3.25, "complex128": 1.5 - 2j, "bool": True}


def _launched(kind="sharded"):
    return [k for k, *_ in runner.last_launches() if k.kind == kind]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("row_bytes", [1, 2, 3, 6, 8, 12, 16, 40, 512, 8192])
def test_row_sizes_and_modes(row_bytes, mode):
    rng = np.random.default_rng(row_bytes * 7 + MODES.index(mode))
    sizes = (5, 0, 11, 3)
    case = ShardedCase(sizes, (row_bytes,), "uint8", (int(rng.integers(1, 300)),),
                       index_dtype=["int32", "int64"][row_bytes % 2], mode=mode,
                       fill_value=7, out_of_range=mode != "raise", seed=row_bytes)
    case.check()
    (key,) = _launched()
    assert key.unit == min(16, row_bytes & -row_bytes)


@pytest.mark.parametrize("misalign", [1, 2, 4, 8])
def test_misaligned_shard_bases_narrow_the_unit(misalign):
    ShardedCase((7, 9), (16,), "uint8", (50,), mode="wrap", out_of_range=True,
                misalign=misalign, seed=misalign).check()
    (key,) = _launched()
    assert key.unit == misalign


@pytest.mark.parametrize("n_shards", [1, 2, 5, 33, MAX_RANKS])
def test_many_shards_packed_with_poisoned_gaps(n_shards):
    rng = np.random.default_rng(n_shards)
    sizes = tuple(int(s) for s in rng.integers(0, 4, size=n_shards))
    if not sum(sizes):
        sizes = sizes[:-1] + (2,)
    for mode in ("wrap", "fill"):
        ShardedCase(sizes, (3,), "float32", (257,), mode=mode, fill_value=-1.5,
                    out_of_range=True, packed=True, seed=n_shards).check()


@pytest.mark.parametrize("dtype", sorted(FILLS))
@pytest.mark.parametrize("row_shape", [(), (3,), (2, 5)])
def test_dtypes_and_row_shapes(dtype, row_shape):
    seed = zlib.crc32(f"{dtype}/{row_shape}".encode())
    for mode in ("clip", "fill"):
        ShardedCase((4, 0, 6), row_shape, dtype, (6, 7), mode=mode, fill_value=FILLS[dtype],
                    out_of_range=True, seed=seed).check()


@pytest.mark.parametrize("row_unroll", [1, 2, 4])
@pytest.mark.parametrize("max_grid", [1, 3, None])
def test_rows_per_thread_and_small_grids(row_unroll, max_grid):
    ShardedCase((13, 8, 0, 21), (5,), "float16", (333,), mode="wrap",
                out_of_range=True, row_unroll=row_unroll, max_grid=max_grid, seed=5).check()


def test_raise_mode_names_the_first_bad_position():
    """The sharded kernel itself names the first bad index it reads (one launch)."""
    case = ShardedCase((4, 6), (2,), "int32", (50,), mode="raise", bad_at=(30, 11), seed=1)
    with pytest.raises(IndexError, match=r"index 21 is out of bounds for axis 0 with size 10 "
                                         r"\(at indices\[11\]; valid range \[-10, 9\]\)"):
        case.run(*_built(case))
    assert [k.kind for k, *_ in runner.last_launches()] == ["sharded"]


def _built(case):
    rng = np.random.default_rng(case.seed)
    full, offsets, shards, ranges = case._shards(rng)
    return full, offsets, shards, ranges, case._indices(rng, offsets[-1])


def test_empty_indices_empty_table_and_scalar_index():
    ShardedCase((3, 4), (2,), "float32", (0,), seed=2).check()
    ShardedCase((3, 4), (2,), "float32", (), seed=3).check()
    ShardedCase((0, 0), (2,), "float32", (5,), mode="fill", fill_value=2.5, seed=4).check()
    ShardedCase((0, 0), (2,), "float32", (5,), mode="wrap", seed=4).check()  # IndexError
