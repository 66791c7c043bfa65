"""Cases that make the library's own planner launch one given kernel key.

``cases_for_key(key)`` returns runnable cases (objects with ``check()``) whose
plan selects exactly ``key``: the kind, index math and grid are forced through
``GatherOp.plan``'s test knobs, the unit width through the row size and item
size, the mode through the public mode (``clip_numpy`` is ``numpy.take``'s
clip).  Each key gets a launch over several blocks with a partial last one and
a launch on a small grid so that grid-stride loops iterate.

A new kernel kind registers its builder with :func:`register`; the host tier
fails for any key of ``all_kernel_keys()`` without one.
"""

from __future__ import annotations

import zlib
from typing import Callable

from cugather.plan.keys import KernelKey

from .cases import Case, fill_for

__all__ = ["register", "cases_for_key", "has_builder", "UNIT_DTYPES"]

#: dtypes whose item size is the unit width, rotated through per key.
UNIT_DTYPES = {
    1: ("int8", "uint8", "bool"),
    2: ("float16", "int16", "uint16"),
    4: ("float32", "int32", "uint32"),
    8: ("float64", "int64", "complex64", "uint64"),
    16: ("complex128",),
}

_BUILDERS: dict = {}


def register(kind: str) -> Callable:
    """Decorator: ``builder(key) -> list of cases`` for keys of ``kind``."""
    def wrap(builder):
        _BUILDERS[kind] = builder
        return builder
    return wrap


def has_builder(key: KernelKey) -> bool:
    return key.kind in _BUILDERS


def cases_for_key(key: KernelKey) -> list:
    """Cases that launch ``key``; KeyError names the missing builder."""
    if key.kind not in _BUILDERS:
        raise KeyError(f"no host-execution cases for kernel kind {key.kind!r} ({key.entry}); "
                       f"register a builder in tests/hostsim/keycases.py")
    return _BUILDERS[key.kind](key)


def _seed(key: KernelKey, variant: str) -> int:
    return zlib.crc32(f"{key.entry}/{variant}".encode())


def _common(key: KernelKey, variant: str, force_kind: bool = True, max_grid=None) -> dict:
    """Case fields shared by the gather kinds: dtype, mode, api, forced plan."""
    dtypes = UNIT_DTYPES[key.unit]
    dtype = dtypes[_seed(key, "dtype") % len(dtypes)]
    take = key.mode == "clip_numpy"
    mode = "clip" if take else key.mode
    force = ([("kind", key.kind)] if force_kind else []) + [("math_name", key.math)]
    if max_grid is not None:
        force.append(("max_grid", max_grid))
    return dict(dtype=dtype, index_dtype=key.index_dtype, mode=mode,
                api="take" if take else "gather",
                fill_value=fill_for(dtype) if mode == "fill" else 0,
                out_of_range=key.mode != "raise", seed=_seed(key, variant),
                force=tuple(force), expect_key=key.entry)


# Sizes are chosen so that, for the tilings the planner has used so far, the
# "blocks" cases span several blocks with a partial last one; test_hostsim.py
# asserts the several blocks.  Odd unit counts keep the unit at the item size.
@register("rows")
def _rows(key: KernelKey) -> list:
    return [
        Case((3, 40, 3), axis=1, index_shape=(900,), **_common(key, "blocks")),
        Case((3, 40, 3), axis=1, index_shape=(30, 30), **_common(key, "stride", max_grid=1)),
        Case((7, 301), axis=0, index_shape=(5,), **_common(key, "long")),
        Case((7, 301), axis=0, index_shape=(5,), **_common(key, "long-stride", max_grid=1)),
    ]


@register("chunks")
def _chunks(key: KernelKey) -> list:
    return [
        Case((4, 1101), axis=0, index_shape=(6,), **_common(key, "blocks")),
        Case((4, 1101), axis=0, index_shape=(2, 3), **_common(key, "stride", max_grid=1)),
        Case((3, 7, 301), axis=1, index_shape=(5,), **_common(key, "outer")),
    ]


