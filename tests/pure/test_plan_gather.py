"""Plans without a GPU: variant choice, units, grids, divisors, and a NumPy
emulation of the kernels' addressing checked against numpy.take."""

import math

import numpy as np
import pytest

import cugather
from cugather.plan import tuning
from cugather.plan.fastdiv import fast_div
from cugather.plan.core import DeviceLimits, Operand, merge_dims, unit_for
from cugather.plan.gather import plan_gather
from support.reference import gather_ref, random_data, random_indices


def plan_of(data, idx_shape, axis=0, mode="wrap", index_dtype="int64", **kw):
    op = data if isinstance(data, Operand) else Operand.contiguous(data[0], np.dtype(data[1]).itemsize)
    return plan_gather(op, idx_shape, index_dtype, axis, mode, **kw)


@pytest.mark.parametrize("shape,dtype,axis,n_idx,kind,unit", [
    ((50000, 512), "f4", 0, 76800, "rows", 16),
    ((65536, 4096), "f2", 0, 16384, "chunks", 16),
    ((1000000, 16), "f4", 0, 4000000, "rows", 16),
    ((10000000, 3), "f2", 0, 20000000, "flat", 2),  # rows under 16 B: flat's chunks
    ((1000000, 100), "u1", 0, 1000000, "flat", 4),  # several 4-byte units: flat's chunks
    ((100000, 126), "f4", 0, 100000, "flat", 8),  # 504 B rows: within FLAT_RULE_MAX_ROW
    ((100000, 130), "f4", 0, 100000, "rows", 8),  # 520 B rows: past it
    ((1000000, 99), "u1", 0, 1000000, "window", 16),  # 1-byte units: 16 B chunks instead
    ((1000000, 16), "u1", 0, 1000000, "scalar", 16),  # one 16 B unit per row
    ((64000000,), "f4", 0, 32000000, "flatv", 4),  # one-unit rows: the rule's flatv
    ((8192, 8192), "f4", 1, 4096, "inner", 4),
    ((65536, 8192), "f4", 1, 10, "flat", 4),  # no staging; 10 picks do not fill flatv's chunks
    ((64, 1024, 256), "f2", 1, 512, "rows", 16),
    ((100000, 64), "c16", 0, 200000, "rows", 16),
    ((1000, 4, 2), "f4", 1, 3000, "flatv", 8),  # 32 B axis rows: staging does not pay
    ((1000, 64, 2), "f4", 1, 3000, "inner", 8),  # tiny inner block, 512 B axis rows
    ((8192,), "f4", 0, 400000, "flatv", 4),      # one row: direct picks hit L1
    ((4096, 512, 128), "f2", 2, 64, "flatv", 2),  # 64 picks do not fill a staging block
    # short calls (at most 1 MiB out): one unit per thread, chunks for rows of
    # more than 16 narrow units
    ((8192, 8192), "f4", 1, 10, "lean", 4),
    ((8192,), "f4", 0, 4096, "lean", 4),
    ((1000, 64), "f2", 0, 4096, "lean", 16),
    ((33, 975), "u1", 0, 13, "chunks", 1),
    ((1000, 99), "f4", 0, 300, "chunks", 4),
    ((1000, 100), "c16", 0, 300, "lean", 16),
])
def test_variant_and_unit(shape, dtype, axis, n_idx, kind, unit):
    p = plan_of((shape, dtype), (n_idx,), axis)
    assert (p.key.kind, p.key.unit) == (kind, unit), p.describe()
    assert p.out_shape == shape[:axis] + (n_idx,) + shape[axis + 1:]


@pytest.mark.parametrize("shape,dtype,axis,n_idx,out_align,kind", [
    ((64000000,), "f4", 0, 32000000, 256, "flatv"),  # the index count fills flatv's chunks
    ((64000000,), "f4", 0, 32000001, 256, "flat"),   # it does not
    ((64000000,), "f4", 0, 32000000, 8, "scalar"),   # an output off 16 bytes: no flat kind
    ((4000000,), "c16", 0, 3000000, 256, "scalar"),  # 16-byte units: no flat kind
    ((8192, 8192), "f4", 1, 4096, 256, "inner"),     # staging the axis row pays: before them
])
def test_one_unit_rule_tries_its_kinds_before_scalar(monkeypatch, shape, dtype, axis, n_idx,
                                                     out_align, kind):
    def plan():
        return plan_of((shape, dtype), (n_idx,), axis, out_align=out_align, limits=DeviceLimits())

    monkeypatch.setattr(tuning, "ONE_UNIT_RULE", ("flatv", "flat"))
    p = plan()
    assert p.key.kind == kind, p.describe()
    assert p.chosen_by.startswith("rule: one-unit rows")
    monkeypatch.setattr(tuning, "ONE_UNIT_RULE", ())  # off: scalar
    assert plan().key.kind == ("scalar" if kind in ("flatv", "flat") else kind)


