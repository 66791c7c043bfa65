"""Host tier: the kernels the library renders, compiled by the system C++ compiler
against tests/hostsim/cuda_shim.h and launched with the library's own plans,
compared with numpy.take.  No GPU needed.

Layers: the shim's own execution model (barriers, shared memory, shuffles,
fault reporting); every kernel key through a case its plan selects; random
shapes, layouts, dtypes and modes; the coverage assertion at the end of the
session (tests/hostsim/conftest.py runs it last).
"""

import zlib
from pathlib import Path

import numpy as np
import pytest

import cugather

from cugather.compile import render
from cugather.plan import tuning
from cugather.plan.core import Operand, alignment
from cugather.plan.gather import GATHER_KINDS, plan_gather
from cugather.plan.keys import KernelKey, all_kernel_keys
from cugather.plan.layout import ARGS_DTYPES, new_args
from hostsim import build, keycases, runner
from hostsim.cases import Case, random_cases
from support.reference import assert_same, gather_ref, random_data, random_indices

pytestmark = [
    pytest.mark.hostsim,
    pytest.mark.skipif(build.no_compiler_reason() is not None,
                       reason=build.no_compiler_reason() or ""),
]

ALL_KEYS = list(all_kernel_keys())
BUILT_KEYS = [k for k in ALL_KEYS if keycases.has_builder(k)]


@pytest.fixture(scope="module", autouse=True)
def _prebuilt():
    """Build every key's library up front, one compiler per core."""
    build.prebuild()


# ---------------------------------------------------------------- the shim itself
SELF_ARGS = np.dtype([("in", "<u8"), ("out", "<u8"), ("in64", "<u8"), ("out64", "<u8"),
                      ("mode", "<i4"), ("pad", "<i4")], align=True)
SELF_ENTRIES = ("st_reverse", "st_dynamic", "st_warp", "st_arith", "st_faulty")


@pytest.fixture(scope="module")
def selftest():
    text = (Path(build.SHIM).with_name("shim_selftest.cu")).read_text()
    source = build.translation_unit([("shim_selftest.cu", text)],
                                    [(e, "SelfArgs") for e in SELF_ENTRIES])
    lib = build.load_source(source, SELF_ENTRIES)

    def run(entry, grid, block, shared=0, ins=None, outs=None, in64=None, out64=None, mode=0,
            checked=True):
        args = np.zeros(1, SELF_ARGS)
        arrays = dict(ins=ins, outs=outs, in64=in64, out64=out64)
        for field, name in (("in", "ins"), ("out", "outs"), ("in64", "in64"), ("out64", "out64")):
            if arrays[name] is not None:
                args[field] = arrays[name].ctypes.data
        args["mode"] = mode
        readable = [runner.extent(a) for a in (ins, in64) if a is not None] if checked else []
        writable = [runner.extent(a) for a in (outs, out64) if a is not None] if checked else []
        runner.launch_entry(lib, entry, args, (grid, 1, 1), (block, 1, 1), shared,
                            readable=readable, writable=writable)

    return run


def test_shim_barrier_and_static_shared(selftest):
    ins = np.arange(3 * 256, dtype=np.int32) * 7 + 1
    outs = np.zeros_like(ins)
    selftest("st_reverse", 3, 256, ins=ins, outs=outs)
    assert_same(outs, ins.reshape(3, 256)[:, ::-1].reshape(-1), "block reverse")


def test_shim_dynamic_shared_is_per_block_and_poisoned(selftest):
    n, blocks = 96, 4
    ins = np.arange(blocks * n, dtype=np.int32) * 3 - 50
    outs = np.zeros(blocks * n + blocks, np.int32)
    selftest("st_dynamic", blocks, n, shared=n * 4, ins=ins, outs=outs)
    rotated = np.roll(ins.reshape(blocks, n), -1, axis=1).reshape(-1)
    assert_same(outs[:blocks * n], rotated, "rotate through dynamic shared memory")
    assert (outs[blocks * n:].view(np.uint32) == 0xCDCDCDCD).all(), outs[blocks * n:]


def test_shim_warp_collectives(selftest):
    block, grid = 64, 2
    rng = np.random.default_rng(5)
    ins = rng.integers(-1000, 1000, size=grid * block).astype(np.int32)
    outs = np.zeros(6 * grid * block, np.int32)
    selftest("st_warp", grid, block, ins=ins, outs=outs)
    got = outs.reshape(grid * block, 6)
    warps = ins.reshape(-1, 32)
    lane = np.arange(32)
    want = np.empty_like(got).reshape(-1, 32, 6)
    for w, v in enumerate(warps):
        want[w, :, 0] = v[3]
        want[w, :, 1] = np.where(lane >= 1, v[np.maximum(lane - 1, 0)], v)
        want[w, :, 2] = np.where(lane + 2 < 32, v[np.minimum(lane + 2, 31)], v)
        want[w, :, 3] = v[lane ^ 5]
        want[w, :, 4] = np.uint32(sum(1 << i for i in range(32) if v[i] & 1)).view(np.int32)
    for b in range(grid):
        want.reshape(grid, block, 6)[b, :, 5] = (ins[b * block:(b + 1) * block] & 1).sum()
    assert_same(got, want.reshape(got.shape), "shuffle, ballot, syncthreads_count")


