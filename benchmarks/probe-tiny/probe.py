"""Rows of one unit gathered from small tables into large outputs, and random
rows of one unit from DRAM (BENCHMARKS.md, "Vector index loads"), on a GPU:

    XLA_PYTHON_CLIENT_PREALLOCATE=false python benchmarks/probe-tiny/probe.py
    # writes $OUT/probe-tiny.json

A loop in flat's shape (V consecutive output units per thread, one vector
store, wrap's negative indices only) with its V indices loaded one by one or,
where every row is one unit and V divides the index count, as one vector load
("vec"); V of 4, 8 and 16 units; a grid-stride loop on 8 blocks per SM or one
chunk per thread ("ns"). Beside them the library's planned kernel, forced
flat and lean, cupy.take, torch.index_select, jax.numpy.take and the device
copy of the same bytes. Every result is checked against cupy.take; TB/s of
2 x output + index bytes, medians of 30 calls.
"""
import json, os
import numpy as np
import cupy as cp
OUT = os.environ.get("OUT", "/tmp")
import cugather
from cugather.bench.peers import time_cupy, time_jax, time_torch
from cugather.plan.core import Operand, alignment
from cugather.plan import tuning
from cugather.plan.gather import plan_gather
from cugather.plan.fastdiv import make_divisor
from cugather.runtime.binding import bind
from cugather.runtime.launch import CUDA, execute
import torch, jax, jax.numpy as jnp
tuning.LEAN_MAX_OUT = 1 << 45

SRC = r'''
typedef unsigned int u32; typedef unsigned long long u64; typedef long long i64;
__device__ __forceinline__ u32 fdiv(u32 n, u32 m, u32 l) { return (__umulhi(m, n) + n) >> l; }
template <int B> struct VT;
template <> struct VT<4> { typedef unsigned int T; };
template <> struct VT<8> { typedef uint2 T; };
template <> struct VT<16> { typedef uint4 T; };
template <class U, class Idx, int V, bool VEC>
__device__ __forceinline__ void body(const char* __restrict__ data, const Idx* __restrict__ idx,
    char* __restrict__ out, u32 chunks, u32 units, u32 um, u32 ul, u32 nidx, u32 nm, u32 nl,
    i64 s_outer, i64 s_axis, i64 axlen, u32 c)
{
    const u32 g0 = c * V;
    u32 row = fdiv(g0, um, ul), u = g0 - row * units;
    u32 o = fdiv(row, nm, nl), n = row - o * nidx;
    i64 ii[V];
    u32 uu[V], oo[V];
    if (VEC) {
        constexpr int IB = V * sizeof(Idx) < 16 ? V * sizeof(Idx) : 16;
        typedef typename VT<IB>::T L;
        constexpr int PER = IB / sizeof(Idx);
#pragma unroll
        for (int q = 0; q < V / PER; ++q) {
            L w = __ldg((const L*)(idx + n) + q);
            const Idx* p = (const Idx*)&w;
#pragma unroll
            for (int k = 0; k < PER; ++k) { ii[q * PER + k] = p[k]; uu[q * PER + k] = 0; oo[q * PER + k] = o; }
        }
    } else {
#pragma unroll
        for (int k = 0; k < V; ++k) {
            uu[k] = u; oo[k] = o;
            ii[k] = __ldg(idx + n);
            if (++u == units) { u = 0; if (++n == nidx) { n = 0; ++o; } }
        }
    }
    U v[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
        i64 i = ii[k]; if (i < 0) i += axlen;
        v[k] = __ldg((const U*)(data + (i64)oo[k] * s_outer + i * s_axis) + uu[k]);
    }
    constexpr int SB = V * sizeof(U) < 16 ? V * sizeof(U) : 16;
    typedef typename VT<SB>::T S;
#pragma unroll
    for (int q = 0; q < V * (int)sizeof(U) / SB; ++q) {
        S w; memcpy(&w, (const char*)v + q * SB, SB);
        __stcs((S*)(out + (u64)g0 * sizeof(U)) + q, w);
    }
}
template <class U, class Idx, int V, bool VEC, bool NS>
__global__ void __launch_bounds__(256) fx(const char* __restrict__ data, const Idx* __restrict__ idx,
    char* __restrict__ out, u32 chunks, u32 units, u32 um, u32 ul, u32 nidx, u32 nm, u32 nl,
    i64 s_outer, i64 s_axis, i64 axlen)
{
    if (NS) {
        u32 c = blockIdx.x * blockDim.x + threadIdx.x;
        if (c < chunks) body<U, Idx, V, VEC>(data, idx, out, chunks, units, um, ul, nidx, nm, nl, s_outer, s_axis, axlen, c);
    } else {
        for (u32 c = blockIdx.x * blockDim.x + threadIdx.x; c < chunks; c += gridDim.x * blockDim.x)
            body<U, Idx, V, VEC>(data, idx, out, chunks, units, um, ul, nidx, nm, nl, s_outer, s_axis, axlen, c);
    }
}
'''
TY = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
IT = {"int32": "int", "int64": "long long"}
VARIANTS = []
for U in (1, 2, 4, 8):
    for it in ("int32", "int64"):
        for V in (2, 4, 8, 16):
            if V * U > 64 or V * U < 4:
                continue
            for vec in (False, True):
                for ns in (False, True):
                    VARIANTS.append((U, it, V, vec, ns))
