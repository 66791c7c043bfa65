"""Rows of 16-100 bytes, not whole 16-byte chunks, picked from tables of a
few KB (BENCHMARKS.md, "Tiny tables, odd rows"): where jax.numpy.take writes at
up to 1.7x the copy and slabf at 1.1-1.3x.

    OUT=DIR python benchmarks/probe-tinyrows/probe.py   # writes $OUT/tinyrows.json

Prototype kernels (CuPy RawKernels), the whole table staged in shared memory
once per block, the output written as aligned 16-byte chunks:

  w4_cN   thread owns N consecutive 16-byte output chunks; each 4-byte word
          read from the stage, the row's index reloaded (L1) where a chunk
          crosses into the next row.  Rows of whole 4-byte words.
  w4w_cN  as w4, a warp's 32*N chunks' row indices loaded first, one per
          lane, coalesced, and passed by shuffle (rows of 16 bytes or more).

against cugather's plan, torch.index_select and jax.numpy.take (the sweep's
timers), the copy of the output bytes.  Every output checked against cupy.take.
With PROBE_SLABF=1, also cugather's slabf forced (`slabf`, its warps' tiles)
and slabf rendered and planned with CG_SLABF_TILE 0 (`slabf0`, the kernel
before the tiles: an index load per unit), each bound and launched through the
library's runtime.
"""
import json, os
import numpy as np
import cupy as cp
import torch
import cugather
from cugather.bench.peers import time_cupy, time_torch, time_jax
from cugather.plan.core import Operand, alignment
from cugather.plan.gather import plan_gather
from cugather.runtime.launch import CUDA
import dataclasses
from cugather.plan import tuning
from cugather.compile.render import render
from cugather.compile.compiler import compile_source, arch_for_device, LoadedKernel
from cugather.runtime.binding import BoundKernel, bind

SLABF = os.environ.get("PROBE_SLABF") == "1"


def slabf_kernels(data, idx):
    """(new, old) BoundKernels of slabf forced on this geometry."""
    operand = Operand(data.shape, data.strides, data.itemsize, alignment(data.data.ptr))
    kw = dict(limits=CUDA.limits(0), kind="slabf")
    new = plan_gather(operand, idx.shape, str(idx.dtype), 0, "wrap", **kw)
    saved = tuning.SLABF_TILE
    tuning.SLABF_TILE = 0
    try:
        old = plan_gather(operand, idx.shape, str(idx.dtype), 0, "wrap", **kw)
    finally:
        tuning.SLABF_TILE = saved
    src = render(old.main.key)
    text = src.text.replace(f"#define CG_SLABF_TILE {saved}", "#define CG_SLABF_TILE 0")
    assert text != src.text
    ck = compile_source(dataclasses.replace(src, text=text), arch_for_device(0), ())
    from cupy.cuda import function as cf
    module = cf.Module()
    module.load(ck.binary)
    lk = LoadedKernel(ck, 0, module, module.get_function(old.main.key.entry))
    return (bind(new, 0, None, CUDA, data.dtype).main, new), (BoundKernel(lk, old.main), old)

OUT = os.environ.get("OUT", "/tmp")
REP = int(os.environ.get("REP", "30"))

