"""How the inner kernel splits an outer row's picks into blocks (BENCHMARKS.md,
"inner: chunks of picks"), on a GPU:

    python benchmarks/probe-inner/probe.py     # writes $OUT/probe-inner.json (default /tmp)

The cases are the held-out sweeps' geometries the planner gives inner with
fewer than 64 blocks per SM of outer rows (the first 59, where the grid's aim of
blocks per SM changes the launch), then the four others whose launch the
shipped chunk rule changes.  For each: the device copy of the output bytes;
inner under each setting of VARIANTS (tuning.INNER_SM_BLOCKS,
INNER_CHUNK_BYTES, INNER_ROW_CHUNKS, INNER_BALANCE; "b4" is the rule before,
4 blocks per SM and no byte target; "t32r1" the rule of 2026-12-04 afternoon;
"t32r1w" that with the blocks rounded to whole waves, the shipped one);
cupy.take, torch.index_select and
jitted jax.numpy.take (mode="clip").  Every result is checked bit for bit
against cupy.take.  Medians of 40 calls between two events behind a holding
kernel (the sweep's timing; JAX: back-to-back calls closed by
block_until_ready), microseconds.  PROBE_VARIANTS=a,b,... times a subset.

The result files (H200, 2026-12-04):
  results-factors.json  the 59 cases, b4 b8 b16 b32 b64 (blocks per SM only;
                        the first form of the probe)
  results-rules.json    the 59 cases, every variant
  results-balance.json  the 63 cases and 23 tuning geometries, b4 t32r1 t32r1w
  results-wide.json     91 geometries, b4 t32k t64k t32r1 t32r2: its "b4"
                        column is not the rule before but chunks of 256 picks
                        (a byte target of 0 then meant one byte per chunk, a
                        mistake since fixed); the other columns stand
"""
import json, os, time
import numpy as np
import cupy as cp
import cugather.plan.tuning as tuning
from cugather.bench.peers import time_cupy, time_jax, time_torch
from cugather.plan.core import Operand, alignment
from cugather.plan.gather import plan_gather
from cugather.runtime.binding import bind
from cugather.runtime.launch import CUDA, execute

OUT = os.environ.get("OUT", "/tmp")
BUDGET_S = float(os.environ.get("PROBE_BUDGET_S", "240"))
VARIANTS = {  # label: (INNER_SM_BLOCKS, INNER_CHUNK_BYTES, INNER_ROW_CHUNKS, INNER_BALANCE)
    "b4": (4, 0, 0, False), "b8": (8, 0, 0, False), "b16": (16, 0, 0, False),
    "b32": (32, 0, 0, False), "b64": (64, 0, 0, False),
    "t16k": (4, 16 << 10, 0, False), "t32k": (4, 32 << 10, 0, False),
    "t64k": (4, 64 << 10, 0, False), "t32r1": (4, 32 << 10, 1, False),
    "t32r2": (4, 32 << 10, 2, False), "b8t32": (8, 32 << 10, 0, False),
    "b8t64": (8, 64 << 10, 0, False), "b8t32r2": (8, 32 << 10, 2, False),
    "t32r1w": (4, 32 << 10, 1, True)}
KNOBS = ("INNER_SM_BLOCKS", "INNER_CHUNK_BYTES", "INNER_ROW_CHUNKS", "INNER_BALANCE")
if os.environ.get("PROBE_VARIANTS"):  # a comma-separated subset of VARIANTS' labels
    VARIANTS = {k: VARIANTS[k] for k in os.environ["PROBE_VARIANTS"].split(",")}
