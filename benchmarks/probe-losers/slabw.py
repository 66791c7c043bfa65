"""One-unit rows from small axes over many outer rows (held-out seed 6421's
minimum: (4x4996x10) float32 on axis 2, 10583 int64 picks, slabw at 0.65x-0.73x
jax.numpy.take): slab and slabw under other groups and grids, inner and flat,
beside a one-output-per-thread CuPy kernel (what XLA's loop fusion does) and
jax.numpy.take, on a GPU:

    OUT=DIR python benchmarks/probe-losers/slabw.py    # writes $OUT/slabw.json

Variants: tuning.SLAB_MAX_STAGE (the bytes a block stages, which bounds the
group of outer rows) and tuning.SLAB_BLOCKS_PER_SM (the grid's target) set
before planning (PROBE_STAGES, PROBE_BLOCKS: comma-separated values, default
the first run's); with PROBE_PLAIN=1 each kernel also rendered with
CG_STREAM_STORES 0 (plain stores where the library stores evict-first: tag
suffix _plain); slab also rendered with CG_SLAB_ALIGN 1 (its stores on whole
32-unit stretches of the output: suffix _al).  Every output checked bit for
bit against cupy.take; median ms, effective bandwidth (2 x output + index
bytes) over the copy of the output.
PROBE_SET=odd: geometries whose picks per outer row are odd or even, so that
output rows start misaligned or aligned.
"""
import json, os, itertools
import numpy as np
import cupy as cp
from cugather.bench.peers import time_cupy, time_jax
from cugather.bench.sweep_run import adaptive
from cugather.plan import tuning
from cugather.plan.core import Operand, alignment
from cugather.plan.gather import plan_gather
from cugather.runtime.binding import bind
from cugather.runtime.launch import CUDA, execute
from variants import bound_variant

OUT = os.environ.get("OUT", "/tmp")
GEOS = [  # table shape, dtype, axis, picks, index dtype
    ((4, 4996, 10), np.float32, 2, 10583, np.int64),
    ((20000, 10), np.float32, 1, 10000, np.int32),
    ((20000, 40), np.int16, 1, 10000, np.int64),
    ((2000, 100), np.float32, 1, 50000, np.int32),
    ((50000, 12), np.uint8, 1, 8001, np.int32),
    ((200, 300), np.float32, 1, 300000, np.int64),
]
if os.environ.get("PROBE_SET") == "odd":
    GEOS = [
        ((4, 4996, 10), np.float32, 2, 10583, np.int64),
        ((4, 4996, 10), np.float32, 2, 10584, np.int64),
        ((20000, 40), np.int16, 1, 10001, np.int64),
        ((20000, 40), np.int16, 1, 10000, np.int64),
        ((50000, 12), np.uint8, 1, 8001, np.int32),
        ((50000, 12), np.uint8, 1, 8000, np.int32),
        ((2000, 100), np.float32, 1, 50001, np.int32),
        ((247, 7, 218), np.int64, 2, 1687, np.int64),
    ]
STAGES = [int(x) for x in os.environ.get("PROBE_STAGES", "4096,12288,24576,49152").split(",")]
BLOCKS = [int(x) for x in os.environ.get("PROBE_BLOCKS", "4,8,16").split(",")]
PLAIN = os.environ.get("PROBE_PLAIN") == "1"


NAIVE = cp.RawKernel(r"""
template <class T, class I>
__device__ void body(const T* __restrict__ tab, const I* __restrict__ idx, T* __restrict__ out,
                     unsigned n_idx, unsigned axis, unsigned total)
{
    for (unsigned g = blockIdx.x * blockDim.x + threadIdx.x; g < total; g += gridDim.x * blockDim.x) {
        unsigned o = g / n_idx, j = g - o * n_idx;
        long long i = idx[j];
        if (i < 0) i += axis;
        out[g] = tab[o * axis + (unsigned)i];
    }
}
extern "C" __global__ void naive(const char* tab, const char* idx, char* out, unsigned n_idx,
                                 unsigned axis, unsigned total, int unit, int ib)
{
    if (unit == 4 && ib == 8) body((const unsigned*)tab, (const long long*)idx, (unsigned*)out, n_idx, axis, total);
    else if (unit == 4) body((const unsigned*)tab, (const int*)idx, (unsigned*)out, n_idx, axis, total);
    else if (unit == 2 && ib == 8) body((const unsigned short*)tab, (const long long*)idx, (unsigned short*)out, n_idx, axis, total);
    else if (unit == 2) body((const unsigned short*)tab, (const int*)idx, (unsigned short*)out, n_idx, axis, total);
    else if (ib == 8) body((const unsigned char*)tab, (const long long*)idx, (unsigned char*)out, n_idx, axis, total);
    else body((const unsigned char*)tab, (const int*)idx, (unsigned char*)out, n_idx, axis, total);
}
""", "naive", options=("-std=c++17",))
SMS = cp.cuda.Device().attributes["MultiProcessorCount"]
try:
    import jax, jax.numpy as jnp
except ImportError:
    jax = None