def test_shim_high_products_and_atomics(selftest):
    rng = np.random.default_rng(6)
    n = 2 * 128
    in64 = rng.integers(0, 2**63, size=2 * n, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    out64 = np.full(3 * n + 1, np.uint64(2**64 - 1), np.uint64)
    selftest("st_arith", 2, 128, in64=in64, out64=out64)
    x, y = in64[0::2].tolist(), in64[1::2].tolist()
    hi32 = [((a & 0xFFFFFFFF) * (b & 0xFFFFFFFF)) >> 32 for a, b in zip(x, y)]
    hi64 = [(a * b) >> 64 for a, b in zip(x, y)]
    assert out64[0:3 * n:3].tolist() == hi32
    assert out64[1:3 * n:3].tolist() == hi64
    assert int(out64[-1]) == min(x)


@pytest.mark.parametrize("mode,message", [
    (0, "outside every input buffer"),
    (1, "divergent barrier"),
    (2, "segmentation fault"),
    (3, "misaligned"),
    (4, "exited"),
    (5, "outside every output buffer"),
])
def test_shim_reports_misbehaviour(selftest, mode, message):
    ins = np.arange(64, dtype=np.int32)
    outs = np.zeros(64, np.int32)
    out64 = np.zeros(4, np.uint64)
    with pytest.raises(runner.HostLaunchError, match=message):
        selftest("st_faulty", 1, 64, ins=ins, outs=outs, out64=out64, mode=mode)


@pytest.mark.parametrize("grid,block,shared", [
    ((0, 1, 1), (32, 1, 1), 0),
    ((1, 65536, 1), (32, 1, 1), 0),
    ((1, 1, 1), (1025, 1, 1), 0),
    ((1, 1, 1), (32, 32, 2), 0),
    ((1, 1, 1), (32, 1, 1), 48 * 1024 + 16),
])
def test_launch_config_is_checked(grid, block, shared):
    key = KernelKey("check", 0, "int64", "fast64", "raise")
    args = np.zeros(1, ARGS_DTYPES["CheckArgs"])
    with pytest.raises(runner.HostLaunchError):
        runner.launch(key, args, grid, block, shared)


def test_launch_bounds_are_enforced():
    """Kernels declare __launch_bounds__(CG_MAX_THREADS): a bigger block must fail."""
    key = KernelKey("check", 0, "int64", "fast64", "raise")
    idx = np.zeros(4, np.int64)
    flag = np.zeros(1, np.uint64)
    args = new_args("CheckArgs", n=4, axis_len=3)
    args["indices"], args["first_bad"] = idx.ctypes.data, flag.ctypes.data
    with pytest.raises(runner.HostLaunchError, match="__launch_bounds__"):
        runner.launch(key, args, (1, 1, 1), (512, 1, 1))


# ---------------------------------------------------------------- every kernel key
@pytest.mark.parametrize("key", BUILT_KEYS, ids=str)
def test_kernel_key(key):
    """Each key, launched as its plan launches it: several blocks with a partial
    last one, a small grid whose grid-stride loops iterate, negative and (for
    the non-raise modes) out-of-range indices."""
    blocks = 0
    for case in keycases.cases_for_key(key):
        case.check()
        blocks = max([blocks] + [g[0] * g[1] * g[2] for k, g, *_ in runner.last_launches()
                                 if k == key])
    assert key in runner.executed_keys(), f"no case launched {key.entry}"
    assert blocks >= 2, f"no case of {key.entry} spans several blocks (adjust keycases.py)"


# ---------------------------------------------------------------- targeted cases
@pytest.mark.parametrize("row_bytes", list(range(1, 34)) + [48, 50, 100])
@pytest.mark.parametrize("mode", ["raise", "fill"])
def test_row_tails(row_bytes, mode):
    """Rows of every byte length: the widest unit dividing the row moves it (a
    short call: one unit per thread, or chunks for rows of more than 16 units);
    through the rows kernel as well, or, for rows over 16 bytes that only 1- or
    2-byte units divide, the window kernel's 16-byte chunks."""
    force = (("kind", "window"),) if row_bytes > 16 and row_bytes % 4 else (("kind", "rows"),)
    for forced in ((), force):
        case = Case((37, row_bytes), "uint8", 0, (300,), "int32", mode, fill_value=7,
                    out_of_range=mode != "raise", seed=row_bytes, force=forced)
        case.check()
        key = next(k for k, *_ in runner.last_launches() if k.kind != "check")
        unit = min(16, row_bytes & -row_bytes)
        if not forced:
            units = row_bytes // unit
            assert key.kind == ("chunks" if units > 16 and unit < 16 else "lean"), key
        assert key.unit == (16 if key.kind == "window" else unit), key


@pytest.mark.parametrize("layout", ["reversed", "transposed", "strided", "offset", "sliced"])
@pytest.mark.parametrize("dtype", ["int8", "float16", "float32", "complex64", "complex128"])
@pytest.mark.parametrize("mode", ["raise", "wrap", "clip", "fill"])
def test_views(layout, dtype, mode):
    """Strided, transposed, negative-stride, misaligned and windowed data."""
    seed = zlib.crc32(f"{layout}/{dtype}/{mode}".encode())
    for axis in range(3):
        Case((5, 6, 7), dtype, axis, (4, 5), "int64", mode, layout=layout,
             fill_value=1 if mode == "fill" else 0, out_of_range=mode != "raise",
             seed=seed + axis).check()


@pytest.mark.parametrize("api,mode", [("gather", "raise"), ("take", "raise")])
@pytest.mark.parametrize("kind", GATHER_KINDS)
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("with_out", [False, True])
def test_raise_names_first_bad_index(api, mode, kind, index_dtype, with_out):
    """Without out= the gather kernel itself names the first bad index it reads (one
    launch); with out= the check kernel runs first, nothing after it, and out= stays
    untouched."""
    shape, axis = (((4, 60), 1) if kind in ("scalar", "inner", "slab", "slabw", "flatv") else
                   ((60, 3), 0) if kind in ("pack", "weave", "slabr") else
                   ((60, 70), 0) if kind == "span" else ((60, 5), 0))
    case = Case(shape, "float32", axis, (2, 400), index_dtype, mode, api, seed=7,
                bad_at=(650, 333, 512), force=(("kind", kind), ("max_grid", 1)),
                with_out=with_out)
    case.check()  # expects IndexError naming position 333
    launched = [k.kind for k, *_ in runner.last_launches()]
    assert launched == (["check"] if with_out else [kind])


def test_inner_grid_smaller_than_index_chunks():
    """A max_grid below the inner kernel's chunk count must still write every output."""
    Case((5, 50), "float32", 1, (4596,), "int32", "wrap", out_of_range=True, seed=3,
         force=(("kind", "inner"), ("max_grid", 1))).check()


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int32", "uint64", "float16",
                                   "float64", "complex128"])