CASES = [  # (shape, dtype, axis, indices, index dtype, where it came from: kernel, ratio, best peer)
    ((1, 37, 5740), 'float32', 2, (3645930,), 'int64', "sweep-9973 inner_u4_i64_fast32_wrap 0.43x jax.numpy.take"),
    ((1, 5, 37768), 'int8', 2, (575387, 14), 'int64', "sweep-9001-strided-table inner_u1_i64_fast32_wrap 0.48x jax.numpy.take"),
    ((50, 21943), 'int8', 1, (674249,), 'int64', "sweep-7919 inner_u1_i64_fast32_wrap 0.73x torch.index_select"),
    ((232, 36671), 'bool', 1, (306717, 5), 'int32', "sweep-4711 inner_u1_i32_fast32_wrap 0.79x jax.numpy.take"),
    ((401, 1, 12932), 'bool', 2, (1, 461243), 'int64', "sweep-31337 slab_u1_i64_fast32_wrap 0.80x torch.index_select"),
    ((723, 1, 5, 15), 'int64', 3, (31222,), 'int64', "sweep-4711 slab_u8_i64_fast32_wrap 0.82x jax.numpy.take"),
    ((116, 2, 1, 3486), 'int64', 3, (372264,), 'int32', "sweep-8837 flat_u8_i32_fast32_wrap 0.83x torch.index_select"),
    ((14, 5, 9297), 'float16', 2, (1591814,), 'int32', "sweep-777-first-table rows_u2_i32_fast32_wrap 0.85x jax.numpy.take"),
    ((36, 2, 1, 3488), 'float32', 3, (6221, 282), 'int64', "sweep-8837 flat_u4_i64_fast32_wrap 0.87x jax.numpy.take"),
    ((8, 4, 8872), 'int32', 2, (4461793,), 'int32', "sweep-7331-first-280 flat_u4_i32_fast32_wrap 0.87x jax.numpy.take"),
    ((26,), 'float16', 0, (271, 5212), 'int32', "sweep-777-first-table slab_u2_i32_fast32_wrap 0.88x torch.index_select"),
    ((112,), 'float16', 0, (1652664,), 'int64', "sweep-5051 flat_u2_i64_fast32_wrap 0.88x torch.index_select"),
    ((771, 24910), 'uint8', 1, (484367,), 'int32', "sweep-3141 rows_u1_i32_fast32_wrap 0.90x torch.index_select"),
    ((7, 1, 509, 60), 'int64', 3, (58, 167), 'int64', "sweep-2027-pack slab_u8_i64_fast32_wrap 0.91x torch.index_select"),
    ((4,), 'uint8', 0, (192197, 20), 'int32', "sweep-3141 scalar_u1_i32_fast32_wrap 0.93x torch.index_select"),
    ((104, 8454), 'float32', 1, (9, 220838), 'int64', "sweep-4711 rows_u4_i64_fast32_wrap 0.93x torch.index_select"),
    ((6, 919, 1, 428), 'int64', 3, (10997,), 'int64', "sweep-6577 inner_u8_i64_fast32_wrap 0.95x torch.index_select"),
    ((34,), 'int8', 0, (3088974,), 'int64', "sweep-2718 scalar_u1_i64_fast32_wrap 0.95x torch.index_select"),
    ((23174,), 'bool', 0, (2753653,), 'int32', "sweep-5051 inner_u1_i32_fast32_wrap 0.97x torch.index_select"),
    ((60,), 'bool', 0, (4001533,), 'int64', "sweep-8219-lean scalar_u1_i64_fast32_wrap 0.97x torch.index_select"),
    ((746, 4445), 'int64', 1, (2773,), 'int64', "sweep-777-first-table scalar_u8_i64_fast32_wrap 0.99x torch.index_select"),
    ((622,), 'bool', 0, (3230977,), 'int64', "sweep-5923-first-380 flat_u1_i64_fast32_wrap 1.00x torch.index_select"),
    ((45,), 'uint8', 0, (2046854,), 'int64', "sweep-7919 scalar_u1_i64_fast32_wrap 1.00x torch.index_select"),
    ((6786,), 'int8', 0, (3352448,), 'int32', "sweep-2718 inner_u1_i32_fast32_wrap 1.02x torch.index_select"),
    ((1, 1, 1550), 'int8', 2, (359, 4593), 'int32', "sweep-2663-lean lean_u1_i32_fast32_wrap 1.02x torch.index_select"),
    ((4, 3628), 'int64', 1, (394607,), 'int32', "sweep-7919 flat_u8_i32_fast32_wrap 1.03x torch.index_select"),
    ((401,), 'int8', 0, (3062415,), 'int64', "sweep-6577 inner_u1_i64_fast32_wrap 1.04x torch.index_select"),
    ((16118,), 'int16', 0, (1, 1776597), 'int64', "sweep-5051 inner_u2_i64_fast32_wrap 1.04x torch.index_select"),
    ((1, 2534, 1, 16), 'int64', 3, (827, 10), 'int64', "sweep-6211 flat_u8_i64_fast32_wrap 1.06x torch.index_select"),
    ((262, 1, 1792), 'complex128', 2, (20356, 1), 'int32', "sweep-2971 lean_u16_i32_fast32_wrap 1.06x torch.index_select"),
    ((95,), 'int16', 0, (229, 6091), 'int64', "sweep-4711 inner_u2_i64_fast32_wrap 1.07x torch.index_select"),
    ((206,), 'int8', 0, (2484246,), 'int64', "sweep-9241-again inner_u1_i64_fast32_wrap 1.08x torch.index_select"),
    ((2728,), 'int8', 0, (2584726,), 'int64', "sweep-9241-again inner_u1_i64_fast32_wrap 1.08x torch.index_select"),
    ((46, 36, 6), 'complex128', 2, (4771,), 'int64', "sweep-6151-penalty4 scalar_u16_i64_fast32_wrap 1.08x torch.index_select"),
    ((43,), 'bool', 0, (1967351,), 'int64', "sweep-8128 inner_u1_i64_fast32_wrap 1.09x torch.index_select"),
    ((9, 2, 14272), 'float16', 2, (1315475,), 'int32', "sweep-9241-again flat_u2_i32_fast32_wrap 1.09x torch.index_select"),
    ((9,), 'uint8', 0, (1811227,), 'int32', "sweep-6793-pack inner_u1_i32_fast32_wrap 1.10x torch.index_select"),
    ((72, 2526), 'complex128', 1, (24338,), 'int32', "sweep-1231 inner_u16_i32_fast32_wrap 1.10x torch.index_select"),
    ((812, 1, 4539), 'float64', 2, (19315,), 'int32', "sweep-7919 flat_u8_i32_fast32_wrap 1.11x torch.index_select"),
    ((4, 1184), 'complex128', 1, (2078787,), 'int32', "sweep-2718 inner_u16_i32_fast32_wrap 1.11x torch.index_select"),
    ((3, 1, 1, 6565), 'int32', 3, (2190358,), 'int64', "sweep-1732 flat_u4_i64_fast32_wrap 1.14x torch.index_select"),
    ((1, 2, 2, 16543), 'int16', 3, (1996613,), 'int64', "sweep-6389 inner_u2_i64_fast32_wrap 1.18x torch.index_select"),
    ((159,), 'int8', 0, (1, 4585297), 'int64', "sweep-2027-pack inner_u1_i64_fast32_wrap 1.19x torch.index_select"),
    ((2, 5488), 'int8', 1, (1691501,), 'int64', "sweep-2236 inner_u1_i64_fast32_wrap 1.20x torch.index_select"),
    ((2, 2, 1, 2712), 'complex128', 3, (7, 171719), 'int64', "sweep-2971 lean_u16_i64_fast32_wrap 1.21x torch.index_select"),
    ((397,), 'float16', 0, (1934005,), 'int32', "sweep-3907-penalty4 flat_u2_i32_fast32_wrap 1.22x torch.index_select"),
    ((2, 1091, 3, 11), 'float64', 3, (5971,), 'int32', "sweep-1732 inner_u8_i32_fast32_wrap 1.23x torch.index_select"),
    ((140, 2182), 'complex128', 1, (1, 27518), 'int64', "sweep-1414 inner_u16_i64_fast32_wrap 1.26x torch.index_select"),
    ((829, 1631), 'complex128', 1, (5823,), 'int32', "sweep-5051 inner_u16_i32_fast32_wrap 1.28x torch.index_select"),
    ((1803, 1757), 'int64', 1, (294, 91), 'int32', "sweep-4711 slab_u8_i32_fast32_wrap 1.28x torch.index_select"),
    ((7, 1, 2078, 2), 'int64', 2, (1064317,), 'int32', "sweep-9241-again lean_u16_i32_fast32_wrap 1.34x torch.index_select"),
    ((1, 69, 1, 2), 'uint8', 1, (1825577,), 'int64', "sweep-777-first-table slab_u2_i64_fast32_wrap 1.34x torch.index_select"),
    ((2, 3779, 3), 'float64', 2, (16244,), 'int64', "sweep-6151-penalty4 flatv_u8_i64_fast32_wrap 1.36x torch.index_select"),
    ((7, 2982), 'complex128', 1, (415359,), 'int64', "sweep-5051 inner_u16_i64_fast32_wrap 1.39x torch.index_select"),
    ((15, 3710, 2), 'int32', 1, (145003, 2), 'int32', "sweep-7919 flatv_u8_i32_fast32_wrap 1.41x torch.index_select"),
    ((1, 107, 2, 5811), 'int64', 3, (39394,), 'int64', "sweep-777-first-table inner_u8_i64_fast32_wrap 1.61x torch.index_select"),
    ((3162, 2), 'uint8', 0, (1745245,), 'int64', "sweep-3571 inner_u2_i64_fast32_wrap 1.64x torch.index_select"),
    ((1893, 3, 9, 4), 'float16', 2, (4146,), 'int32', "sweep-31337 slab_u8_i32_fast32_wrap 1.93x jax.numpy.take"),
    ((5916, 18, 2, 1), 'float32', 1, (3436,), 'int64', "sweep-9973 inner_u8_i64_fast32_wrap 2.48x jax.numpy.take"),
    # four more whose launch the shipped rule changes, with 8448 or more outer rows
    ((7078, 2, 243), 'float64', 2, (8533,), 'int32', "sweep-5923-first-380 flat_u8_i32_fast32_wrap 0.97x torch.index_select"),
    ((537, 29, 1, 21), 'int64', 3, (4345,), 'int32', "sweep-6211 flat_u8_i32_fast32_wrap 1.04x torch.index_select"),
    ((14952, 22), 'float64', 1, (8305,), 'int32', "sweep-2663-lean flat_u8_i32_fast32_wrap 1.06x torch.index_select"),
    ((12499, 1, 9649), 'int32', 2, (11373,), 'int64', "sweep-9241-again inner_u4_i64_fast32_wrap 1.67x torch.index_select"),
    # tuning geometries (seeds 1000-1002) where inner's retimed records under t32r1
    # were slower than under b4 by more than 10% (tune-sm_90-seed*-inner2.jsonl)
    ((1, 35), 'float32', 1, (22147, 246), 'int32', "tune-1000#85 inner 0.61x under t32r1"),
    ((4, 7, 1, 2584), 'complex128', 3, (54757,), 'int64', "tune-1000#116 inner 0.81x under t32r1"),
    ((12, 75), 'int16', 1, (1118249,), 'int32', "tune-1000#231 inner 0.81x under t32r1"),
    ((2, 1, 1, 8833), 'int32', 3, (6594211,), 'int64', "tune-1000#232 inner 0.88x under t32r1"),
    ((1, 2, 18), 'int64', 2, (4050316,), 'int64', "tune-1000#486 inner 0.87x under t32r1"),
    ((1,), 'float32', 0, (6372603,), 'int64', "tune-1000#855 inner 0.84x under t32r1"),
    ((1722,), 'complex128', 0, (1161325,), 'int64', "tune-1000#1303 inner 0.81x under t32r1"),
    ((210,), 'float64', 0, (4800597,), 'int32', "tune-1000#1812 inner 0.88x under t32r1"),
    ((464, 4554), 'int64', 1, (20005,), 'int64', "tune-1000#1851 inner 0.86x under t32r1"),
    ((513,), 'int16', 0, (12425058,), 'int32', "tune-1001#282 inner 0.78x under t32r1"),
    ((4951, 1, 2, 7693), 'int32', 3, (84, 104), 'int32', "tune-1001#381 inner 0.86x under t32r1"),
    ((2, 2, 2951), 'int16', 2, (11627425,), 'int64', "tune-1001#450 inner 0.84x under t32r1"),
    ((4321,), 'int64', 0, (14849092,), 'int32', "tune-1001#1100 inner 0.90x under t32r1"),
    ((7, 4), 'float64', 1, (665988,), 'int64', "tune-1001#1177 inner 0.82x under t32r1"),
    ((16,), 'float16', 0, (53, 198817), 'int64', "tune-1001#1201 inner 0.70x under t32r1"),
    ((1, 1, 1, 1300), 'int32', 3, (14502290,), 'int32', "tune-1001#1585 inner 0.88x under t32r1"),
    ((2, 1, 2, 5077), 'int64', 3, (121, 35573), 'int64', "tune-1001#1827 inner 0.88x under t32r1"),
    ((16004, 278), 'int64', 1, (143, 34), 'int64', "tune-1002#104 inner 0.86x under t32r1"),
    ((12, 287), 'int8', 1, (9751430,), 'int64', "tune-1002#351 inner 0.86x under t32r1"),
    ((1, 44), 'float32', 1, (5927533,), 'int32', "tune-1002#1000 inner 0.62x under t32r1"),
    ((1178,), 'complex128', 0, (1229053,), 'int64', "tune-1002#1015 inner 0.85x under t32r1"),
    ((287,), 'int64', 0, (3, 1743848), 'int32', "tune-1002#1084 inner 0.86x under t32r1"),
    ((17,), 'complex128', 0, (3157032,), 'int32', "tune-1002#1314 inner 0.87x under t32r1"),
]