SRC = r"""
template <class Idx, int N>
__device__ void w4(const unsigned* __restrict__ table, const Idx* __restrict__ idx,
                   uint4* __restrict__ out, unsigned rbw, unsigned long long chunks,
                   long long axis_len, unsigned table_words)
{
    extern __shared__ unsigned st[];
    for (unsigned k = threadIdx.x; k < table_words; k += blockDim.x) st[k] = table[k];
    __syncthreads();
    for (unsigned long long c0 = ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) * N;
         c0 < chunks; c0 += (unsigned long long)gridDim.x * blockDim.x * N) {
        const unsigned w0 = (unsigned)(c0 * 4);  // outputs under 16 GiB
        unsigned r = w0 / rbw;
        unsigned o = w0 - r * rbw;
        long long i = idx[r];
        if (i < 0) i += axis_len;
        unsigned base = (unsigned)i * rbw;
        #pragma unroll
        for (int q = 0; q < N; ++q) {
            if (c0 + q >= chunks) break;
            unsigned v[4];
            #pragma unroll
            for (int k = 0; k < 4; ++k) {
                if (o == rbw) {
                    o = 0; ++r;
                    long long j = idx[r];
                    if (j < 0) j += axis_len;
                    base = (unsigned)j * rbw;
                }
                v[k] = st[base + o];
                ++o;
            }
            __stcs(out + c0 + q, make_uint4(v[0], v[1], v[2], v[3]));
        }
    }
}

// rows of 16 bytes or more (rbw >= 4): a warp's 32*N chunks span at most
// 32*N*4/rbw + 2 rows <= 32*N + 2; lanes load up to N+1 row indices each.
template <class Idx, int N>
__device__ void w4w(const unsigned* __restrict__ table, const Idx* __restrict__ idx,
                    uint4* __restrict__ out, unsigned rbw, unsigned long long chunks,
                    long long axis_len, unsigned table_words, unsigned long long rows)
{
    extern __shared__ unsigned st[];
    for (unsigned k = threadIdx.x; k < table_words; k += blockDim.x) st[k] = table[k];
    __syncthreads();
    const unsigned lane = threadIdx.x & 31;
    const unsigned long long warps = (unsigned long long)gridDim.x * (blockDim.x >> 5);
    for (unsigned long long wc = (unsigned long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
         wc * 32 * N < chunks; wc += warps) {
        const unsigned long long c0w = wc * 32 * N;
        const unsigned rfirst = (unsigned)(c0w * 4) / rbw;
        unsigned bases[N + 1];
        #pragma unroll
        for (int s = 0; s <= N; ++s) {
            unsigned long long rr = (unsigned long long)rfirst + s * 32 + lane;
            long long j = rr < rows ? (long long)idx[rr] : 0;
            if (j < 0) j += axis_len;
            bases[s] = (unsigned)j * rbw;
        }
        #pragma unroll
        for (int q = 0; q < N; ++q) {
            unsigned long long c = c0w + q * 32 + lane;
            const unsigned w0 = (unsigned)(c * 4);
            const unsigned r = w0 / rbw;
            unsigned o = w0 - r * rbw;
            unsigned rel = r - rfirst;
            unsigned rel1 = rel + 1;
            unsigned b0 = 0, b1 = 0;
            #pragma unroll
            for (int s = 0; s <= N; ++s) {
                unsigned x = __shfl_sync(0xffffffffu, bases[s], rel & 31);
                unsigned y = __shfl_sync(0xffffffffu, bases[s], rel1 & 31);
                if ((rel >> 5) == (unsigned)s) b0 = x;
                if ((rel1 >> 5) == (unsigned)s) b1 = y;
            }
            if (c >= chunks) continue;
            unsigned v[4];
            #pragma unroll
            for (int k = 0; k < 4; ++k) {
                v[k] = o < rbw ? st[b0 + o] : st[b1 + o - rbw];
                ++o;
            }
            __stcs(out + c, make_uint4(v[0], v[1], v[2], v[3]));
        }
    }
}

#define W4(I, T, N) \
extern "C" __global__ void w4_##I##_c##N(const unsigned* t, const T* x, uint4* o, unsigned rbw, \
    unsigned long long ch, long long n, unsigned tw, unsigned long long rows) \
{ w4<T, N>(t, x, o, rbw, ch, n, tw); } \
extern "C" __global__ void w4w_##I##_c##N(const unsigned* t, const T* x, uint4* o, unsigned rbw, \
    unsigned long long ch, long long n, unsigned tw, unsigned long long rows) \
{ w4w<T, N>(t, x, o, rbw, ch, n, tw, rows); }
W4(i32, int, 1) W4(i32, int, 2) W4(i32, int, 4)
W4(i64, long long, 1) W4(i64, long long, 2) W4(i64, long long, 4)
"""
MOD = cp.RawModule(code=SRC, options=("-std=c++17",))
SMS = cp.cuda.Device().attributes["MultiProcessorCount"]

GEOS = [  # name, table shape, dtype, picks, index dtype (axis 0, outer 1)
    ("rb100_t200_i64", (2, 25), np.int32, 2685192, np.int64),
    ("rb20_t1440_i32", (72, 5), np.float32, 5190000, np.int32),
    ("rb28_t672_i32", (24, 7), np.float32, 2920000, np.int32),
    ("rb48_t288_i64", (6, 12), np.float32, 8830000, np.int64),
    ("rb20_t2600_i32", (130, 5), np.float32, 20400000, np.int32),
    ("rb100_t8400_i32", (84, 25), np.float32, 2230000, np.int32),
    ("rb16_t112_i32", (7, 4), np.float32, 5800000, np.int32),
    ("rb24_t480_f64_i32", (20, 3), np.float64, 4000000, np.int32),
    ("rb40_t2000_f64_i64", (50, 5), np.float64, 3000000, np.int64),
    ("rb36_t36_i32", (1, 9), np.int32, 6000000, np.int32),
    ("rb52_t20k_i32", (400, 13), np.float32, 2000000, np.int32),
    ("rb100_t200_small", (2, 25), np.int32, 20000, np.int64),
]
if os.environ.get("PROBE_ONLY"):
    GEOS = [g for g in GEOS if g[0] in os.environ["PROBE_ONLY"].split(",")]