def test_fill_values(dtype):
    """Fill patterns of every width, including ones narrower than the element."""
    rng = np.random.default_rng(zlib.crc32(dtype.encode()))
    data = runner.device_copy(random_data(rng, (9, 3), dtype))
    idx = np.array([[0, -1, 9], [-10, 100, 4]])
    for fill in ([True, False] if dtype == "bool" else [0, 1, 5]):
        got = runner.host_gather(data, idx, 0, mode="fill", fill_value=fill)
        want = np.take(data, np.where((idx >= -9) & (idx < 9), idx % 9, 0), axis=0)
        want[(idx < -9) | (idx >= 9)] = fill
        assert_same(got, want, f"dtype={dtype} fill={fill} indices={idx.tolist()}")


@pytest.mark.parametrize("mode", ["raise", "fill"])
def test_unaligned_elements(mode):
    """float64 data at an address that is 4 mod 8: 4-byte units in every mode
    (in fill mode each unit takes its half of the fill pattern), or, forced,
    16-byte chunks from that address."""
    rng = np.random.default_rng(11)
    raw = runner.device_empty((8 * 7 * 5 + 4,), np.uint8)
    data = raw[4:].view(np.float64).reshape(7, 5)
    data[...] = rng.standard_normal((7, 5))
    idx = np.array([6, -7, 3, 0, 12, -20])[: 4 if mode == "raise" else 6]
    want = np.take(data, np.where((idx >= -7) & (idx < 7), idx % 7, 0), axis=0)
    want[(idx < -7) | (idx >= 7)] = 2.5
    for force, kind, unit in (({}, "lean", 4), ({"kind": "rows"}, "rows", 4),
                              ({"kind": "window"}, "window", 16)):
        got = runner.host_gather(data, idx, 0, mode=mode, fill_value=2.5, **force)
        assert_same(got, want, f"mode={mode} indices={idx.tolist()} {force}")
        ran = [(k.kind, k.unit) for k, *_ in runner.last_launches() if k.kind != "check"]
        assert ran == [(kind, unit)], runner.last_launches()


@pytest.mark.parametrize("row_bytes", range(3, 16))
@pytest.mark.parametrize("mode", ["wrap", "fill"])
def test_pack_every_row_length_and_alignment(row_bytes, mode):
    """The pack kernel on rows of 3 to 15 bytes starting at every offset from a
    16-byte boundary, data from a leading and a middle axis (a chunk's rows then
    cross from one outer slice to the next), against numpy.take."""
    rng = np.random.default_rng(row_bytes * 31 + (mode == "fill"))
    n = 23
    for shift in range(16):
        for shape, axis in (((n, row_bytes), 0), ((3, n, row_bytes), 1)):
            size = int(np.prod(shape))
            raw = runner.device_empty((size + 32,), np.uint8)
            data = raw[shift:shift + size].reshape(shape)
            data[...] = rng.integers(0, 256, shape, dtype=np.uint8)
            idx = rng.integers(-n - 4 if mode == "fill" else -3 * n, 2 * n, size=37)
            got = runner.host_gather(data, idx, axis, mode=mode, fill_value=0xA5, kind="pack")
            want = gather_ref(data, idx, axis, mode, 0xA5)
            assert_same(got, want, f"rows of {row_bytes} B at offset {shift}, shape {shape}")
            ran = [k.kind for k, *_ in runner.last_launches()]
            assert ran == ["pack"], runner.last_launches()


