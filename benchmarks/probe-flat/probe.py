"""The probe behind the flat kernel (BENCHMARKS.md, "The flat kernel ..."), on a GPU:

    python benchmarks/probe-flat/probe.py            # write ceilings, the probe's kernels
                                                     # (kernels.cu) against the planned and
                                                     # forced library kernels and the peers,
                                                     # short calls single and back to back
    python benchmarks/probe-flat/probe.py nostream   # the same, library kernels built
                                                     # without evict-first stores, no peers
    python benchmarks/probe-flat/probe.py flat       # the library's flat kernel beside them,
                                                     # and the launch cost of a 272-byte
                                                     # parameter block

Writes probe[_nostream|_flat].json into $OUT (default /tmp).
"""
import json, os, sys, time
import numpy as np
NOSTREAM = len(sys.argv) > 1 and sys.argv[1] in ("nostream", "flat")
FLATMODE = len(sys.argv) > 1 and sys.argv[1] == "flat"
if NOSTREAM and not FLATMODE:
    from cugather.plan import tuning
    tuning.STREAM_STORES = 0
    tuning.KERNEL_DEFINES["CG_STREAM_STORES"] = 0
import cupy as cp
import cugather
from cugather.plan.core import Operand, alignment
from cugather.plan.gather import plan_gather
from cugather.runtime.binding import bind
from cugather.runtime.launch import CUDA, execute
from cugather.plan.fastdiv import make_divisor
from cugather.bench.peers import time_cupy, time_torch, time_jax

R = {}
def us(t): return float(np.median(t)) * 1000
def tc(fn, rep=30): return us(time_cupy(cp, fn, rep))
src = open(os.path.join(os.path.dirname(__file__), "kernels.cu")).read()
mod = cp.RawModule(code=src, options=("-std=c++17",), name_expressions=None)
K = lambda n: mod.get_function(n)

def forced(data, idx, axis, kind=None, ru=None):
    operand = Operand(data.shape, data.strides, data.itemsize, alignment(data.data.ptr))
    plan = plan_gather(operand, idx.shape, str(idx.dtype), axis, "wrap", limits=CUDA.limits(0), kind=kind, row_unroll=ru)
    bound = bind(plan, 0, None, CUDA, data.dtype)
    ptr = data.data.ptr
    return plan, (lambda: execute(bound, data, ptr, idx, None, None, 0))

def same(a, b): return a.shape == b.shape and bool((a.view(cp.uint8) == b.view(cp.uint8)).all())