import jax, jax.numpy as jnp
jtake = jax.jit(lambda d, i: jnp.take(d, i, axis=0, mode="clip"))
R = {"gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "sms": SMS, "geometries": {}}


def med(s): return float(np.median(s)) * 1000


for name, shape, dtype, n, idt in GEOS:
    rng = cp.random.default_rng(11)
    words = int(np.prod(shape)) * np.dtype(dtype).itemsize // 4
    data = rng.integers(0, 1 << 30, size=words, dtype=np.int32).view(dtype).reshape(shape)
    idx = rng.integers(0, shape[0], size=n, dtype=np.int64).astype(idt)
    ref = cp.take(data, idx, axis=0)
    refb = ref.view(cp.uint8).ravel()
    nbytes = ref.nbytes
    rbw = data.shape[1] * data.itemsize // 4
    chunks = nbytes // 16
    res = {"out_bytes": nbytes, "table_bytes": int(data.nbytes), "row_bytes": rbw * 4}
    op = cugather.GatherOp(0, mode="wrap")
    operand = Operand(data.shape, data.strides, data.itemsize, alignment(data.data.ptr))
    res["plan"] = plan_gather(operand, idx.shape, str(idx.dtype), 0, "wrap",
                              limits=CUDA.limits(0)).main.key.entry
    out = cp.empty(nbytes, cp.uint8)
    it = "i32" if idt == np.int32 else "i64"
    fns = {"cugather": lambda: op(data, idx)}
    try:
        pairs = slabf_kernels(data, idx) if SLABF else ()
    except ValueError as e:  # slabf does not apply (16-byte units)
        res["slabf_error"] = str(e)
        pairs = ()
    if pairs:
        (bk_new, pl_new) = pairs[0]
        variants = [("slabf", pairs[0]), ("slabf0", pairs[1])]
        if os.environ.get("PROBE_SLABF_VARIANTS") == "1":
            from cugather.compile.compiler import load_kernel
            lk4 = load_kernel(pl_new.main.key, 0, ("-DCG_MIN_BLOCKS=4",))
            g = pl_new.main.grid
            half = dataclasses.replace(pl_new.main, grid=(max(1, g[0] // 2), g[1], g[2]))
            variants += [("slabf_mb4", (BoundKernel(lk4, pl_new.main), pl_new)),
                         ("slabf_g2", (BoundKernel(bk_new.kernel, half), pl_new)),
                         ("slabf_mb4_g2", (BoundKernel(lk4, half), pl_new))]
        for tag, (bk, pl) in variants:
            res[tag + "_launch"] = [list(pl.main.grid), list(pl.main.block), pl.main.shared_mem]
            fns[tag] = (lambda bk=bk: bk.launch(cp.cuda.get_current_stream().ptr, data.data.ptr,
                                                idx.data.ptr, out.data.ptr, 0))
    for kind in ("w4", "w4w"):
        for N in (1, 2, 4):
            if kind == "w4w" and rbw < 4:
                continue
            k = MOD.get_function(f"{kind}_{it}_c{N}")
            for bt, per_sm in ((256, 4), (512, 2), (256, 8)):
                grid = min(-(-chunks // (bt * N)), SMS * per_sm)
                fns[f"{kind}_c{N}_b{bt}x{per_sm}"] = (
                    lambda k=k, grid=grid, bt=bt: k((grid,), (bt,), (data, idx, out, np.uint32(rbw),
                                                                     np.uint64(chunks), np.int64(shape[0]),
                                                                     np.uint32(words), np.uint64(n)),
                                                    shared_mem=words * 4))
    bad = []
    for vn, f in list(fns.items()):
        if vn == "cugather":
            got = f().view(cp.uint8).ravel()
        else:
            out.fill(0)
            f()
            got = out
        tail = nbytes - chunks * 16
        ok = bool((got[:chunks * 16] == refb[:chunks * 16]).all())
        if not ok:
            bad.append(vn)
            del fns[vn]
    res["mismatch"] = bad
    res["tail_bytes"] = nbytes - chunks * 16
    src = cp.empty(nbytes, cp.uint8); dst = cp.empty(nbytes, cp.uint8)
    rt = cp.cuda.runtime
    fns["copy"] = lambda: rt.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, rt.memcpyDeviceToDevice,
                                         cp.cuda.get_current_stream().ptr)
    us = {}
    for rnd in range(2):
        for vn, f in fns.items():
            us.setdefault(vn, []).append(med(time_cupy(cp, f, REP)))
        td, ti = torch.from_dlpack(data), torch.from_dlpack(idx)
        us.setdefault("torch", []).append(med(time_torch(torch, lambda: torch.index_select(td, 0, ti), REP)))
        jd, ji = jax.dlpack.from_dlpack(data), jax.dlpack.from_dlpack(idx)
        jtake(jd, ji).block_until_ready()
        us.setdefault("jax", []).append(float(np.median(time_jax(lambda: jtake(jd, ji), REP, 3, 5))) * 1000)
    res["us"] = {k: round(float(np.median(v)), 2) for k, v in us.items()}
    copy = res["us"]["copy"]
    res["of_copy"] = {k: round(copy / v * (2 * nbytes + idx.nbytes) / (2 * nbytes), 3)
                      for k, v in res["us"].items()}
    R["geometries"][name] = res
    best = sorted(res["of_copy"].items(), key=lambda kv: -kv[1])[:3]
    mine = {k: res["of_copy"].get(k) for k in ("cugather", "slabf", "slabf0", "slabf_mb4", "slabf_g2",
                                               "slabf_mb4_g2", "jax", "torch")}
    print(name, "mismatch", bad, "plan", res["plan"], json.dumps(mine), json.dumps(best), flush=True)
    del data, idx, ref, out, src, dst
    cp.get_default_memory_pool().free_all_blocks()

json.dump(R, open(os.path.join(OUT, "tinyrows.json"), "w"), indent=1)