def us(t):
    return float(np.median(t)) * 1000


def main():
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)  # keep float64 and int64 as they are
    import torch
    rt = cp.cuda.runtime
    res, t0 = [], time.perf_counter()
    for shape, dtype, axis, ishape, idt, note in CASES:
        if time.perf_counter() - t0 > BUDGET_S:
            break
        rng = cp.random.default_rng(1)
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        data = rng.integers(0, 1 << 30, size=(n + 3) // 4, dtype=np.int32).view(np.uint8)[:n]
        data = data.view(np.uint8 if dtype == "bool" else dtype).reshape(shape)
        if dtype == "bool":
            data = (data & 1).view(np.bool_)
        idx = rng.integers(0, shape[axis], size=ishape, dtype=np.int64).astype(idt)
        ref = cp.take(data, idx, axis=axis)
        row = {"shape": shape, "dtype": dtype, "axis": axis, "indices": ishape,
               "index_dtype": idt, "note": note, "out_bytes": int(ref.nbytes), "us": {},
               "launch": {}}
        u = row["us"]
        src, dst = cp.empty(ref.nbytes, cp.uint8), cp.empty(ref.nbytes, cp.uint8)
        u["copy"] = us(time_cupy(cp, lambda: rt.memcpyAsync(
            dst.data.ptr, src.data.ptr, ref.nbytes, rt.memcpyDeviceToDevice,
            cp.cuda.get_current_stream().ptr), 40))
        operand = Operand(data.shape, data.strides, data.itemsize, alignment(data.data.ptr))
        shipped = [getattr(tuning, k) for k in KNOBS]
        try:
            for label, knobs in VARIANTS.items():
                for k, v in zip(KNOBS, knobs):
                    setattr(tuning, k, v)
                plan = plan_gather(operand, idx.shape, idt, axis, "wrap",
                                   limits=CUDA.limits(0), kind="inner")
                bound = bind(plan, 0, None, CUDA, data.dtype)
                fn = lambda: execute(bound, data, data.data.ptr, idx, None, None, 0)  # noqa: E731
                assert bool((fn().view(cp.uint8) == ref.view(cp.uint8)).all()), (label, shape)
                row["launch"][label] = [plan.key.entry, plan.main.grid, plan.main.block,
                                        plan.main.fields["chunk"]]
                u[label] = us(time_cupy(cp, fn, 40))
        finally:
            for k, v in zip(KNOBS, shipped):
                setattr(tuning, k, v)
        u["cupy.take"] = us(time_cupy(cp, lambda: cp.take(data, idx, axis=axis), 40))
        td, ti = torch.from_dlpack(data), torch.from_dlpack(idx.reshape(-1))
        tfn = lambda: torch.index_select(td, axis, ti)  # noqa: E731
        got = cp.from_dlpack(tfn()).reshape(ref.shape)
        assert bool((got.view(cp.uint8) == ref.view(cp.uint8)).all()), ("torch", shape)
        u["torch"] = us(time_torch(torch, tfn, 40))
        jd, ji = jax.dlpack.from_dlpack(data), jax.dlpack.from_dlpack(idx)
        take = jax.jit(lambda d, i: jnp.take(d, i, axis=axis, mode="clip"))
        got = cp.from_dlpack(take(jd, ji))
        assert bool((got.view(cp.uint8) == ref.view(cp.uint8)).all()), ("jax", shape)
        u["jax"] = us(time_jax(lambda: take(jd, ji), 40))
        best = min(u[k] for k in ("cupy.take", "torch", "jax"))
        print(shape, dtype, ishape, idt, note, {k: round(v, 1) for k, v in u.items()},
              "| vs best peer: " + " ".join(f"{v} {best / u[v]:.2f}" for v in VARIANTS),
              flush=True)
        res.append(row)
        del data, idx, ref, src, dst, td, ti, jd, ji
        cp.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(OUT, "probe-inner.json"), "w") as f:
        json.dump({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                   "cases": res}, f, indent=1)


if __name__ == "__main__":
    main()