@register("chunks16")
def _chunks16(key: KernelKey) -> list:
    # 16 units per thread (2- and 4-byte units): rows of 1101 units take 96
    # threads (the last ones partly idle), two rows per block; rows of 4099
    # units split in two chunks.
    return [
        Case((4, 1101), axis=0, index_shape=(7,), **_common(key, "blocks")),
        Case((4, 1101), axis=0, index_shape=(2, 3), **_common(key, "stride", max_grid=1)),
        Case((3, 4099), axis=0, index_shape=(5,), **_common(key, "split")),
        Case((3, 7, 301), axis=1, index_shape=(5,), **_common(key, "outer")),
    ]


@register("scalar")
def _scalar(key: KernelKey) -> list:
    return [
        Case((2, 50), axis=1, index_shape=(1300,), **_common(key, "blocks")),
        Case((2, 50), axis=1, index_shape=(26, 50), **_common(key, "stride", max_grid=1)),
    ]


@register("inner")
def _inner(key: KernelKey) -> list:
    # gather_inner has no grid-stride loop over blockIdx.x, so the small grid
    # caps only blockIdx.y here (test_hostsim.py holds the other case).
    return [
        Case((5, 50), axis=1, index_shape=(700,), **_common(key, "blocks")),
        Case((7, 50), axis=1, index_shape=(200,), **_common(key, "stride", max_grid=2)),
        Case((40,), axis=0, index_shape=(3, 7), **_common(key, "small")),
    ]


@register("slab")
def _slab(key: KernelKey) -> list:
    # Groups of outer rows: one group, several (a small grid loops over both axes),
    # the index loop of one block, and a non-leading axis whose outer rows are not
    # back to back (row by row).
    return [
        Case((5, 50), axis=1, index_shape=(700,), **_common(key, "blocks")),
        Case((7, 50), axis=1, index_shape=(20, 30), **_common(key, "stride", max_grid=2)),
        # one block: every thread's loop takes CG_SLAB_ILP indices, then a partial set
        Case((3, 50), axis=1, index_shape=(1300,), **_common(key, "ilp", max_grid=1)),
        Case((4, 30), axis=1, index_shape=(300,), layout="sliced", **_common(key, "sliced")),
        Case((4, 30, 1), axis=1, index_shape=(300,), layout="offset", **_common(key, "offset")),
        Case((40,), axis=0, index_shape=(3, 7), **_common(key, "small")),
    ]


@register("slabw")
def _slabw(key: KernelKey) -> list:
    # slab's groups, each thread storing a word of several consecutive picks: index
    # counts that no word divides start each outer row at another phase of the
    # word, and fewer picks than a word leave every word partial; one block (every
    # thread loops over word slots, lane 0 of each warp loading the picks before
    # its own); outer rows not back to back.
    return [
        Case((5, 50), axis=1, index_shape=(700,), **_common(key, "blocks")),
        Case((5, 50), axis=1, index_shape=(701,), **_common(key, "phase")),
        Case((9, 30), axis=1, index_shape=(3,), **_common(key, "few")),
        Case((7, 50), axis=1, index_shape=(20, 31), **_common(key, "stride", max_grid=2)),
        Case((3, 50), axis=1, index_shape=(1303,), **_common(key, "loop", max_grid=1)),
        Case((4, 30), axis=1, index_shape=(301,), layout="sliced", **_common(key, "sliced")),
        Case((4, 30, 1), axis=1, index_shape=(302,), layout="offset", **_common(key, "offset")),
        Case((40,), axis=0, index_shape=(3, 7), **_common(key, "small")),
    ]


def _window_common(key: KernelKey, variant: str, dtype: str, max_grid=None) -> dict:
    fields = _common(key, variant, max_grid=max_grid)
    fields.update(dtype=dtype, fill_value=fill_for(dtype) if fields["mode"] == "fill" else 0)
    return fields