NAMES = {v: "fx<%s, %s, %d, %s, %s>" % (TY[v[0]], IT[v[1]], v[2], str(v[3]).lower(), str(v[4]).lower())
         for v in VARIANTS}
mod = cp.RawModule(code=SRC, options=("-std=c++17",), name_expressions=list(NAMES.values()))

R = {}
def us(t): return float(np.median(t)) * 1000
def tc(fn, rep=30): return us(time_cupy(cp, fn, rep))
def same(a, b): return a.shape == b.shape and bool((a.view(cp.uint8) == b.view(cp.uint8)).all())

def forced(data, idx, axis, kind):
    operand = Operand(data.shape, data.strides, data.itemsize, alignment(data.data.ptr))
    plan = plan_gather(operand, idx.shape, str(idx.dtype), axis, "wrap", limits=CUDA.limits(0), kind=kind)
    bound = bind(plan, 0, None, CUDA, data.dtype)
    ptr = data.data.ptr
    return lambda: execute(bound, data, ptr, idx, None, None, 0)

def fx_launch(v, data, idx, axis, out):
    U, it, V, vec, ns = v
    shp = data.shape
    outer = int(np.prod(shp[:axis])); axis_len = shp[axis]; inner = int(np.prod(shp[axis + 1:]))
    it_b = data.itemsize
    units = inner * it_b // U; n = idx.size; total = outer * n * units
    if total % V or (vec and (units != 1 or n % V)):
        return None
    du = make_divisor(units, 32); dn = make_divisor(n, 32)
    chunks = total // V
    grid = (chunks + 255) // 256 if ns else min((chunks + 255) // 256, 132 * 8)
    f = mod.get_function(NAMES[v])
    args = (data, idx, out, np.uint32(chunks), np.uint32(units), np.uint32(du.m), np.uint32(du.l),
            np.uint32(n), np.uint32(dn.m), np.uint32(dn.l), np.int64(axis_len * inner * it_b),
            np.int64(inner * it_b), np.int64(axis_len))
    return lambda: (f((grid,), (256,), args), out)[1]

def case(name, shape, dtype, axis, n, idt, unit):
    rng = cp.random.default_rng(1)
    data = rng.integers(0, 120, size=shape, dtype=np.int32).astype(dtype)
    idx = rng.integers(-shape[axis], shape[axis], size=n, dtype=np.int64).astype(idt)
    ref = cp.take(data, idx, axis=axis)  # cupy.take wraps
    res = {"shape": list(shape), "dtype": np.dtype(dtype).name, "axis": axis, "n": n, "idx": idt,
           "bytes": 2 * ref.nbytes + idx.nbytes}
    a = cp.empty_like(ref); b = cp.empty_like(ref)
    rt = cp.cuda.runtime
    T = {}
    T["copy"] = tc(lambda: rt.memcpyAsync(b.data.ptr, a.data.ptr, ref.nbytes, rt.memcpyDeviceToDevice,
                                           cp.cuda.get_current_stream().ptr))
    op = cugather.GatherOp(axis, mode="wrap")
    res["planned_kind"] = op.plan(data, idx).key.entry
    assert same(op(data, idx), ref)
    T["planned"] = tc(lambda: op(data, idx))
    for k in ("flat", "lean"):
        fn = forced(data, idx, axis, k)
        T[k] = tc(fn) if same(fn(), ref) else "MISMATCH"
    T["cupy"] = tc(lambda: cp.take(data, idx, axis=axis))
    out = cp.empty_like(ref)
    for v in VARIANTS:
        if v[0] != unit or v[1] != idt:
            continue
        fn = fx_launch(v, data, idx, axis, out)
        if fn is None:
            continue
        out.fill(0)
        key = "fx_V%d%s%s" % (v[2], "_vec" if v[3] else "", "_ns" if v[4] else "")
        T[key] = tc(fn) if same(fn(), ref) else "MISMATCH"
    td = torch.from_dlpack(data); ti = torch.from_dlpack(idx) % shape[axis]
    T["torch"] = us(time_torch(torch, lambda: torch.index_select(td, axis, ti), 30))
    jd = jax.dlpack.from_dlpack(data); ji = jax.dlpack.from_dlpack(idx)
    take = jax.jit(lambda d, i: jnp.take(d, i, axis=axis, mode="wrap"))
    take(jd, ji).block_until_ready()
    T["jax"] = us(time_jax(lambda: take(jd, ji), 30))
    res["us"] = T
    res["TBps"] = {k: (round(res["bytes"] / (t * 1e-6) / 1e12, 3) if isinstance(t, float) else t)
                   for k, t in T.items()}
    R[name] = res
    print(name, res["planned_kind"], json.dumps(res["TBps"]), flush=True)
    del data, idx, ref, out, a, b
    cp.get_default_memory_pool().free_all_blocks()