def test_row_kernels_cover_rows_and_units():
    from cugather.plan.gather import _row_split, _rows_cu as cu_rows

    for cols in (2, 3, 17, 64, 255, 256, 257, 300, 512, 513, 1024, 1025, 4096, 100000):
        p = plan_of(((40, cols), "f4"), (max(7, 2**20 // (4 * cols) + 1),))  # not short
        f = p.fields
        if p.key.kind == "window":
            assert cols * 4 % 16 and f["row_bytes"] == cols * 4
            assert f["chunks"] * 16 >= f["out_bytes"] == 7 * cols * 4
            assert p.grid[0] * p.block[0] * 2 >= f["chunks"]
            continue
        if p.key.kind == "flat":  # rows under 16 B, or of 4-byte units up to 512 B
            assert cols in (2, 3) or (cols * 4 % 16 and cols * 4 <= tuning.FLAT_RULE_MAX_ROW)
            assert f["chunks"] * 16 >= f["total"] * p.key.unit
            if cols in (2, 3):
                continue
            # the rows kernel's split of the same rows, where the table or a caller names it
            p = plan_of(((40, cols), "f4"), (max(7, 2**20 // (4 * cols) + 1),), kind="rows")
            f = p.fields
        if p.key.kind not in ("rows", "chunks"):
            assert f["units"] == 1
            continue
        assert p.key.kind == ("rows" if f["units"] <= 256 * cu_rows(p.key.unit) else "chunks"), cols
        block, cu, chunks = _row_split(p.key.kind, f["units"], p.key.unit)
        tx, ty, _ = p.block
        assert tx == block[0] and ty <= block[1] and tx * ty <= 256  # ty: see _spread
        if p.key.kind == "chunks" and chunks > 1:  # the row shared evenly, warp-rounded
            assert tx <= 192 and chunks * tx * cu - f["units"] < chunks * 32 * cu
        assert cu == (cu_rows(p.key.unit) if p.key.kind == "rows" else 4)
        ru = 1
        if p.key.kind == "rows":
            ru = f["row_unroll"]
            assert ru in (1, 2, 4)
        assert p.grid[0] * ty * ru >= f["rows"]
        assert p.grid[1] * tx * cu >= f["units"]
        assert f["units"] * p.key.unit == cols * 4


@pytest.mark.parametrize("shape,dtype,axis,n_idx,kind", [
    ((66390342,), "f4", 0, 15234, "scalar"),
    ((312279355,), "f8", 0, 14996, "flat"),
    ((5004,), "i4", 0, 6428, "rows"),
    ((505304440,), "i2", 0, 7914, "rows"),
    ((1000, 100), "u1", 0, 300, "window"),
    ((1000, 7), "u1", 0, 3000, "pack"),
    ((5004,), "i4", 0, 6428, "lean"),
])
def test_a_short_call_spreads_over_the_sms_and_a_long_one_keeps_full_blocks(
        shape, dtype, axis, n_idx, kind):
    from cugather.plan.core import DeviceLimits, Operand
    from cugather.plan.gather import plan_gather

    limits = DeviceLimits(sm_count=132)
    for n, short in ((n_idx, True), (n_idx * 30 if kind == "lean" else n_idx * 200, False)):
        p = plan_gather(Operand.contiguous(shape, np.dtype(dtype).itemsize), (n,), "int32",
                        axis, "wrap", limits=limits, kind=kind)
        threads = p.main.block[0] * p.main.block[1]
        if short:
            assert 64 <= threads < 256 and (p.main.grid[0] >= 132 or threads < 128), p.describe()
        else:
            assert threads == 256 or p.main.block[0] > 64, p.describe()
        out = math.prod(p.out_shape) * np.dtype(dtype).itemsize
        per = {"scalar": 2 * p.main.key.unit, "flat": 16, "window": 32, "pack": 32,
               "lean": p.main.key.unit,
               "rows": p.main.key.unit * p.main.fields.get("row_unroll", 1)}[kind]
        assert p.main.grid[0] * threads * per >= out   # the grid still covers the output


def test_rows_per_thread_shrinks_on_small_problems():
    big = plan_of(((1000000, 64), "f2"), (2000000,))
    small = plan_of(((64, 1024, 256), "f2"), (512,), axis=1)
    tiny = plan_of(((1000, 64), "f4"), (10,), kind="rows")
    assert big.fields["row_unroll"] == 4
    assert small.fields["row_unroll"] in (1, 2) and tiny.fields["row_unroll"] == 1
    for p in (big, small, tiny):  # every row is covered by the grid
        assert p.grid[0] * p.block[1] * p.fields["row_unroll"] >= p.fields["rows"]


def test_unit_follows_alignment():
    assert unit_for(64, 256, 256) == 16
    assert unit_for(64, 8, 256) == 8
    assert unit_for(6, 256, 256) == 2
    odd = Operand((10, 16), (16, 1), 1, align=1)
    assert plan_of(odd, (3,)).key.unit == 1
    shifted = Operand((10, 16), (16, 1), 1, align=4)
    assert plan_of(shifted, (3,)).key.unit == 4


def test_math_width_switches_past_2_31(monkeypatch):
    monkeypatch.setattr(tuning, "ONE_UNIT_RULE", ())  # scalar: one thread a pick
    assert plan_of(((10,), "i1"), (2**31 - 1,)).key.math == "fast32"
    assert plan_of(((10,), "i1"), (2**31,)).key.math == "fast64"
    p = plan_of(((4, 3), "f4"), (5,), math_name="fast64")
    assert p.key.math == "fast64" and p.fields["n_div"].bits == 64


def test_raise_plans_a_check_and_empty_plans_launch_nothing():
    p = plan_of(((5, 4), "f4"), (3,), mode="raise")
    assert p.check_key.kind == "check" and p.key.mode == "raise"
    e = plan_of(((5, 0), "f4"), (3,), mode="raise")
    assert e.key is None and "nothing to launch" in e.describe()
    assert e.check_key is not None  # numpy.take checks these indices (one outer slice)
    # An empty outer part reads no index: numpy.take raises nothing, ONNX Gather still does.
    assert plan_of(((0, 3), "f4"), (2,), axis=1, mode="raise", check_unread=False).check_key is None
    assert plan_of(((0, 3), "f4"), (2,), axis=1, mode="raise").check_key is not None


def test_merge_dims_merges_contiguous_dims():
    assert merge_dims([(2, 48), (3, 16), (4, 4)]) == [(24, 4)]
    assert merge_dims([(2, 100), (3, 16), (1, 999), (4, 4)]) == [(2, 100), (12, 4)]


def test_describe_names_kernel_and_divisors():
    plan = cugather.GatherOp(0, mode="clip").plan(((1000, 64), "f2"), ((4096,), "int32"))
    text = plan.describe()
    assert f"kernel      {plan.key.entry}" in text and plan.key.entry.endswith("_u16_i32_fast32_clip")
    assert "fast_divmod n_div: d=4096" in text and "grid" in text and "block" in text
    assert "chosen by   sm_90 tuning table, leaf" in text  # op.plan is an H200's plan
    rules = plan_of(((1000, 64), "f2"), (16384,), index_dtype="int32", mode="clip").describe()
    assert "cugather_rows_u16_i32_fast32_clip" in rules and "chosen by   rule: rows of" in rules


def test_forcing_an_impossible_variant_is_an_error():
    with pytest.raises(ValueError, match="one unit"):
        plan_of(((10, 8), "f4"), (3,), kind="scalar")
    with pytest.raises(ValueError, match="shared memory"):
        plan_of(((10, 100000), "f4"), (3,), axis=1, kind="inner")
    # an empty axis in fill mode stages nothing and fills every output element
    p = plan_of(((0,), "u8"), (1,), axis=0, mode="fill", kind="slab")
    assert p.kind == "slab" and p.shared_mem == 0 and math.prod(p.grid) >= 1
    # a strided axis: staging copies contiguous bytes, so neither staging kind applies
    with pytest.raises(ValueError, match="contiguous gathered axis"):
        plan_of(Operand((5,), (12,), 4), (3,), axis=0, kind="inner")
    with pytest.raises(ValueError, match="'slab' needs a contiguous gathered axis"):
        plan_of(Operand((5,), (12,), 4), (3,), axis=0, kind="slab")
    with pytest.raises(ValueError, match="contiguous rows"):
        plan_of(Operand((4, 5), (8, 40), 8), (3,), axis=0, kind="rows")


def test_chunks16_moves_16_units_per_thread_of_2_and_4_byte_units():
    """chunks16: chunks' tiling with tuning.CHUNKS16_CU units per thread: one chunk
    per row up to 256 threads' worth, then chunks of at most CHUNKS_SPLIT threads'
    worth, warp-rounded; other units are chunks' alone."""
    from cugather.plan import tuning

    cu = tuning.CHUNKS16_CU
    assert cu == 16
    for dtype, cols, unit in (("f2", 1101, 2), ("f4", 1101, 4)):
        p = plan_of(((50, cols), dtype), (7,), kind="chunks16")
        c = plan_of(((50, cols), dtype), (7,), kind="chunks")
        assert (p.key.kind, p.key.unit, c.key.unit) == ("chunks16", unit, unit)
        # ceil(1101 / 16) = 69 threads, warp-rounded to 96; two rows per block
        assert p.block == (96, 2, 1) and p.grid == (4, 1, 1), p
        assert "16 unit(s) per thread, 1 chunk(s) per row" in p.describe()
        assert c.block[0] * c.grid[1] * tuning.CHUNKS_CU >= 1101
    # 4099 units: more than 256 x 16, split in cdiv(4099, 192 x 16) = 2 chunks
    p = plan_of(((3, 4099), "f4"), (5,), kind="chunks16")
    assert p.grid == (5, 2, 1) and p.block == (160, 1, 1)
    assert p.block[0] * cu * p.grid[1] >= 4099 > (p.block[0] - 32) * cu * p.grid[1]
    for dtype in ("u1", "f8"):
        with pytest.raises(ValueError, match="'chunks16' needs units of 2 or 4 bytes"):
            plan_of(((50, 1001), dtype), (7,), kind="chunks16")


def test_slabw_stores_words_of_picks():
    """slabw (1-, 2- and 4-byte units, tuning.SLAB_WORD bytes per store): a thread
    takes a word slot of P picks at any phase of the row, so one pass of the grid
    covers (n + 2P - 2) // P slots where slab's covers n picks."""
    from cugather.plan import tuning

    for dtype, unit in (("u1", 1), ("f2", 2), ("f4", 4)):
        per = tuning.SLAB_WORD[unit] // unit
        assert per > 1
        w = plan_of(((2, 50), dtype), (70001,), axis=1, kind="slabw")
        u = plan_of(((2, 50), dtype), (70001,), axis=1, kind="slab")
        assert (w.key.kind, w.key.unit, u.key.kind, u.key.unit) == ("slabw", unit, "slab", unit)
        slots = (70001 + 2 * per - 2) // per
        assert w.grid[0] == math.ceil(slots / tuning.MAX_THREADS)
        assert u.grid[0] == math.ceil(70001 / tuning.MAX_THREADS)
        assert f"{per * unit} B stores of {per} picks" in w.describe()
    with pytest.raises(ValueError, match="'slabw' needs units of 1, 2 or 4 bytes"):
        plan_of(((5, 50), "f8"), (300,), axis=1, kind="slabw")
    with pytest.raises(ValueError, match="'slabw' needs an output aligned to 4 B"):
        plan_of(((5, 50), "u1"), (300,), axis=1, kind="slabw", out_align=2)
    assert plan_of(((5, 50), "u1"), (300,), axis=1, kind="slab", out_align=1).kind == "slab"


def test_slab_index_blocks_stage_at_most_twice_the_picks_per_axis_element(monkeypatch):
    """slab and slabw: every index block of a group stages the group again, so a
    group gets at most SLAB_STAGE_RATIO x picks / axis_len index blocks (at least
    one); the outer rows then give the GPU its blocks, in smaller groups."""
    from cugather.plan import tuning

    assert tuning.SLAB_STAGE_RATIO == 2
    limits = DeviceLimits(132, 232448)

    def launch(shape, n_idx, kind="slab"):
        p = plan_of((shape, "u1"), (n_idx,), axis=len(shape) - 1, kind=kind, limits=limits)
        return p.grid[:2], p.fields["chunk"], p.main.shared_mem

    # held-out seed 5179: 1534 outer rows of 3243 B, 1286 picks (0.4 per element):
    # one index block per group of 2 rows (767 blocks, 13 KB staged for 2.6 KB
    # out); 5 blocks per group of 7 staged 22.7 KB for 1.8 KB out (16.0 against
    # 9.5 us on the H200)
    assert launch((118, 13, 3243), 1286) == ((1, 767), 2, 6496)
    assert launch((118, 13, 3243), 1286, "slabw") == ((1, 767), 2, 6496)
    # 1152 picks of 4535: 2 x 1152 // 4535 = 0, one block per group of 3 rows
    assert launch((2994, 4535), 1152) == ((1, 998), 3, 13616)
    # many picks per element: the indices' own blocks, as before (352 of 256 picks)
    assert launch((4, 47, 284), 127004) == ((352, 3), 86, 24432)
    monkeypatch.setattr(tuning, "SLAB_STAGE_RATIO", 0)  # no cap: the rule before
    assert launch((118, 13, 3243), 1286) == ((5, 220), 7, 22704)
    assert launch((2994, 4535), 1152) == ((2, 599), 5, 22688)


def test_slab_grids_of_outputs_of_64_mib_or_more_aim_at_16_blocks_a_sm():
    """slab and slabw: SLAB_BLOCKS_PER_SM (8) blocks a SM under SLAB_BIG_OUT
    (64 MiB) written, SLAB_BIG_BLOCKS_PER_SM (16) from there on; slabf keeps 8."""
    from cugather.plan import tuning

    assert (tuning.SLAB_BIG_OUT, tuning.SLAB_BLOCKS_PER_SM,
            tuning.SLAB_BIG_BLOCKS_PER_SM) == (64 << 20, 8, 16)
    limits = DeviceLimits(132, 232448)
    for kind in ("slab", "slabw"):
        # one outer row of a 400-byte axis: the indices alone give the blocks
        under = plan_of(((1, 400), "u1"), ((64 << 20) - 1,), axis=1, kind=kind, limits=limits)
        at = plan_of(((1, 400), "u1"), (64 << 20,), axis=1, kind=kind, limits=limits)
        assert under.grid == (1056, 1, 1) and at.grid == (2112, 1, 1), kind
        # 64 MiB in 4-byte units from 8 outer rows of 200 B: one group of the 8
        p = plan_of(((8, 50), "f4"), (2 << 20,), axis=1, kind=kind, limits=limits)
        assert p.grid == (2112, 1, 1) and p.fields["chunk"] == 8, kind
        p = plan_of(((8, 50), "f4"), ((2 << 20) - 1,), axis=1, kind=kind, limits=limits)
        assert p.grid == (1056, 1, 1) and p.fields["chunk"] == 8, kind
    # slabf's grid (one chunk a thread: 2-byte units) stays at 8 a SM past 64 MiB
    p = plan_of(((40, 25), "i2"), (2 << 20,), axis=0, kind="slabf", limits=limits)
    assert p.grid == (1056, 1, 1)


def test_slabf_stages_groups_of_outer_rows():
    """slabf: as many outer rows per group as SLAB_MAX_STAGE holds where one outer
    row's chunks fill the GPU, fewer where the outer rows must give the blocks;
    never more than SLAB_BLOCKS_PER_SM blocks per SM in all; the group's axis rows
    as its shared memory."""
    from cugather.plan import tuning

    limits = DeviceLimits(132, 232448)
    target = tuning.SLAB_BLOCKS_PER_SM * 132
    # 3-byte rows, 1725 B axis rows: 14 of them in 24 KB; 210366 picks fill the GPU
    p = plan_of(((15, 70, 575, 3), "i1"), (210366,), axis=2, kind="slabf", limits=limits)
    assert (p.key.kind, p.key.unit) == ("slabf", 1)
    assert p.fields["group"] == tuning.SLAB_MAX_STAGE // 1725 == 14
    assert p.grid == (target // 75, 75, 1)  # 1050 outer rows in groups of 14
    assert p.main.shared_mem == math.ceil(14 * 1725 / 16) * 16
    assert p.fields["stage_unit"] == 1 and p.fields["unit_div"][0] == 3
    # 7-byte rows of a 14 KB table: 683 outer rows and 88 blocks of chunks per row
    p = plan_of(((683, 3, 1, 7), "i1"), (25724,), axis=1, kind="slabf", limits=limits)
    assert p.fields["group"] == math.ceil(683 * 88 / target) == 57
    assert p.grid == (88, 12, 1) and p.main.shared_mem == math.ceil(57 * 21 / 16) * 16
    # few picks: a group per outer row; 8-byte staging loads of 24-byte rows
    p = plan_of(((40, 30, 6), "f4"), (10,), axis=1, kind="slabf", limits=limits)
    assert p.fields["group"] == 1 and p.grid == (1, 40, 1)
    assert p.fields["stage_unit"] == 16 and p.key.unit == 8
    assert "1 outer row(s) of 720 B staged per block" in p.describe()
    with pytest.raises(ValueError, match="'slabf' needs a contiguous gathered axis of at "
                                         "most 24576 bytes"):
        plan_of(((10, 7000, 4), "u1"), (30,), axis=1, kind="slabf", limits=limits)
    with pytest.raises(ValueError, match="'slabf' needs a contiguous gathered axis"):
        plan_of(Operand((5, 3), (24, 4), 4), (3,), axis=0, kind="slabf")
    with pytest.raises(ValueError, match="'slabf' needs units narrower than 16 bytes and a "
                                         "16-byte aligned output"):
        plan_of(((5, 50, 3), "u1"), (30,), axis=1, kind="slabf", out_align=8)


def test_slabf_tiles_take_fewer_threads_and_one_wave():
    """slabf on rows of a chunk or more in 4- and 8-byte units with 32-bit math
    (the kernel's warps' tiles): SLABF_TILE chunks a thread, at most
    SLABF_TILE_BLOCKS_PER_SM blocks per SM; narrower units, shorter rows and
    64-bit math keep a chunk a thread and SLAB_BLOCKS_PER_SM."""
    limits = DeviceLimits(132, 232448)
    # 100-byte rows of a 200-byte table, 2.7M picks: 16.8M chunks, the grid capped
    p = plan_of(((2, 25), "i4"), (2685192,), axis=0, kind="slabf", limits=limits)
    assert p.key.unit == 4 and p.key.math == "fast32"
    assert p.grid == (tuning.SLABF_TILE_BLOCKS_PER_SM * 132, 1, 1) == (528, 1, 1)
    # 20-byte rows, 3000 picks: 3750 chunks, SLABF_TILE to a thread
    p = plan_of(((72, 5), "f4"), (3000,), axis=0, kind="slabf", limits=limits)
    assert p.grid == (math.ceil(3000 * 5 / 4 / tuning.SLABF_TILE / tuning.MAX_THREADS), 1, 1)
    # 8-byte units, 24-byte rows: tiles
    p = plan_of(((20, 3), "f8"), (3000,), axis=0, kind="slabf", limits=limits)
    assert p.key.unit == 8
    assert p.grid == (math.ceil(3000 * 3 / 2 / tuning.SLABF_TILE / tuning.MAX_THREADS), 1, 1)
    # 12-byte rows (under a chunk) and 2-byte units: a chunk a thread, slab's cap
    for shape, dtype in (((40, 3), "f4"), ((40, 25), "i2")):
        p = plan_of((shape, dtype), (2685192,), axis=0, kind="slabf", limits=limits)
        assert p.grid == (tuning.SLAB_BLOCKS_PER_SM * 132, 1, 1) == (1056, 1, 1), (shape, dtype)
    # 64-bit math: no tiles
    p = plan_of(((2, 25), "i4"), (2685192,), axis=0, kind="slabf", limits=limits,
                math_name="fast64")
    assert p.grid == (tuning.SLAB_BLOCKS_PER_SM * 132, 1, 1)


def test_inner_splits_an_outer_rows_picks_into_chunks_of_32_kib_or_one_staged_row(monkeypatch):
    """inner: an outer row's picks in chunks of 256-pick blocks, each chunk at most
    INNER_CHUNK_BYTES out or one staged row (the larger), rounded up to a block,
    with at least INNER_SM_BLOCKS blocks per SM; where the byte cap sets the
    count, the blocks are rounded to whole waves of INNER_SM_BLOCKS per SM (the
    kernel's residency).  Each chunk stages its row again, so many outer rows of
    few picks keep one chunk per row."""
    from cugather.plan import tuning

    limits = DeviceLimits(132, 232448)
    wave = tuning.INNER_SM_BLOCKS * 132

    def chunks(shape, dtype, n_idx, axis):
        p = plan_of((shape, dtype), (n_idx,), axis=axis, kind="inner", limits=limits)
        f = p.fields
        assert f["chunk"] % 256 == 0 and p.grid[0] == -(-n_idx // f["chunk"])
        return p.grid[0], f["chunk"], p.main.shared_mem

    # 37 rows of 5740 float32 (22960 B), 3.6M picks each: 32 KiB chunks, not the 15
    # chunks of 243200 picks that 4 blocks per SM asked (0.45x the best peer, H200);
    # 446 x 37 blocks are 31.3 waves, and 32 waves' 456 chunks a row round to the same
    assert chunks((1, 37, 5740), "f4", 3645930, 2) == (446, 8192, 22960)
    # a 47712 B row (complex128): one row asks 140 chunks a row, 980 blocks, 1.9
    # waves; two whole waves are 150 a row, 2816 picks once rounded up to blocks
    n, chunk, _ = chunks((7, 2982), "c16", 415359, 1)
    assert (n, chunk) == (148, 2816) and 980 < n * 7 <= 2 * wave
    # one row of 5.4M float32 picks: 32 KiB asks 666 blocks (1.26 waves, the rest a
    # wave of its own, 1.6x slower on the H200); two whole waves instead
    assert chunks((1, 35), "f4", 5448162, 1)[:2] == (1014, 5376)
    monkeypatch.setattr(tuning, "INNER_BALANCE", False)
    assert chunks((1, 35), "f4", 5448162, 1)[:2] == (666, 8192)
    monkeypatch.undo()
    # 5 rows of 30000 picks (117 KB out each): blocks per SM decide, 106 chunks a
    # row asked, 59 of 512 picks once rounded up to whole blocks
    assert -(-tuning.INNER_SM_BLOCKS * 132 // 5) == 106
    assert chunks((5, 4000), "f4", 30000, 1)[:2] == (59, 512)
    # many outer rows, 16 KB of picks each: one chunk per row (inner_axis_f32)
    assert chunks((8192, 8192), "f4", 4096, 1)[:2] == (1, 4096)


def test_lean_takes_rows_of_several_units_up_to_64_mib_out_the_rules_short_calls_1_mib():
    """lean (one unit per thread) applies to rows of several units in outputs of
    at most LEAN_MAX_OUT (a tuning table names it there); the rules give it short
    calls only, outputs of at most SHORT_CALL_OUT."""
    from cugather.plan import tuning

    assert (tuning.LEAN_MAX_OUT, tuning.SHORT_CALL_OUT) == (64 << 20, 1 << 20)
    # 128-byte rows of 16-byte units: 64 MiB out exactly, then one row more
    p = plan_of(((1000, 64), "f2"), (524288,), kind="lean")
    assert (p.key.kind, p.key.unit, p.fields["total"]) == ("lean", 16, 524288 * 8)
    with pytest.raises(ValueError, match=r"an output of at most 67108864 bytes or rows of one "
                                         r"unit; this one is 67108992 B of 8-unit rows"):
        plan_of(((1000, 64), "f2"), (524289,), kind="lean")
    # rows of one unit: any size
    assert plan_of(((1000, 4), "f4"), (5000000,), kind="lean").key.unit == 16
    # the rules: lean at 1 MiB out, rows past it
    assert plan_of(((1000, 64), "f2"), (8192,)).key.kind == "lean"
    assert plan_of(((1000, 64), "f2"), (8193,)).key.kind == "rows"


@pytest.mark.parametrize("mode", ["wrap", "clip", "clip_numpy", "fill", "raise"])
@pytest.mark.parametrize("shape,axis,dtype,unit", [
    ((2, 2, 2, 1), 3, "f2", 2), ((1, 25), 0, "f4", 4), ((9, 1, 4), 1, "c16", 8),
    ((1,), 0, "u1", 1), ((6, 1, 7), 1, "u1", 1)])
def test_an_axis_of_length_one_reads_no_index_in_wrap_and_clip_mode(mode, shape, axis, dtype,
                                                                      unit):
    """Wrap and clip resolve every index of a length-1 axis to 0: bcast repeats the
    rows (unit at most 8 bytes, one "wrap" build for all three modes); fill and
    raise mode must read the indices and keep their kernels."""
    p = plan_of((shape, dtype), (1000, 3), axis, mode=mode, limits=DeviceLimits(arch="sm_90"))
    if mode in ("fill", "raise"):
        assert p.key.kind != "bcast"
        return
    assert p.key.kind == "bcast" and p.key.mode == "wrap" and p.key.unit == unit
    assert "axis of length 1" in p.chosen_by and "no index read" in p.reason
    row = math.prod(shape[axis + 1:]) * np.dtype(dtype).itemsize
    per = 8 if unit == 1 else 16 // unit
    f = p.fields
    assert f["total"] == math.prod(shape[:axis]) * 3000 * row // unit
    assert f["chunks"] == -(-f["total"] // per) and f["unit_div"].d == row // unit
    # a misaligned output takes the usual kernels; forcing bcast elsewhere is an error
    assert plan_of((shape, dtype), (1000, 3), axis, mode=mode, out_align=8).key.kind != "bcast"
    with pytest.raises(ValueError, match="'bcast' needs an axis of length 1"):
        plan_of(((4, 2), dtype), (5,), 1, mode=mode, kind="bcast")


@pytest.mark.parametrize("mode", ["wrap", "clip", "clip_numpy"])
@pytest.mark.parametrize("shape,axis,dtype,align,picks,kind", [
    ((1, 24673), 0, "u1", 256, (700, 3), "bcastw"), ((4, 1, 4619), 1, "b1", 256, (700, 3), "bcastw"),
    ((1, 24673), 0, "u1", 256, (42,), "bcast"),       # 1 MiB out or less
    ((1, 512), 0, "u1", 1, (2049,), "bcastw"),       # 1-byte units from a 1-byte aligned table
    ((1, 511), 0, "u1", 256, (30000,), "bcast"), ((3, 1, 2048), 1, "f2", 256, (700, 3), "bcast"),
    ((3, 1, 2049), 1, "f2", 256, (700, 3), "bcastw"), ((3, 1, 1025), 1, "f4", 256, (7000,), "bcast"),
    ((5, 1, 3), 1, "c16", 256, (700, 3), "bcast")])
def test_bcast_rows_of_narrow_units_take_window_chunks(mode, shape, axis, dtype, align, picks,
                                                        kind):
    """An axis of length 1 in wrap and clip mode: long rows of 1- and 2-byte units
    (tuning.BCASTW_MIN_ROW) in outputs of more than tuning.BCASTW_MIN_OUT take
    bcastw (window's chunks, one "wrap" build, no index read), the others bcast;
    either can be forced where its rows allow, and only on an axis of length 1."""
    op = Operand.contiguous(shape, np.dtype(dtype).itemsize, align=align)
    p = plan_of(op, picks, axis, mode=mode, limits=DeviceLimits(arch="sm_90"))
    assert p.key.kind == kind and p.key.mode == "wrap", str(p.key)
    assert "axis of length 1" in p.chosen_by and "no index read" in p.reason
    assert ("bcastw" in p.chosen_by) == (kind == "bcastw")
    row = math.prod(shape[axis + 1:]) * np.dtype(dtype).itemsize
    if kind == "bcastw":
        f, n = p.fields, math.prod(picks)
        out_bytes = math.prod(shape[:axis]) * n * row
        assert out_bytes > tuning.BCASTW_MIN_OUT
        assert p.key.unit == 16 and f["row_bytes"] == row and f["out_bytes"] == out_bytes
        assert f["chunks"] == -(-out_bytes // 16) and f["n_div"].d == n and f["s_axis"] == 0
        assert p.main.grid[0] * p.main.block[0] * tuning.WINDOW_ILP >= f["chunks"]
    other = "bcast" if kind == "bcastw" else "bcastw"
    if other == "bcastw" and row < 16:
        with pytest.raises(ValueError, match="'bcastw' needs rows of 16 bytes or more"):
            plan_of(op, (5,), axis, mode=mode, kind=other)
    else:
        assert plan_of(op, (5,), axis, mode=mode, kind=other).key.kind == other
    with pytest.raises(ValueError, match="'bcastw' needs an axis of length 1"):
        plan_of(((4, 20), "u1"), (5,), 1, mode=mode, kind="bcastw")


def test_forcing_bcast_in_fill_or_raise_mode_is_an_error():
    for mode in ("fill", "raise"):
        with pytest.raises(ValueError, match=f"mode '{mode}'"):
            plan_of(((4, 1), "f4"), (5,), 1, mode=mode, kind="bcast")
    with pytest.raises(ValueError, match="contiguous rows"):
        plan_of(Operand((4, 1, 5), (80, 80, 8), 4), (3,), axis=1, kind="bcast")


# --------------------------------------------------------------- emulation
def _emulate(plan, data, idx):
    """Run a plan's addressing on the host: byte offsets from the plan's fields,
    divisions through the fast_divmod emulation, reads from ``data``'s memory."""
    f = plan.fields
    n = plan.axis_len
    norm = np.take(np.arange(n), idx.reshape(-1).astype(np.int64), mode="wrap")
    base = data.__array_interface__["data"][0]
    unit = plan.key.unit
    out = []
    if plan.key.kind == "strided":
        for t in range(f["total"]):
            rest, off = t, 0
            for d in range(f["ndim"]):
                if d < f["ndim"] - 1:  # the outermost dimension takes the quotient
                    q = fast_div(rest, f["dims"][d])
                    c = rest - q * f["dims"][d].d
                else:
                    q, c = 0, rest
                rest = q
                off += norm[c] * f["s_axis"] if d == f["index_dim"] else c * f["strides"][d]
            out.append(_read(base, off, unit))
    elif plan.key.kind == "window":
        def row_start(row):
            o = fast_div(row, f["n_div"])
            return o * f["s_outer"] + norm[row - o * f["n_div"].d] * f["s_axis"]
        for c in range(f["chunks"]):
            row = fast_div(16 * c, f["row_div"])
            off = 16 * c - row * f["row_bytes"]
            chunk = _read(base, row_start(row) + off, min(16, f["row_bytes"] - off))
            if len(chunk) < 16 and row + 1 < f["rows"]:
                chunk += _read(base, row_start(row + 1), 16 - len(chunk))
            out.append(chunk[:f["out_bytes"] - 16 * c])
    elif plan.key.kind in ("lean", "flat", "flatv"):
        for t in range(f["total"]):  # output unit t of row t // units
            row = fast_div(t, f["unit_div"])
            o = fast_div(row, f["n_div"])
            src = o * f["s_outer"] + norm[row - o * f["n_div"].d] * f["s_axis"]
            out.append(_read(base, src + (t - row * f["unit_div"].d) * unit, unit))
    else:
        for row in range(f["rows"]):
            o = fast_div(row, f["n_div"])
            src = o * f["s_outer"] + norm[row - o * f["n_div"].d] * f["s_axis"]
            for u in range(f["units"]):
                out.append(_read(base, src + u * unit, unit))
    return np.frombuffer(b"".join(out), data.dtype).reshape(plan.out_shape)


def _read(base, off, unit):
    import ctypes

    return ctypes.string_at(base + int(off), unit)


@pytest.mark.parametrize("kind", [None, "strided"])
@pytest.mark.parametrize("view", ["plain", "transpose", "negative", "slice"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_plan_addressing_matches_numpy(kind, view, axis):
    rng = np.random.default_rng(axis)
    base = random_data(rng, (5, 6, 7), "float32")
    data = {"plain": base, "transpose": base.transpose(1, 2, 0),
            "negative": base[::-1, :, ::-2], "slice": base[1:4, ::2, 2:]}[view]
    idx = random_indices(rng, (2, 3), data.shape[axis], "int64")
    op = cugather.GatherOp(axis, mode="wrap")
    try:
        plan = op.plan(data, idx, kind=kind)
    except ValueError:
        pytest.skip("variant not applicable to this layout")
    got = _emulate(plan, data, idx)
    np.testing.assert_array_equal(got, gather_ref(data, idx, axis, "wrap"))


@pytest.mark.parametrize("row_bytes", [256, 301, 4347, 16417, 62314])
@pytest.mark.parametrize("max_grid", [None, 3])
def test_span_items_are_warp_segments_of_rows(row_bytes, max_grid):
    """span's items: segments of 32 * SPAN_V aligned output chunks of a row, enough
    to cover a row's whole chunks, one warp each; the block whole warps within
    the launch bounds' MAX_THREADS, shared memory for one segment's aligned
    source blocks (its chunks and one more) per warp; a capped grid loops."""
    from cugather.plan import tuning

    p = plan_of(((5000, row_bytes), "u1"), (700,), kind="span", max_grid=max_grid)
    tx, ty, tz = p.block
    warps, seg = tx // 32, 32 * tuning.SPAN_V
    segs = p.fields["seg_div"].d
    assert tx % 32 == 0 and (ty, tz) == (1, 1) and tx <= tuning.MAX_THREADS
    assert segs * seg >= row_bytes // 16 > (segs - 1) * seg or segs == 1
    assert p.fields["items"] == 700 * segs
    assert p.grid == (min(-(-700 * segs // warps), max_grid or 2**31 - 1), 1, 1)
    assert p.main.shared_mem == warps * (seg + 1) * 16


@pytest.mark.parametrize("shape,dtype,axis,unit,pitch", [
    ((5000, 3), "u1", 0, 1, 4), ((9, 500, 5), "f2", 1, 2, 16), ((37, 300, 3), "f4", 1, 4, 16),
    ((4, 4, 337, 3), "u1", 2, 1, 4), ((6, 40, 7), "u1", 1, 1, 8), ((22, 4, 200, 3), "i2", 2, 2, 8),
    ((30, 90, 3), "f4", 1, 4, 16)])
def test_slabr_stages_groups_at_a_pitch_and_tiles_the_output(shape, dtype, axis, unit, pitch):
    """slabr: each group of outer rows fits the stage at the row's pitch (4, 8 or 16
    bytes: the first power of two the row fits), the grid covers every group (y) and at most SLABR_BLOCKS per
    SM (x times y, whole groups beyond that looping), and shared memory holds the
    stage then a tile of 32 x SLABR_RU rows and 16 bytes per warp; the fields
    carry the output's units, tiles, the row's units and the order: 1 (tiles of
    index positions, each written to every outer row of its group, blocks of one
    group for one outer row's tiles) where groups have two outer rows or more,
    SLABR_ORDER_PICKS picks, and outer rows that start 16-byte aligned or
    SLABR_ORDER_INDEX_BYTES of indices, else 0 (tiles of the output)."""
    from cugather.plan import tuning

    tile = 32 * tuning.SLABR_RU
    row_bytes = math.prod(shape[axis + 1:]) * np.dtype(dtype).itemsize
    axis_len, n_outer = shape[axis], math.prod(shape[:axis])
    orders = set()
    for n_idx, grid_cap in ((7, None), (1023, None), (3001, None), (100000, 3), (100000, None)):
        p = plan_of((shape, dtype), (n_idx,), axis=axis, kind="slabr", max_grid=grid_cap)
        f = p.fields
        group, warps = f["group"], p.block[0] // 32
        order = int(group >= 2 and n_idx >= tuning.SLABR_ORDER_PICKS
                    and (n_idx * row_bytes % 16 == 0
                         or 8 * n_idx >= tuning.SLABR_ORDER_INDEX_BYTES))
        orders.add(order)
        assert (p.key.kind, p.key.unit) == ("slabr", unit) and p.block == (tuning.MAX_THREADS, 1, 1)
        assert f["total"] == n_outer * n_idx * (row_bytes // unit) and f["stage_unit"] == order
        assert f["chunks"] == math.ceil(n_outer * n_idx / tile)
        assert f["unit_div"].d == row_bytes // unit and f["n_div"].d == n_idx
        assert 1 <= group <= n_outer and group * axis_len * pitch <= tuning.SLAB_MAX_STAGE
        stage = math.ceil(group * axis_len * pitch / 16) * 16
        assert p.main.shared_mem == stage + warps * (tile * row_bytes + 16)
        assert p.grid[1] == min(math.ceil(n_outer / group), grid_cap or 1 << 31)
        assert p.grid[0] * p.grid[1] <= max(p.grid[1], tuning.SLABR_BLOCKS * 132)
        if order:
            assert p.grid[0] <= math.ceil(n_idx / tile / warps)
        how = ("each tile's picks written to every outer row of the group" if order else
               "tiles of the output")
        assert f"at a {pitch}-byte pitch; {how}, {tile} rows a warp" in p.describe()
    assert orders == ({0} if n_outer == 1 else {0, 1}), orders
    for bad, why in ((((50, 4), "u1"), "rows here are 4 B of 4-byte units"),
                     (((50, 16), "u1"), "rows here are 16 B of 16-byte units"),
                     (((50, 1), "f8"), "rows here are 8 B of 8-byte units")):
        with pytest.raises(ValueError, match=f"'slabr' needs rows of two units or more .*{why}"):
            plan_of(bad, (7,), kind="slabr")
    with pytest.raises(ValueError, match="a 16-byte aligned output; .* out aligned to 8 B"):
        plan_of(((50, 7), "u1"), (7,), kind="slabr", out_align=8)
    n = tuning.SLAB_MAX_STAGE // 8  # 7-byte rows take 8 bytes each
    assert plan_of(((n, 7), "u1"), (7,), kind="slabr").fields["group"] == 1
    with pytest.raises(ValueError, match="its rows padded to 8 B; here it is 3073 rows of 7 B"):
        plan_of(((n + 1, 7), "u1"), (7,), kind="slabr")
    # a block's stage and its warps' tiles share the block's shared memory: with
    # 30 KB, 15-byte rows leave 30720 - 8 x (128 x 15 + 16) bytes to stage
    small = DeviceLimits(132, 30 * 1024, "")
    n = (30 * 1024 - 8 * (128 * 15 + 16)) // 16
    p = plan_of(((3, n, 15), "u1"), (7,), axis=1, kind="slabr", limits=small)
    assert p.main.shared_mem <= 30 * 1024 and p.fields["group"] == 1
    with pytest.raises(ValueError, match="at most 15232 bytes to stage"):
        plan_of(((3, n + 1, 15), "u1"), (7,), axis=1, kind="slabr", limits=small)
    # rows 7 bytes apart in a wider array: the axis is not contiguous
    op = Operand((40, 7), (9, 1), 1, 16)
    with pytest.raises(ValueError, match="here it is 40 rows of 7 B, 9 B apart"):
        plan_of(op, (7,), kind="slabr")


@pytest.mark.parametrize("shape,dtype,axis,unit", [
    ((5000, 7), "u1", 0, 1), ((9, 500, 5), "f2", 1, 2), ((5000, 3), "f4", 0, 4),
    ((5000, 15), "u1", 0, 1)])
def test_weave_tiles_cover_the_rows_with_a_tile_of_shared_memory_per_warp(shape, dtype, axis,
                                                                         unit):
    """weave: tiles of 32 x WEAVE_RU rows, one per warp, cover every row; each warp
    of a block has row_bytes x that many bytes of shared memory, a multiple of 16
    (every tile's output starts 16-byte aligned); the unit is the row's own."""
    from cugather.plan import tuning

    tile = 32 * tuning.WEAVE_RU
    for n_idx, grid_cap in ((7, None), (3001, None), (100000, 3)):
        p = plan_of((shape, dtype), (n_idx,), axis=axis, kind="weave", max_grid=grid_cap)
        f = p.fields
        rows = math.prod(shape[:axis]) * n_idx
        row_bytes = shape[-1] * np.dtype(dtype).itemsize
        warps = p.block[0] // 32
        assert (p.key.kind, p.key.unit) == ("weave", unit) and p.block == (tuning.MAX_THREADS, 1, 1)
        assert f["rows"] == rows and f["row_bytes"] == row_bytes
        assert f["chunks"] == math.ceil(rows / tile) and f["out_bytes"] == rows * row_bytes
        assert p.main.shared_mem == warps * tile * row_bytes and (tile * row_bytes) % 16 == 0
        assert p.grid[0] == min(math.ceil(f["chunks"] / warps), grid_cap or 1 << 31)
        assert f"in tiles of {tile} rows a warp" in p.describe()
    for bad, why in ((((50, 4), "u1"), "rows here are 4 B of 4-byte units"),
                     (((50, 16), "u1"), "rows here are 16 B of 16-byte units"),
                     (((50, 3), "f8"), "rows here are 24 B of 8-byte units")):
        with pytest.raises(ValueError, match=f"'weave' needs rows of two units or more .*{why}"):
            plan_of(bad, (7,), kind="weave")
    with pytest.raises(ValueError, match="a 16-byte aligned output; .* out aligned to 8 B"):
        plan_of(((50, 7), "u1"), (7,), kind="weave", out_align=8)