@register("window")
def _window(key: KernelKey) -> list:
    # Rows not a multiple of 16 bytes: chunks straddle two rows, the last chunk
    # is partial, rows start at every alignment (the offset layout puts data at
    # an address one item past a 256-byte boundary).
    return [
        Case((50, 100), axis=0, index_shape=(330,), **_window_common(key, "blocks", "uint8")),
        Case((3, 40, 10), axis=1, index_shape=(20, 11), layout="offset",
             **_window_common(key, "offset", "int16", max_grid=1)),
        Case((7, 5), axis=0, index_shape=(9,), **_window_common(key, "small", "float64")),
    ]


@register("pack")
def _pack(key: KernelKey) -> list:
    # Rows of 3 to 15 bytes, several per 16-byte chunk: 7-byte rows over several
    # blocks with a partial last chunk, 10-byte rows of several outer slices (the
    # chunk's rows cross from one slice to the next) at every alignment on a
    # grid of one block, 3-byte rows (six rows in a chunk), 12-byte rows.
    return [
        Case((50, 7), axis=0, index_shape=(1300,), **_window_common(key, "blocks", "uint8")),
        Case((3, 40, 5), axis=1, index_shape=(20, 11), layout="offset",
             **_window_common(key, "offset", "int16", max_grid=1)),
        Case((4, 9, 3), axis=1, index_shape=(50,), layout="offset",
             **_window_common(key, "three", "uint8")),
        Case((7, 3), axis=0, index_shape=(9,), **_window_common(key, "small", "float32")),
    ]


@register("weave")
def _weave(key: KernelKey) -> list:
    # Rows of two units or more under 16 bytes (7, 5 or 3 units), tiles of 128
    # rows: 11 tiles over two blocks, the last one partial; rows of several outer
    # slices from a table one item past a 256-byte boundary on a grid of one
    # block whose warps take two tiles each; one partial tile of three-unit rows.
    units = {1: 7, 2: 5, 4: 3}[key.unit]
    return [
        Case((50, units), axis=0, index_shape=(1300,), **_common(key, "blocks")),
        Case((3, 40, units), axis=1, index_shape=(30, 13), layout="offset",
             **_common(key, "loop", max_grid=1)),
        Case((7, 3), axis=0, index_shape=(9,), **_common(key, "small")),
    ]


@register("slabr")
def _slabr(key: KernelKey) -> list:
    # Rows of 7, 5 or 3 units (7, 10 or 12 bytes: pitches 8 and 16) from staged
    # groups of outer rows: groups of five rows of 11 picks, so that tiles of 128
    # rows cross the groups' edges mid-chunk, two blocks looping over the groups;
    # one block looping over the groups and 31 tiles; a group per block; a table one
    # item past an aligned address; an axis of length 1 (s_axis 0); one outer
    # slice.  (test_gather_host.py stages outer rows that are not back to back.)
    units = {1: 7, 2: 5, 4: 3}[key.unit]
    return [
        Case((2200, 3, units), axis=1, index_shape=(11,), **_common(key, "groups", max_grid=2)),
        Case((3, 40, units), axis=1, index_shape=(1300,), **_common(key, "loop", max_grid=1)),
        Case((6, 40, units), axis=1, index_shape=(300,), **_common(key, "blocks")),
        Case((4, 30, units), axis=1, index_shape=(50,), layout="offset", **_common(key, "offset")),
        Case((5, 1, units), axis=1, index_shape=(40,), **_common(key, "axis1")),
        Case((7, units), axis=0, index_shape=(9,), **_common(key, "small")),
    ]


@register("flat")
def _flat(key: KernelKey) -> list:
    # Rows of an odd number of units (the unit stays the item size) as 16-byte
    # chunks: over several blocks with a partial last chunk; rows of several outer
    # slices from a misaligned table on a grid of one block (chunks cross rows and
    # slices, the loop strides); rows of one unit, alone and with outer slices.
    return [
        Case((50, 7), axis=0, index_shape=(1300,), **_common(key, "blocks")),
        Case((3, 40, 5), axis=1, index_shape=(20, 11), layout="offset",
             **_common(key, "offset", max_grid=1)),
        Case((40,), axis=0, index_shape=(3, 7), **_common(key, "small")),
        Case((6, 30), axis=1, index_shape=(50,), **_common(key, "outer", max_grid=2)),
    ]


