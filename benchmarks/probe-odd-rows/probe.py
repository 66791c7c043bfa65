"""Odd small rows, where jax.numpy.take beat cugather on held-out sweeps
(BENCHMARKS.md, "A leaf's box; odd rows"):

    XLA_PYTHON_CLIENT_PREALLOCATE=false python benchmarks/probe-odd-rows/probe.py
    # writes $OUT/exp.json

On each shape: cugather's flat, pack and rows/4 plans, forced; an element loop
in the style of XLA's loop fusion (E consecutive output units per thread, the
row and outer slice of each unit by division, one vector store; "xc"), and
the same with E units a block apart and scalar stores ("xs"); each with the
geometry as compile-time constants ("k") or as fast_divmod magic numbers
("m"). Every result is checked against cupy.take; TB/s of 2 x output +
index bytes, medians of 30 calls on a held stream; the device copy of the
same bytes, torch.index_select and jax.numpy.take beside them.
"""
import json, os, sys, math
import numpy as np
import cupy as cp
OUT = os.environ["OUT"]
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
typedef unsigned int u32; typedef unsigned long long u64;
struct alignas(XVB) Vec { XT v[XE]; };
__device__ __forceinline__ u32 fdiv(u32 n, u32 m, u32 l) { return (__umulhi(m, n) + n) >> l; }
__device__ __forceinline__ XT one(const XT* __restrict__ data, const XIDX* __restrict__ idx, u32 t,
    u32 units, u32 um, u32 ul, u32 nidx, u32 nm, u32 nl, long long s_outer, long long s_axis, long long axlen)
{
#if XCONST
    u32 row = t / XUNITS, u = t - row * XUNITS;
    u32 o = row / XNIDX, n = row - o * XNIDX;
    long long i = idx[n]; if (i < 0) i += XAXLEN;
    return __ldg(data + (long long)o * XSOUTER + i * XSAXIS + u);
#else
    u32 row = fdiv(t, um, ul), u = t - row * units;
    u32 o = fdiv(row, nm, nl), n = row - o * nidx;
    long long i = idx[n]; if (i < 0) i += axlen;
    return __ldg(data + (long long)o * s_outer + i * s_axis + u);
#endif
}
extern "C" __global__ void __launch_bounds__(256) xk(const XT* __restrict__ data, const XIDX* __restrict__ idx,
    XT* __restrict__ out, u32 total, u32 units, u32 um, u32 ul, u32 nidx, u32 nm, u32 nl,
    long long s_outer, long long s_axis, long long axlen)
{
#if XSTRIDED
    u32 base = blockIdx.x * blockDim.x * XE + threadIdx.x;
    XT v[XE];
#pragma unroll
    for (int e = 0; e < XE; ++e) {
        u32 t = base + e * blockDim.x;
        if (t < total) v[e] = one(data, idx, t, units, um, ul, nidx, nm, nl, s_outer, s_axis, axlen);
    }
#pragma unroll
    for (int e = 0; e < XE; ++e) {
        u32 t = base + e * blockDim.x;
        if (t < total) out[t] = v[e];
    }
#else
    u32 t0 = (blockIdx.x * blockDim.x + threadIdx.x) * XE;
    if (t0 >= total) return;
    Vec w;
#pragma unroll
    for (int e = 0; e < XE; ++e) {
        u32 t = t0 + e;
        if (t < total) w.v[e] = one(data, idx, t, units, um, ul, nidx, nm, nl, s_outer, s_axis, axlen);
    }
    if (t0 + XE <= total) *(Vec*)(out + t0) = w;
    else for (int e = 0; e < XE && t0 + e < total; ++e) out[t0 + e] = w.v[e];
#endif
}
'''
CT = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int"}

def xla_style(data, idx, axis, E, const, strided=False):
    T = CT[data.itemsize]; IDX = "int" if idx.dtype == cp.int32 else "long long"
    outer = math.prod(data.shape[:axis]); units = math.prod(data.shape[axis + 1:])
    n = idx.size; axlen = data.shape[axis]
    s_outer = axlen * units; s_axis = units
    total = outer * n * units
    vb = E * data.itemsize
    opts = [f"-DXT={T}", f"-DXIDX={IDX}", f"-DXE={E}", f"-DXVB={vb}", f"-DXCONST={int(const)}", f"-DXSTRIDED={int(strided)}",
            f"-DXUNITS={units}u", f"-DXNIDX={n}u", f"-DXSOUTER={s_outer}LL", f"-DXSAXIS={s_axis}LL", f"-DXAXLEN={axlen}LL"]
    k = cp.RawKernel(SRC, "xk", options=tuple(opts))
    du, dn = make_divisor(units, 32), make_divisor(n, 32)
    out = cp.empty(data.shape[:axis] + idx.shape + data.shape[axis + 1:], data.dtype)
    grid = (total // E + 255) // 256
    args = (data, idx, out, np.uint32(total), np.uint32(units), np.uint32(du.m), np.uint32(du.l),
            np.uint32(n), np.uint32(dn.m), np.uint32(dn.l), np.int64(s_outer), np.int64(s_axis), np.int64(axlen))
    def fn():
        k((grid,), (256,), args)
        return out
    return fn

shapes = [
    ((1636, 79, 3), "int16", 1, (11120,), "int32"),
    ((26, 139, 428, 5), "int16", 2, (3340,), "int32"),
    ((59, 1, 5, 1), "int8", 0, (3208552, 4), "int64"),
    ((56950, 4384, 7), "uint8", 1, (544,), "int32"),
    ((46705909, 15), "bool", 0, (3748228,), "int32"),
    ((2000, 300, 10), "uint8", 1, (5000,), "int32"),
    ((4096, 6), "int16", 0, (8000000,), "int64"),
]
res = []
for shape, dt, axis, ishape, it in shapes:
    n = math.prod(shape)
    data = (cp.arange(n, dtype=cp.uint32) * cp.uint32(2654435761) >> 24).astype(cp.uint8)
    data = data.view(cp.uint8) if dt in ("uint8", "int8", "bool") else None
    if data is None:
        data = (cp.arange(n, dtype=cp.uint32) * cp.uint32(2654435761) >> 16).astype(cp.uint16)
    data = data.reshape(shape)
    if dt in ("int8", "bool", "int16", "float16"):
        data = data.view({"int8": cp.int8, "bool": cp.uint8, "int16": cp.int16, "float16": cp.uint16}[dt])
    L = shape[axis]
    idx = cp.random.default_rng(3).integers(-L, L, size=math.prod(ishape), dtype=cp.int64).astype(it).reshape(ishape)
    ref = cp.take(data, cp.where(idx < 0, idx + L, idx), axis=axis)
    moved = 2 * ref.nbytes + idx.nbytes
    row = {"shape": shape, "dtype": dt, "axis": axis, "indices": ishape, "index_dtype": it,
           "row_bytes": ref.nbytes // max(1, math.prod(shape[:axis]) * idx.size), "out_mib": ref.nbytes / 2**20}
    operand = Operand(data.shape, data.strides, data.itemsize, alignment(data.data.ptr))
    for kind, ru in (("flat", None), ("pack", None), ("rows", 4)):
        try:
            plan = plan_gather(operand, idx.shape, it, axis, "wrap", limits=CUDA.limits(0), kind=kind, row_unroll=ru)
        except ValueError as e:
            continue
        bound = bind(plan, 0, None, CUDA, data.dtype)
        fn = lambda: execute(bound, data, data.data.ptr, idx, None, None, 0)
        if not bool((fn() == ref).all()):
            row[f"{kind}{ru or ''}_BAD"] = 1; continue
        row[f"{kind}{ru or ''}"] = moved / float(np.median(time_cupy(cp, fn, 30))) / 1e9
    for E in (4, 8, 16 // data.itemsize):
        for const in (True, False):
            for strided in (False, True):
                name = f"x{'s' if strided else 'c'}{E}{'k' if const else 'm'}"
                if name in row: continue
                try:
                    fn = xla_style(data, idx, axis, E, const, strided)
                    ok = bool((fn() == ref).all())
                except Exception as e:
                    row[name + "_ERR"] = str(e)[:300]; continue
                if not ok:
                    row[name + "_BAD"] = 1; continue
                row[name] = moved / float(np.median(time_cupy(cp, fn, 30))) / 1e9
    src = cp.empty(moved // 2, dtype=cp.uint8); dst = cp.empty_like(src)
    row["copy"] = moved / float(np.median(time_cupy(cp, lambda: dst.__setitem__(Ellipsis, src), 30))) / 1e9
    td, ti = torch.from_dlpack(data), torch.from_dlpack(cp.where(idx < 0, idx + L, idx).astype(cp.int64).ravel())
    row["torch"] = moved / float(np.median(time_torch(torch, lambda: torch.index_select(td, axis, ti), 30))) / 1e9
    jd = jnp.asarray(cp.asnumpy(data)); ji = jnp.asarray(cp.asnumpy(cp.where(idx < 0, idx + L, idx)))
    f = jax.jit(lambda d, i: jnp.take(d, i, axis=axis, mode="clip"))
    ms = sorted(time_jax(lambda: f(jd, ji), 30)); row["jax"] = moved / ms[len(ms) // 2] / 1e9
    del jd, ji
    print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
    res.append(row)
    del data, idx, ref, src, dst
    cp.get_default_memory_pool().free_all_blocks()
json.dump(res, open(os.path.join(OUT, "exp.json"), "w"), indent=1)