def flat_launch(name, data, idx, axis, out, ilp):
    shp = data.shape; it = data.itemsize
    outer = int(np.prod(shp[:axis])); axis_len = shp[axis]; inner = int(np.prod(shp[axis + 1:]))
    U = {"u4": 4, "u2": 2, "u8": 8}[name.split("_")[1]]
    units = inner * it // U; n = idx.size; total = outer * n * units
    du = make_divisor(units, 32); dn = make_divisor(n, 32)
    V = 16 // U
    chunks = (total + V - 1) // V
    grid = min((chunks + 256 * ilp - 1) // (256 * ilp), 132 * 32)
    f = K(name)
    args = (data, idx, out, np.uint32(total), np.uint32(units), np.uint32(du.m), np.uint32(du.l), np.uint32(n),
            np.uint32(dn.m), np.uint32(dn.l), np.int64(axis_len * inner * it), np.int64(inner * it), np.int64(axis_len))
    return lambda: (f((grid,), (256,), args), out)[1]

def case(name, shape, dtype, axis, n, idt, kinds, flats, slabv=None):
    if FLATMODE:
        kinds = [("flat", None)] + list(kinds)
        slabv = None
    rng = cp.random.default_rng(1)
    data = rng.integers(0, 255, size=shape, dtype=np.int32).astype(dtype) if np.dtype(dtype).kind != "f" else rng.standard_normal(shape, dtype=np.float32).astype(dtype)
    idx = rng.integers(0, shape[axis], size=n, dtype=np.int64).astype(idt)
    ref = cp.take(data, idx, axis=axis)
    res = {"out_MB": ref.nbytes / 1e6}
    src_ = cp.empty_like(ref); dst_ = cp.empty_like(ref)
    rt = cp.cuda.runtime
    res["copy"] = tc(lambda: rt.memcpyAsync(dst_.data.ptr, src_.data.ptr, ref.nbytes, rt.memcpyDeviceToDevice, cp.cuda.get_current_stream().ptr))
    op = cugather.GatherOp(axis, mode="wrap")
    plan = op.plan(data, idx); res["planned_kind"] = plan.key.entry
    assert same(op(data, idx), ref)
    res["planned"] = tc(lambda: op(data, idx))
    for k, ru in kinds:
        try:
            p, fn = forced(data, idx, axis, k, ru)
            ok = same(fn(), ref)
            res[f"{k}/{ru}"] = tc(fn) if ok else "MISMATCH"
        except Exception as e:
            res[f"{k}/{ru}"] = f"{type(e).__name__}: {e}"[:120]
    out = cp.empty_like(ref)
    for fl, ilp in flats:
        fn = flat_launch(fl, data, idx, axis, out, ilp)
        out.fill(0); ok = same(fn(), ref)
        res[fl] = tc(fn) if ok else "MISMATCH"
    if slabv:
        f = K(slabv); outer = int(np.prod(shape[:axis]))
        smem = data.nbytes
        grid = 132 * 8
        fn = lambda: (f((grid,), (256,), (data, idx, out, np.uint32(outer), np.uint32(shape[axis]), np.uint32(n)), shared_mem=smem), out)[1]
        out.fill(0); ok = same(fn(), ref)
        res[slabv] = tc(fn) if ok else "MISMATCH"
    if not NOSTREAM:
        import torch, jax, jax.numpy as jnp
        td = torch.from_dlpack(data); ti = torch.from_dlpack(idx)
        tf = lambda: torch.index_select(td, axis, ti)
        res["torch"] = us(time_torch(torch, tf, 30))
        jd = jax.dlpack.from_dlpack(data); ji = jax.dlpack.from_dlpack(idx)
        take = jax.jit(lambda d, i: jnp.take(d, i, axis=axis, mode="clip"))
        take(jd, ji).block_until_ready()
        res["jax"] = us(time_jax(lambda: take(jd, ji), 30))
    R[name] = res
    print(name, json.dumps(res), flush=True)
    del data, idx, ref, out, src_, dst_
    cp.get_default_memory_pool().free_all_blocks()

if not NOSTREAM:
    p = cp.empty(340_000_000 // 16 * 16, dtype=cp.uint8)
    for nm, w in (("w4", 4), ("w4cs", 4), ("w16", 16), ("w16cs", 16)):
        f = K(nm); n = p.nbytes // w
        for g in (132 * 8, 132 * 32):
            R[f"{nm}_g{g}"] = tc(lambda: f((g,), (256,), (p, np.uint64(n))))
    R["memset"] = tc(lambda: p.fill(0))
    print("write", json.dumps({k: v for k, v in R.items()}), flush=True)
    del p

case("R1_slab_i32_rb4", (20, 12), np.int32, 1, 4260766, np.int64, [("slab", None), ("scalar", None), ("pack", None), ("inner", None)],
     [("flat_u4_i64_1", 1), ("flat_u4_i64_2", 2), ("flat_u4_i64_1n", 1)], "slabv_u4")
case("R2_rows_f32_rb28", (250, 7), np.float32, 0, 4543668, np.int64, [("rows", 4), ("rows", 2), ("window", None)],
     [("flat_u4_i64_1", 1), ("flat_u4_i64_2", 2)])
case("R2i32_rows_f32_rb28", (250, 7), np.float32, 0, 4543668, np.int32, [("rows", 4), ("window", None)],
     [("flat_u4_i32_1", 1), ("flat_u4_i32_2", 2)])
case("R3_slab_f64_rb8", (22631, 2), np.float64, 1, 4051, np.int64, [("slab", None), ("scalar", None), ("inner", None), ("pack", None)],
     [("flat_u8_i64_1", 1), ("flat_u8_i64_2", 2), ("flat_u8_i64_4", 4)])
case("R4_rows_f16_rb10", (3350, 5), np.float16, 0, 4533002, np.int64, [("rows", 4), ("pack", None)],
     [("flat_u2_i64_1", 1), ("flat_u2_i64_2", 2)])
case("R5_rows_f32_rb20_dram", (20_000_000, 5), np.float32, 0, 4_000_000, np.int64, [("rows", 4), ("window", None)],
     [("flat_u4_i64_1", 1), ("flat_u4_i64_2", 2)])
case("R6_slab_i64_rb8", (3615, 15), np.int64, 1, 31222, np.int64, [("slab", None), ("scalar", None), ("inner", None)],
     [("flat_u8_i64_1", 1), ("flat_u8_i64_2", 2)])

if not NOSTREAM:
    # launch-bound: single held call vs 50 back-to-back, cugather / cupy / torch, and empty kernels
    import torch
    from cugather.bench.peers import external_stream
    L = {}
    e = K("empty_k")
    L["empty_cupy"] = tc(lambda: e((1,), (32,), (np.int32(0),)), 60)
    ts = torch.cuda.current_stream(); ext = external_stream(cp, ts.cuda_stream)
    def e_t():
        with ext: e((1,), (32,), (np.int32(0),))
    L["empty_on_torch_stream_torch_events"] = us(time_torch(torch, e_t, 60))
    L["torch_empty_like_kernel"] = us(time_torch(torch, lambda: torch.cuda._sleep(0), 60))
    L["cupy_stream_ptr"] = cp.cuda.get_current_stream().ptr; L["torch_stream_ptr"] = ts.cuda_stream
    rng = cp.random.default_rng(2)
    for nm, shape, dt, ax, n, idt in (("c128_rb3328_n44", (30000, 208), np.complex128, 0, 44, np.int64),
                                      ("i32_rb4_n10404", (1_000_000,), np.int32, 0, 10404, np.int32),
                                      ("f16_rb2_n2429", (1000,), np.float16, 0, 2429, np.int64),
                                      ("i64_rb17200_n29", (30000, 2150), np.int64, 0, 29, np.int32)):
        data = rng.integers(0, 100, size=shape, dtype=np.int64).astype(dt)
        idx = rng.integers(0, shape[ax], size=n, dtype=np.int64).astype(idt)
        op = cugather.GatherOp(ax, mode="wrap"); op(data, idx)
        td = torch.from_dlpack(data); ti = torch.from_dlpack(idx)
        res = {"kind": op.plan(data, idx).key.entry}
        res["cg_1"] = tc(lambda: op(data, idx), 60)
        res["cupy_1"] = tc(lambda: cp.take(data, idx, axis=ax), 60)
        res["torch_1"] = us(time_torch(torch, lambda: torch.index_select(td, ax, ti), 60))
        def b50(f):
            def g():
                for _ in range(50): f()
            return g
        res["cg_50"] = tc(b50(lambda: op(data, idx)), 20) / 50
        res["cupy_50"] = tc(b50(lambda: cp.take(data, idx, axis=ax)), 20) / 50
        res["torch_50"] = us(time_torch(torch, b50(lambda: torch.index_select(td, ax, ti)), 20)) / 50
        # cugather launched on torch's stream, timed with torch events
        with ext:
            op(data, idx)
            def cgt():
                with ext: op(data, idx)
            res["cg_on_torch_stream_1"] = us(time_torch(torch, cgt, 60))
        L[nm] = res
        print(nm, json.dumps(res), flush=True)
    R["launch"] = L
if FLATMODE:
    e = K("empty_k"); b = K("empty_big")
    big = np.zeros(34, np.uint64)
    L = {}
    L["empty_1arg"] = tc(lambda: e((1,), (32,), (np.int32(0),)), 60)
    import ctypes
    class Big(ctypes.Structure):
        _fields_ = [("w", ctypes.c_uint64 * 34)]
    bb = Big()
    try:
        L["empty_272B"] = tc(lambda: b((1,), (32,), (bb,)), 60)
    except Exception as ex:
        print("ctypes struct arg failed:", ex)
        bb = np.zeros(1, dtype=[("w", "<u8", (34,))])[0]
        L["empty_272B"] = tc(lambda: b((1,), (32,), (bb,)), 60)
    def b50(f):
        def g():
            for _ in range(50): f()
        return g
    L["empty_1arg_50"] = tc(b50(lambda: e((1,), (32,), (np.int32(0),))), 20) / 50
    L["empty_272B_50"] = tc(b50(lambda: b((1,), (32,), (bb,))), 20) / 50
    L["empty_1arg_g64x256_50"] = tc(b50(lambda: e((64,), (256,), (np.int32(0),))), 20) / 50
    R["launch_params"] = L
    print("launch_params", json.dumps(L), flush=True)
out = os.environ.get("OUT", "/tmp")
json.dump(R, open(os.path.join(out, "probe%s.json" % ("_flat" if FLATMODE else "_nostream" if NOSTREAM else "")), "w"), indent=1)