@register("slabf")
def _slabf(key: KernelKey) -> list:
    # flat's chunks over staged groups of outer rows: groups of three rows whose
    # output (165 units) no chunk width divides, so that a chunk runs past each
    # group and reads the table in global memory, two blocks looping over the
    # groups; one block looping over the groups and over each group's chunks; a
    # group per block; rows of one unit; outer rows not back to back (staged row
    # by row); a misaligned table (1-unit staging loads); an axis of length 1;
    # one outer slice.  Rows of a chunk or more take the warps' tiles (rows of 5
    # and 7 units for 4- and 8-byte units; 19 units for every width): several
    # tiles per warp over groups of three outer rows, a tiny table of one outer
    # slice whose tiles cross many rows each.
    return [
        Case((7, 20, 19), axis=1, index_shape=(130,), **_common(key, "tile-groups", max_grid=2)),
        Case((2, 19), axis=0, index_shape=(2500,), **_common(key, "tile-tiny", max_grid=3)),
        Case((2200, 3, 5), axis=1, index_shape=(11,), **_common(key, "groups", max_grid=2)),
        Case((3, 40, 7), axis=1, index_shape=(1300,), **_common(key, "loop", max_grid=1)),
        Case((6, 40, 7), axis=1, index_shape=(300,), **_common(key, "blocks")),
        Case((9, 50), axis=1, index_shape=(301,), **_common(key, "one-unit", max_grid=3)),
        Case((4, 30), axis=1, index_shape=(41,), layout="sliced", **_common(key, "sliced")),
        Case((4, 30, 3), axis=1, index_shape=(50,), layout="offset", **_common(key, "offset")),
        Case((5, 1, 7), axis=1, index_shape=(40,), **_common(key, "axis1")),
        Case((40,), axis=0, index_shape=(3, 7), **_common(key, "small")),
    ]


@register("flatv")
def _flatv(key: KernelKey) -> list:
    # Rows of one unit, index counts a multiple of every chunk width (8): one
    # slice over several blocks, outer slices on a grid of one block (the loop
    # strides across slices), a middle axis on a grid of two.
    return [
        Case((50,), axis=0, index_shape=(8, 400), **_common(key, "blocks")),
        Case((6, 30), axis=1, index_shape=(5, 8), **_common(key, "outer", max_grid=1)),
        Case((3, 40, 1), axis=1, index_shape=(48,), **_common(key, "middle", max_grid=2)),
    ]


@register("lean")
def _lean(key: KernelKey) -> list:
    # One unit per thread: rows of several units over several blocks with a
    # partial last one, a middle axis on a grid of one block (the loop strides
    # across rows and outer slices), rows of one unit.
    return [
        Case((50, 7), axis=0, index_shape=(130,), **_common(key, "blocks")),
        Case((3, 40, 5), axis=1, index_shape=(20, 11), **_common(key, "stride", max_grid=1)),
        Case((40,), axis=0, index_shape=(3, 7), **_common(key, "small")),
    ]


@register("bcast")
def _bcast(key: KernelKey) -> list:
    # An axis of length 1 (every index resolves to 0, none is read): rows of
    # several units with outer slices over several blocks with a partial last
    # chunk, rows of one unit on a grid of one block (the loop strides), the
    # axis first and a 1-d table.
    return [
        Case((50, 1, 7), axis=1, index_shape=(130,), **_common(key, "blocks")),
        Case((6, 1), axis=1, index_shape=(20, 11), **_common(key, "stride", max_grid=1)),
        Case((1, 9), axis=0, index_shape=(3, 7), **_common(key, "first")),
        Case((1,), axis=0, index_shape=(37,), **_common(key, "one")),
    ]