@pytest.mark.parametrize("row_bytes", range(2, 16))
@pytest.mark.parametrize("mode", ["wrap", "fill"])
def test_weave_every_row_length_and_alignment(row_bytes, mode):
    """The weave kernel on rows of 2 to 15 bytes starting at offsets 0, 3, 8 and 13
    from a 16-byte boundary (a row then lies in one block or crosses into the
    next; the table's first and last blocks are read bounded; rows of one unit
    are refused), from a leading
    axis over several tiles and from a middle axis on a grid of one block (a
    lane's rows cross from one outer slice to the next), against numpy.take."""
    _weave_rows(row_bytes, mode)


def _weave_rows(row_bytes, mode):
    rng = np.random.default_rng(row_bytes * 37 + (mode == "fill"))
    n = 23
    for shift in (0, 3, 8, 13):
        for shape, axis, picks, grid in (((n, row_bytes), 0, 300, None),
                                         ((3, n, row_bytes), 1, 37, 1)):
            size = int(np.prod(shape))
            raw = runner.device_empty((size + 32,), np.uint8)
            data = raw[shift:shift + size].reshape(shape)
            data[...] = rng.integers(0, 256, shape, dtype=np.uint8)
            idx = rng.integers(-n - 4 if mode == "fill" else -3 * n, 2 * n, size=picks)
            if row_bytes in (2, 4, 8) and shift % row_bytes == 0:  # one unit: not weave's
                with pytest.raises(ValueError, match=f"rows here are {row_bytes} B of "
                                                     f"{row_bytes}-byte units"):
                    runner.host_gather(data, idx, axis, mode=mode, kind="weave")
                continue
            got = runner.host_gather(data, idx, axis, mode=mode, fill_value=0xA5, kind="weave",
                                     max_grid=grid)
            want = gather_ref(data, idx, axis, mode, 0xA5)
            assert_same(got, want, f"rows of {row_bytes} B at offset {shift}, shape {shape}")
            ran = [k.kind for k, *_ in runner.last_launches()]
            assert ran == ["weave"], runner.last_launches()


@pytest.mark.parametrize("row_bytes", [3, 7, 13])
@pytest.mark.parametrize("mode", ["wrap", "fill"])
def test_weave_tiny_tables(row_bytes, mode):
    """weave on tables of 1 to 5 rows at offsets 0, 5 and 13 from a 16-byte
    boundary: the first and last blocks are then one block, two neighbours or
    further apart, and most rows lie in one of them (every load inside the
    table), over several tiles, against numpy.take."""
    _weave_tiny(row_bytes, mode)


def _weave_tiny(row_bytes, mode):
    rng = np.random.default_rng(row_bytes * 101 + (mode == "fill"))
    for n in range(1, 6):
        for shift in (0, 5, 13):
            size = n * row_bytes
            raw = runner.device_empty((size + 32,), np.uint8)
            data = raw[shift:shift + size].reshape(n, row_bytes)
            data[...] = rng.integers(0, 256, (n, row_bytes), dtype=np.uint8)
            idx = rng.integers(-n - 2 if mode == "fill" else -3 * n, 2 * n + 1, size=(3, 170))
            got = runner.host_gather(data, idx, 0, mode=mode, fill_value=0x5A, kind="weave")
            want = gather_ref(data, idx, 0, mode, 0x5A)
            assert_same(got, want, f"{n} rows of {row_bytes} B at offset {shift}")
            ran = [k.kind for k, *_ in runner.last_launches()]
            assert ran == ["weave"], runner.last_launches()


def test_weave_edges_setting(monkeypatch):
    """weave built with its probe setting of the table's edges (tuning.WEAVE_EDGES:
    a warp reads the table's first and last blocks once) on rows of 3, 7 and 13
    bytes at every offset and on tiny tables, against numpy.take."""
    monkeypatch.setitem(tuning.KERNEL_DEFINES, "CG_WEAVE_EDGES", 1)
    _fresh_sources()
    try:
        text = render.render(KernelKey("weave", 1, "int64", "fast32", "wrap")).text
        assert "#define CG_WEAVE_EDGES 1" in text, "the setting is not rendered"
        for row_bytes in (3, 7, 13):
            for mode in ("wrap", "fill"):
                _weave_rows(row_bytes, mode)
                _weave_tiny(row_bytes, mode)
    finally:
        monkeypatch.undo()
        _fresh_sources()