res = {"gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "geometries": []}
timer = lambda f, r, w: time_cupy(cp, f, r, w)  # noqa: E731
for shape, dtype, axis, n, idt in GEOS:
    rng = cp.random.default_rng(5)
    data = rng.integers(0, 120, size=shape).astype(dtype)
    idx = rng.integers(-shape[axis], shape[axis], size=n).astype(idt)
    ref = cp.take(data, cp.where(idx < 0, idx + shape[axis], idx), axis=axis)
    refb = ref.view(cp.uint8).ravel()
    moved = 2 * ref.nbytes + idx.nbytes
    row = {"shape": shape, "dtype": np.dtype(dtype).name, "axis": axis, "picks": n,
           "index": np.dtype(idt).name, "out_bytes": ref.nbytes, "ms": {}, "plans": {}}
    dst = cp.empty_like(ref)
    rt = cp.cuda.runtime
    row["ms"]["copy"] = float(np.median(adaptive(timer, lambda: rt.memcpyAsync(
        dst.data.ptr, ref.data.ptr, ref.nbytes, rt.memcpyDeviceToDevice,
        cp.cuda.get_current_stream().ptr))))
    operand = Operand(data.shape, data.strides, data.itemsize, alignment(data.data.ptr))
    saved = (tuning.SLAB_MAX_STAGE, tuning.SLAB_BLOCKS_PER_SM)
    variants = [(k, None, None) for k in ("inner", "flat", "lean")]
    variants += [(k, st, b) for k in ("slab", "slabw")
                 for st, b in itertools.product(STAGES, BLOCKS)]
    for kind, st, b in variants:
        tag = kind if st is None else f"{kind}_s{st // 1024}k_b{b}"
        try:
            if st is not None:
                tuning.SLAB_MAX_STAGE, tuning.SLAB_BLOCKS_PER_SM = st, b
            plan = plan_gather(operand, idx.shape, str(idx.dtype), axis, "wrap",
                               limits=CUDA.limits(0), kind=kind)
        except ValueError:
            continue
        finally:
            tuning.SLAB_MAX_STAGE, tuning.SLAB_BLOCKS_PER_SM = saved
        bound = bind(plan, 0, None, CUDA, data.dtype)
        fn = lambda: execute(bound, data, data.data.ptr, idx, None, None, 0)  # noqa: E731
        got = fn()
        if not bool((got.view(cp.uint8).ravel() == refb).all()):
            row["ms"][tag] = "MISMATCH"
            continue
        del got
        row["ms"][tag] = float(np.median(adaptive(timer, fn)))
        row["plans"][tag] = [list(plan.main.grid), plan.main.fields.get("chunk")]
        for plain, align in ((True, False), (False, True), (True, True)):
            if (plain and not PLAIN) or (align and kind != "slab"):
                continue
            bk = bound_variant(plan, **({"CG_STREAM_STORES": 0} if plain else {}),
                               **({"CG_SLAB_ALIGN": 1} if align else {}))
            out = cp.empty_like(ref)
            go = lambda: bk.launch(cp.cuda.get_current_stream().ptr, data.data.ptr,  # noqa: E731
                                   idx.data.ptr, out.data.ptr, 0)
            go()
            ok = bool((out.view(cp.uint8).ravel() == refb).all())
            vtag = tag + ("_al" if align else "") + ("_plain" if plain else "")
            row["ms"][vtag] = float(np.median(adaptive(timer, go))) if ok else "MISMATCH"
            del out
    ax, total = shape[axis], ref.size
    if axis == data.ndim - 1 and total < 2**32:
        out = cp.empty_like(ref)
        args = (data, idx, out, np.uint32(n), np.uint32(ax), np.uint32(total),
                np.int32(data.itemsize), np.int32(idx.itemsize))
        for blocks in (SMS * 8, SMS * 32):
            NAIVE((blocks,), (256,), args)
            ok = bool((out.view(cp.uint8).ravel() == refb).all())
            row["ms"][f"naive_g{blocks // SMS}"] = (
                float(np.median(adaptive(timer, lambda: NAIVE((blocks,), (256,), args))))
                if ok else "MISMATCH")
    if jax is not None:
        jd = jnp.asarray(cp.asnumpy(data)); ji = jnp.asarray(cp.asnumpy(cp.where(idx < 0, idx + ax, idx)))
        f = jax.jit(lambda d, i: jnp.take(d, i, axis=axis, mode="clip"))
        row["ms"]["jax"] = float(np.median(time_jax(lambda: f(jd, ji), 20)))
    c = row["ms"]["copy"]
    row["of_copy"] = {k: round(c * moved / (2 * ref.nbytes) / v, 3)
                      for k, v in row["ms"].items() if isinstance(v, float)}
    res["geometries"].append(row)
    best = sorted(row["of_copy"].items(), key=lambda kv: -kv[1])[:8]
    print(shape, np.dtype(dtype).name, axis, n, ":", ", ".join(f"{k} {v}" for k, v in best), flush=True)
    with open(os.path.join(OUT, "slabw.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