@register("bcastw")
def _bcastw(key: KernelKey) -> list:
    # An axis of length 1 (no index read), rows of 16 bytes or more not a
    # multiple of 16: chunks that straddle two repeats of a row and two outer
    # slices, a partial last chunk, rows at every alignment from a table one item
    # past a 256-byte boundary on a grid of one block, a single outer slice.
    return [
        Case((40, 1, 37), axis=1, index_shape=(23,), **_window_common(key, "blocks", "uint8")),
        Case((5, 1, 21), axis=1, index_shape=(3, 7), layout="offset",
             **_window_common(key, "offset", "int8", max_grid=1)),
        Case((1, 9, 3), axis=0, index_shape=(41,), **_window_common(key, "first", "float16")),
    ]


@register("span")
def _span(key: KernelKey) -> list:
    # Rows of 16-byte units (1 segment, several rows per block), rows of 301
    # bytes at every alignment from a misaligned table (d != 0: shuffled
    # windows, head and tail bytes) on a grid of one block, rows of 2 KB in
    # several segments on a grid that loops over rows and segments.
    return [
        Case((40, 20), axis=0, index_shape=(90,), **_window_common(key, "blocks", "complex128")),
        Case((3, 20, 301), axis=1, index_shape=(7, 3), layout="offset",
             **_window_common(key, "offset", "uint8", max_grid=1)),
        Case((9, 1031), axis=0, index_shape=(13,), **_window_common(key, "segments", "int16",
                                                                    max_grid=2)),
    ]


@register("strided")
def _strided(key: KernelKey) -> list:
    # Non-contiguous layouts: the unit is the item size; 750 / 800 output units
    # over 256-thread blocks -> 3 and 4 blocks, the last partial.
    return [
        Case((13, 30), axis=0, index_shape=(25,), layout="transposed", **_common(key, "blocks")),
        Case((4, 9, 5), axis=1, index_shape=(4, 10), layout="reversed", **_common(key, "rev")),
        Case((6, 7, 5), axis=2, index_shape=(9,), layout="strided",
             **_common(key, "stride", max_grid=1)),
    ]


@register("check")
def _check(key: KernelKey) -> list:
    # Raise mode runs the check first where out= is given: in-range indices (it
    # must stay quiet), and three bad ones met by one thread in different
    # grid-stride rounds (it must name the first position, 301, and leave out=
    # untouched).  Without out= the gather checks the indices it reads itself.
    return [
        Case((50, 3), "float32", 0, (700,), key.index_dtype, "raise", seed=_seed(key, "ok"),
             with_out=True, expect_key=key.entry),
        Case((50, 3), "float32", 0, (3, 300), key.index_dtype, "raise", seed=_seed(key, "bad"),
             bad_at=(777, 301, 640), with_out=True, force=(("max_grid", 1),)),
    ]


@register("sharded")
def _sharded(key: KernelKey) -> list:
    # Rows of three units over uneven shards (one empty): several blocks with
    # a partial last one, a one-block grid whose loops iterate, long rows
    # split over blockIdx.y chunks, and many packed shards (the unrolled
    # owner scan); in raise mode in-range indices plus one case with bad ones.
    from .sharded import ShardedCase

    dtype = UNIT_DTYPES[key.unit][_seed(key, "dtype") % len(UNIT_DTYPES[key.unit])]
    common = dict(dtype=dtype, index_dtype=key.index_dtype, mode=key.mode,
                  fill_value=fill_for(dtype) if key.mode == "fill" else 0,
                  out_of_range=key.mode != "raise",
                  expect_key=key.entry)
    cases = [
        ShardedCase((9, 0, 14), (3,), index_shape=(700,), seed=_seed(key, "blocks"), **common),
        ShardedCase((4, 7, 0, 12), (3,), index_shape=(30, 30), max_grid=1,
                    seed=_seed(key, "stride"), **common),
        ShardedCase((3, 5), (301,), index_shape=(9,), seed=_seed(key, "long"), **common),
        ShardedCase(tuple(i % 3 for i in range(40)), (3,), index_shape=(200,), packed=True,
                    seed=_seed(key, "many"), **common),
    ]
    if key.mode == "raise":
        cases.append(ShardedCase((6, 0, 5), (3,), index_shape=(3, 300), max_grid=1,
                                 bad_at=(777, 301, 640), seed=_seed(key, "bad"),
                                 **dict(common, out_of_range=False)))
    return cases