@pytest.mark.parametrize("setting", [0, 1])
def test_slab_align_setting(setting, monkeypatch):
    """slab rendered with CG_SLAB_ALIGN at 0 and 1 (tuning.SLAB_ALIGN: each warp's
    stores on whole 32-unit stretches of the output) on 1- to 8-byte units, pick
    counts that start the outer rows at every phase of 32 units, fewer picks
    than a warp, small grids that loop, fill and raise modes, against
    numpy.take."""
    monkeypatch.setitem(tuning.KERNEL_DEFINES, "CG_SLAB_ALIGN", setting)
    _fresh_sources()
    try:
        text = render.render(KernelKey("slab", 4, "int64", "fast32", "wrap")).text
        assert f"#define CG_SLAB_ALIGN {setting}" in text, "the setting is not rendered"
        rng = np.random.default_rng(4099 + setting)
        for dtype in ("uint8", "int16", "float32", "int64"):
            for outer, axis_len, picks, grid in ((5, 50, 701, None), (7, 30, 33, 2),
                                                 (9, 13, 5, None), (3, 50, 1303, 1)):
                data = runner.device_copy(random_data(rng, (outer, axis_len), dtype))
                for mode in ("wrap", "fill"):
                    idx = rng.integers(-axis_len - (mode == "fill") * 4, axis_len + 3,
                                       size=picks)
                    force = dict(kind="slab") if grid is None else dict(kind="slab",
                                                                       max_grid=grid)
                    got = runner.host_gather(data, idx, 1, mode=mode, fill_value=7, **force)
                    assert_same(got, gather_ref(data, idx, 1, mode, 7),
                                f"{dtype} ({outer}, {axis_len}), {picks} picks, {mode}")
                    ran = [k.kind for k, *_ in runner.last_launches()]
                    assert ran == ["slab"], runner.last_launches()
        data = runner.device_copy(random_data(rng, (4, 20), "float32"))
        idx = np.arange(-20, 41) % 23 - 1  # -1 to 21: 20 and 21 are out of range
        with pytest.raises(IndexError, match="out of bounds"):
            runner.host_gather(data, idx, 1, mode="raise", kind="slab")
    finally:
        monkeypatch.undo()
        _fresh_sources()


def _fresh_sources():
    render.sources_digest.cache_clear()
    render.render.cache_clear()


@pytest.mark.parametrize("dtype,units", [("int16", 3), ("float16", 7), ("uint16", 5),
                                         ("float32", 3)])
@pytest.mark.parametrize("mode", ["clip", "fill"])
def test_weave_wider_units(dtype, units, mode):
    """weave with 2- and 4-byte units from aligned tables (one store per unit into
    the tile), fill values of the element's width, against numpy.take."""
    rng = np.random.default_rng(zlib.crc32(f"{dtype}/{units}/{mode}".encode()))
    data = runner.device_copy(random_data(rng, (5, 31, units), dtype))
    idx = rng.integers(-40, 40, size=(7, 29))
    got = runner.host_gather(data, idx, 1, mode=mode, fill_value=3, kind="weave")
    assert_same(got, gather_ref(data, idx, 1, mode, 3), f"{dtype} rows of {units} units")
    ran = [(k.kind, k.unit) for k, *_ in runner.last_launches()]
    assert ran == [("weave", np.dtype(dtype).itemsize)], runner.last_launches()