# small tables, one-unit rows, large outputs
case("T1_235x141_i32_ax1", (235, 141), np.int32, 1, 574724, "int32", 4)
case("T2_64x197_f32_ax1", (64, 197), np.float32, 1, 1111136, "int32", 4)
case("T3_19x7x54_f32_ax2_i64", (19, 7, 54), np.float32, 2, 4_000_000, "int64", 4)
case("T4_300x517_f16_ax1", (300, 517), np.float16, 1, 800_000, "int32", 2)
case("T5_71x3x22928_i8_ax3_i64", (1, 71, 3, 22928), np.int8, 3, 1806448, "int64", 1)
case("T5b_same_n_odd", (1, 71, 3, 22928), np.int8, 3, 1806441, "int64", 1)
case("T8_3000x100_f64_ax1", (3000, 100), np.float64, 1, 40000, "int64", 8)
# random one-unit rows from DRAM
case("D1_179x539660_f32_ax1", (179, 539660), np.float32, 1, 11896, "int32", 4)
case("D2_1595x975067_i64_ax1", (1595, 975067), np.int64, 1, 31632, "int64", 8)
case("D3_40x2000000_f16_ax1", (40, 2_000_000), np.float16, 1, 100_000, "int32", 2)
# an axis of length 1 (wrap: every index is 0; the planned kernel is bcast)
def bcast_case(name, shape, dtype, axis, n, idt):
    rng = cp.random.default_rng(2)
    data = rng.integers(0, 120, size=shape, dtype=np.int32).astype(dtype)
    idx = rng.integers(-3, 3, size=n, dtype=np.int64).astype(idt)
    ref = cp.take(data, idx, axis=axis)  # cupy.take wraps
    op = cugather.GatherOp(axis, mode="wrap")
    res = {"planned_kind": op.plan(data, idx).key.entry, "bytes": 2 * ref.nbytes + idx.nbytes}
    assert same(op(data, idx), ref)
    a = cp.empty_like(ref); b = cp.empty_like(ref)
    rt = cp.cuda.runtime
    T = {"copy": tc(lambda: rt.memcpyAsync(b.data.ptr, a.data.ptr, ref.nbytes, rt.memcpyDeviceToDevice,
                                            cp.cuda.get_current_stream().ptr)),
         "planned": tc(lambda: op(data, idx)), "flat": "", "cupy": tc(lambda: cp.take(data, idx, axis=axis))}
    fn = forced(data, idx, axis, "flat")
    T["flat"] = tc(fn) if same(fn(), ref) else "MISMATCH"
    td = torch.from_dlpack(data); ti = torch.from_dlpack(idx) % shape[axis]
    T["torch"] = us(time_torch(torch, lambda: torch.index_select(td, axis, ti), 30))
    jd = jax.dlpack.from_dlpack(data); ji = jax.dlpack.from_dlpack(idx)
    take = jax.jit(lambda d, i: jnp.take(d, i, axis=axis, mode="wrap"))
    take(jd, ji).block_until_ready()
    T["jax"] = us(time_jax(lambda: take(jd, ji), 30))
    res["us"] = T
    res["TBps"] = {k: (round(res["bytes"] / (t * 1e-6) / 1e12, 3) if isinstance(t, float) else t)
                   for k, t in T.items()}
    R[name] = res
    print(name, res["planned_kind"], json.dumps(res["TBps"]), flush=True)
    del data, idx, ref, a, b
    cp.get_default_memory_pool().free_all_blocks()

bcast_case("B1_2x2x2x1_f16_ax3_i64", (2, 2, 2, 1), np.float16, 3, 16_000_000, "int64")
bcast_case("B2_1x25_f32_ax0", (1, 25), np.float32, 0, 2_000_000, "int64")
bcast_case("B3_300x1x7_u8_ax1", (300, 1, 7), np.uint8, 1, 100_000, "int32")
json.dump(R, open(os.path.join(OUT, "probe-tiny.json"), "w"), indent=1)