@pytest.mark.parametrize("row_bytes", range(2, 16))
@pytest.mark.parametrize("mode", ["wrap", "fill", "raise"])
@pytest.mark.parametrize("order", [0, 1])
def test_slabr_every_row_length_alignment_group_and_order(row_bytes, mode, order, monkeypatch):
    """The slabr kernel on rows of 2 to 15 bytes (staged at pitches of 4, 8 and
    16 bytes) from tables at offsets 0, 3, 8 and 13 from a 16-byte boundary
    (units of 1 byte; rows of one unit are refused), int64 and int32 indices,
    against numpy.take.  Order 0 (tiles of the output):
    one outer slice over several tiles; groups of outer slices that end mid-tile
    and mid-chunk on a grid of two blocks in x and y; outer slices not back to
    back (staged row by row) on a grid of one block.  Order 1 (a tile's picks
    written to each outer row of its group; tuning.SLABR_ORDER_PICKS and SLABR_ORDER_INDEX_BYTES lowered):
    groups of two outer rows of 13 picks, each tile partial, on a grid of two
    blocks; groups of outer rows not back to back, 150 picks each (a full tile
    and a partial one, every row at another place in a 16-byte chunk), on a grid
    of three blocks that loops over groups and tiles."""
    monkeypatch.setattr(tuning, "SLABR_ORDER_PICKS", 1 if order else 1 << 40)
    monkeypatch.setattr(tuning, "SLABR_ORDER_INDEX_BYTES", 0 if order else 1 << 62)
    rng = np.random.default_rng(row_bytes * 41 + ("wrap", "fill", "raise").index(mode) + 7 * order)
    n = 23
    cases = ([((n, row_bytes), 0, 300, None, False), ((700, n, row_bytes), 1, 13, 2, False),
              ((5, n, row_bytes), 1, 37, 1, True)] if order == 0 else
             [((700, n, row_bytes), 1, 13, 2, False), ((600, n, row_bytes), 1, 150, 3, True)])
    limits = runner.HOST.limits(runner.HOST_DEVICE)
    for shift in (0, 3, 8, 13):
        for shape, axis, picks, grid, sliced in cases:
            size = int(np.prod(shape))
            if sliced:  # every other outer slice of a table twice as long
                raw = runner.device_empty((2 * size + 32,), np.uint8)
                full = raw[shift:shift + 2 * size].reshape((2 * shape[0],) + shape[1:])
                data = full[::2]
            else:
                raw = runner.device_empty((size + 32,), np.uint8)
                data = raw[shift:shift + size].reshape(shape)
            data[...] = rng.integers(0, 256, shape, dtype=np.uint8)
            lo, hi = (0, n) if mode == "raise" else (-n - 4 if mode == "fill" else -3 * n, 2 * n)
            idx = rng.integers(lo, hi, size=picks).astype(np.int32 if shift % 2 else np.int64)
            if row_bytes in (2, 4, 8) and shift % row_bytes == 0:  # one unit: not slabr's
                with pytest.raises(ValueError, match=f"rows here are {row_bytes} B of "
                                                     f"{row_bytes}-byte units"):
                    runner.host_gather(data, idx, axis, mode=mode, kind="slabr")
                continue
            operand = Operand(data.shape, data.strides, 1, alignment(data.ctypes.data))
            p = plan_gather(operand, idx.shape, idx.dtype.name, axis, mode, limits=limits,
                            kind="slabr", max_grid=grid)
            assert p.fields["stage_unit"] == (order if p.fields["group"] >= 2 else 0), p.describe()
            assert p.fields["group"] >= 2 or shape[0] == n or sliced, p.describe()
            got = runner.host_gather(data, idx, axis, mode=mode, fill_value=0xA5, kind="slabr",
                                     max_grid=grid)
            want = gather_ref(data, idx, axis, mode, 0xA5)
            assert_same(got, want, f"rows of {row_bytes} B at offset {shift}, shape {shape}")
            ran = [k.kind for k, *_ in runner.last_launches()]
            assert ran == ["slabr"], runner.last_launches()


def test_slabr_refuses_an_axis_it_cannot_stage():
    """slabr stages an outer row's axis at its pitch: 3-byte rows take 4 bytes each,
    so an axis of tuning.SLAB_MAX_STAGE // 4 rows fits and one more does not."""
    n = tuning.SLAB_MAX_STAGE // 4
    rng = np.random.default_rng(5)
    data = runner.device_copy(rng.integers(0, 256, (n + 1, 3), dtype=np.uint8))
    idx = rng.integers(0, n, size=50)
    got = runner.host_gather(data[:n], idx, 0, kind="slabr")
    assert_same(got, gather_ref(np.asarray(data)[:n], idx, 0, "wrap", 0), "an axis that fits")
    with pytest.raises(ValueError, match="rows padded to 4 B"):
        runner.host_gather(data, idx, 0, kind="slabr")


@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32", "int64", "complex64"])
@pytest.mark.parametrize("mode", ["wrap", "fill", "clip"])
def test_flat_every_row_length_from_every_axis(dtype, mode):
    """The flat kernel on rows of 1 to 17 units of each width (a 16-byte chunk then
    holds a part of one row, or the ends and middles of several), from a leading
    and a middle axis (chunks cross from one outer slice to the next), with a
    partial last chunk, against numpy.take."""
    rng = np.random.default_rng(zlib.crc32(f"{dtype}/{mode}".encode()))
    n, item = 13, np.dtype(dtype).itemsize
    for units in range(1, 18):
        if units * item % 16 == 0:
            continue  # rows of 16-byte units: not the flat kernel's
        for shape, axis in (((n, units), 0), ((3, n, units), 1), ((2, n), 1)):
            host = rng.integers(0, 120, shape).astype(dtype)
            data = runner.device_copy(host)
            idx = rng.integers(-n - 4 if mode == "fill" else -3 * n, 2 * n,
                               size=int(rng.integers(1, 40)))
            got = runner.host_gather(data, idx, axis, mode=mode, fill_value=7, kind="flat")
            want = gather_ref(host, idx, axis, mode, 7)
            assert_same(got, want, f"{units} units of {dtype}, shape {shape}, axis {axis}")
            row = item * (1 if shape == (2, n) else units)
            ran = [(k.kind, k.unit) for k, *_ in runner.last_launches()]
            assert ran == [("flat", row & -row)], ran  # the widest unit dividing the row


@pytest.mark.parametrize("row_bytes", [256, 257, 263, 300, 511, 512, 1031, 16417])
@pytest.mark.parametrize("mode", ["wrap", "fill", "clip"])
def test_span_every_row_length_and_alignment(row_bytes, mode):
    """The span kernel on rows starting at every offset from a 16-byte boundary
    (so that the shuffled windows, the head and the tail bytes all occur), rows
    of 16417 bytes in several segments, from a leading and a middle axis, against
    numpy.take."""
    rng = np.random.default_rng(row_bytes * 7 + len(mode))
    n = 5
    for shift in range(16):
        for shape, axis in (((n, row_bytes), 0), ((2, n, row_bytes), 1)):
            size = int(np.prod(shape))
            raw = runner.device_empty((size + 32,), np.uint8)
            data = raw[shift:shift + size].reshape(shape)
            data[...] = rng.integers(0, 256, shape, dtype=np.uint8)
            k = 3 if row_bytes > 4096 else 11
            idx = rng.integers(-n - 2 if mode == "fill" else -3 * n, 2 * n, size=k)
            got = runner.host_gather(data, idx, axis, mode=mode, fill_value=0xA5, kind="span")
            want = gather_ref(data, idx, axis, mode, 0xA5)
            assert_same(got, want, f"rows of {row_bytes} B at offset {shift}, shape {shape}")
            ran = [k.kind for k, *_ in runner.last_launches()]
            assert ran == ["span"], runner.last_launches()


@pytest.mark.parametrize("row_bytes", [16, 17, 23, 31, 33, 47, 100, 257, 1031])
@pytest.mark.parametrize("mode", ["wrap", "clip"])
def test_bcastw_every_row_length_and_alignment(row_bytes, mode):
    """bcastw (an axis of length 1 in wrap and clip mode, no index read) on rows of
    16 bytes or more, from tables starting at every offset from a 16-byte
    boundary, with one and three outer slices and index counts whose repeats
    straddle 16-byte chunks and outer slices, against numpy.take; indices far
    out of range resolve to row 0 all the same."""
    rng = np.random.default_rng(row_bytes * 13 + len(mode))
    for shift in range(16):
        for shape, axis in (((1, row_bytes), 0), ((3, 1, row_bytes), 1)):
            size = int(np.prod(shape))
            raw = runner.device_empty((size + 32,), np.uint8)
            data = raw[shift:shift + size].reshape(shape)
            data[...] = rng.integers(0, 256, shape, dtype=np.uint8)
            idx = rng.integers(-1000, 1000, size=int(rng.integers(1, 12)))
            got = runner.host_gather(data, idx, axis, mode=mode, kind="bcastw")
            want = gather_ref(data, idx, axis, mode, 0)
            assert_same(got, want, f"rows of {row_bytes} B at offset {shift}, shape {shape}")
            ran = [k.kind for k, *_ in runner.last_launches()]
            assert ran == ["bcastw"], runner.last_launches()


def test_span_fills_whole_elements():
    """Fill mode through the span kernel with rows whose length is not a multiple
    of 16: the head and tail bytes of a filled row take the fill pattern's bytes at
    their output offsets, so every element is the fill value."""
    data = runner.device_copy(np.arange(6 * 37, dtype=np.float64).reshape(6, 37))
    idx = np.array([1, 9, -2, -40, 3, 100, 0])
    got = runner.host_gather(data, idx, 0, mode="fill", fill_value=-1.25, kind="span")
    assert_same(got, gather_ref(data, idx, 0, "fill", -1.25), f"indices {idx.tolist()}")


@pytest.mark.parametrize("kind", GATHER_KINDS)
@pytest.mark.parametrize("mode", ["fill", "raise"])
def test_empty_axis_reads_no_data(kind, mode):
    """An axis of size 0: fill mode fills every output unit, raise mode names index
    0; no kernel may read the table (it has no bytes; loads are range-checked)."""
    for shape, axis, dtype in (((3, 0, 5), 1, "float32"), ((0, 7), 0, "uint8"),
                               ((4, 0), 1, "int16")):
        data = runner.device_copy(np.zeros(shape, dtype))
        idx = np.array([0, -1, 2, 5])
        try:
            got = runner.host_gather(data, idx, axis, mode=mode, fill_value=3, kind=kind)
        except IndexError as e:
            assert mode == "raise" and "index 0 is out of bounds" in str(e), str(e)
            continue
        except ValueError:
            continue  # the kind does not apply to these rows
        assert mode == "fill", f"{kind} raised nothing for an empty axis"
        assert_same(got, gather_ref(np.zeros(shape, dtype), idx, axis, "fill", 3),
                    f"{kind}, shape {shape}")
        assert [k.kind for k, *_ in runner.last_launches()] == [kind]


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32", "float64"])
@pytest.mark.parametrize("mode", ["wrap", "clip", "fill", "raise"])
def test_flatv_reads_misaligned_indices_one_by_one(index_dtype, dtype, mode):
    """flatv loads a chunk's indices as vectors only from an index array aligned to
    them: the same gather from an array one element past an aligned address (a
    slice [1:]) takes the one-by-one loads and gives the same output."""
    from cugather.runtime.launch import run_plan
    from cugather.validate import fill_bytes

    rng = np.random.default_rng(zlib.crc32(f"{index_dtype}/{dtype}/{mode}".encode()))
    data = runner.device_copy(random_data(rng, (3, 70), dtype))
    n = 70
    wide = random_indices(rng, (321,), n, index_dtype, out_of_range=mode != "raise")
    wide[5] = 3 * n + 1 if mode != "raise" else 1  # wrap's far path in a chunk of its own
    base = runner.device_copy(wide)
    fill = fill_bytes(7, data.dtype) if mode == "fill" else None
    for idx in (base[:320], base[1:]):  # aligned, then one element past it
        op = cugather.GatherOp(1, mode=mode, fill_value=7)
        plan = op.plan(data, idx, kind="flatv")
        got = runner.run_on_host(lambda: run_plan(plan, data, idx, fill=fill,
                                                  backend=runner.HOST), [data, idx])
        want = gather_ref(np.asarray(data), np.asarray(idx), 1, mode, 7)
        assert_same(got, want, f"indices at +{idx.ctypes.data - base.ctypes.data} B")


def test_empty_and_scalar_indices():
    data = runner.device_copy(np.arange(24, dtype=np.float32).reshape(4, 6))
    assert_same(runner.host_gather(data, np.int64(2), 1), data[:, 2], "0-d index")
    assert_same(runner.host_gather(data, np.zeros((0, 3), np.int32), 0),
                np.zeros((0, 3, 6), np.float32), "empty indices")
    with pytest.raises(IndexError):
        runner.host_gather(np.zeros((2, 0), np.float32), [0], 1)


# ---------------------------------------------------------------- random cases
@pytest.mark.parametrize("seed", range(16))
def test_random_cases(seed):
    """Ranks 1-4, every layout, dtype, api and mode, some forced variants."""
    failures = []
    for case in random_cases(seed, 60):
        try:
            case.check()
        except AssertionError as e:
            failures.append(str(e))
    assert not failures, f"{len(failures)} of 60 cases failed; first:\n{failures[0]}"


# ---------------------------------------------------------------- coverage (runs last)
def _partial_run(request):
    """Why this session cannot judge coverage, or None."""
    if request.config.option.keyword:
        return "tests were selected with -k"
    collected = {Path(str(item.path)).resolve() for item in request.session.items}
    tier_files = [p.resolve() for p in Path(__file__).parent.glob("test_*.py")
                  if "mark.hostsim" in p.read_text(errors="replace")]
    missing = [p.name for p in tier_files if p not in collected]
    if missing:
        return f"host-tier files not collected: {', '.join(missing)}"
    return None


@pytest.mark.hostsim_coverage
def test_every_kernel_key_was_executed(request):
    """Every key of all_kernel_keys() ran on the host in this session."""
    why = _partial_run(request)
    if why:
        pytest.skip(f"coverage is judged on whole runs only: {why}")
    missing = sorted(k.entry for k in set(ALL_KEYS) - runner.executed_keys())
    assert not missing, (f"{len(missing)} kernel keys never ran on the host: "
                         f"{', '.join(missing[:20])}{' ...' if len(missing) > 20 else ''} "
                         f"(add cases in tests/hostsim/keycases.py or a host-tier test)")


# ---------------------------------------------------------------- the library's own path
def test_host_tier_binds_through_the_library(monkeypatch):
    """The host tier launches what cugather.runtime.bind packed: change how it
    packs the fill value and the host result changes with it."""
    import cugather.runtime.binding as bind_module

    data = runner.device_copy(np.arange(12, dtype=np.int32).reshape(4, 3))
    idx = np.array([0, 9, -1])
    assert_same(runner.host_gather(data, idx, 0, "fill", fill_value=7)[1], np.full(3, 7, np.int32),
                "fill row")
    monkeypatch.setattr(bind_module, "fill_words", lambda pattern: (0x0505050505050505,) * 2)
    got = runner.host_gather(data, idx, 0, "fill", fill_value=7)
    assert_same(got[1], np.full(3, 0x05050505, np.int32), "fill row packed by the patched bind")
    assert_same(got[[0, 2]], data[[0, 3]], "rows in range")


def test_host_tier_launches_through_the_library(monkeypatch):
    """Raise mode's read-back is the library's: make the flag read back as clean and
    the bad index goes unreported."""
    import cugather.runtime.launch as launch_module

    data = runner.device_copy(np.arange(12, dtype=np.float32).reshape(4, 3))
    with pytest.raises(IndexError, match="index 7 is out of bounds for axis 0 with size 4"):
        runner.host_gather(data, np.array([1, 7]), 0, "raise")
    assert [k.kind for k, *_ in runner.last_launches()] == ["lean"]  # the gather checked
    monkeypatch.setattr(launch_module.Flags, "read_and_give",
                        lambda self, addr: (self.give_back(addr), launch_module.NO_BAD)[1])
    runner.host_gather(data, np.array([1, 7]), 0, "raise")
    got = runner.host_gather(data, np.array([1, 2]), 0, "raise")
    assert_same(got, data[[1, 2]], "in-range rows")
    assert [k.kind for k, *_ in runner.last_launches()] == ["lean"]  # the gather alone
