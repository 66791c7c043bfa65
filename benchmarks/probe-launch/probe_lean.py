"""Where the lean kernel's 0.2 us on short calls goes (BENCHMARKS.md, "Short
calls: lean against torch"):

    OUT=DIR python benchmarks/probe-launch/probe_lean.py   # writes $OUT/lean.json

Short calls from the held-out sweeps where torch.index_select takes 3.6 us and
cugather 3.8.  Per geometry, interleaved over rounds in one process, each one
call between CUDA events on a held stream (the sweep's timer; `_50`: 50 calls
back to back between the events, per call):

  op, op_neg    cugather.GatherOp(mode='wrap'), indices >= 0 / half negative
                (the sweep's)
  bound         the plan's BoundKernel launched directly
  bN            the plan's kernel with N-thread blocks (grid scaled)
  nocs          the kernel rendered with CG_STREAM_STORES 0 (plain stores)
  noldg         the kernel with plain loads for the index and the data
  naive         a CuPy RawKernel: one 16-byte unit per thread, 128 threads,
                32-bit division (rows of whole 16-byte units only)
  torch         torch.index_select on torch's timer; torch_c on CuPy's
  op_t          the op on torch's timer
  empty, empty_t  an empty CuPy kernel on either timer (the floor)
  copy          cudaMemcpyAsync of the output bytes

Every variant's output is checked bit for bit against cupy.take.
"""
import dataclasses, json, os
import numpy as np
import cupy as cp
import torch
import cugather
from cugather.plan.core import Operand, alignment
from cugather.plan.gather import plan_gather
from cugather.runtime.binding import BoundKernel, bind
from cugather.runtime.launch import CUDA
from cugather.compile.render import render
from cugather.compile.compiler import compile_source, arch_for_device, LoadedKernel
from cugather.bench.peers import time_cupy, time_torch

OUT = os.environ.get("OUT", "/tmp")
ROUNDS = int(os.environ.get("ROUNDS", "4"))
REP = int(os.environ.get("REP", "40"))
R = {"rounds": ROUNDS, "repeat": REP, "gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
     "geometries": {}}


def ms_med(s):
    return float(np.median(s)) * 1000


def b50(f):
    def g():
        for _ in range(50):
            f()
    return g


NAIVE = r"""
template <class Idx>
__device__ void naive(const uint4* __restrict__ src, const Idx* __restrict__ idx,
                      uint4* __restrict__ dst, unsigned units, unsigned total, long long n)
{
    for (unsigned t = blockIdx.x * blockDim.x + threadIdx.x; t < total; t += gridDim.x * blockDim.x) {
        unsigned row = t / units, u = t - row * units;
        long long i = idx[row];
        if (i < 0) i += n;
        dst[t] = src[i * units + u];
    }
}
extern "C" __global__ void naive_i32(const uint4* s, const int* x, uint4* d, unsigned u, unsigned t, long long n)
{ naive<int>(s, x, d, u, t, n); }
extern "C" __global__ void naive_i64(const uint4* s, const long long* x, uint4* d, unsigned u, unsigned t, long long n)
{ naive<long long>(s, x, d, u, t, n); }
extern "C" __global__ void empty_kernel() {}
struct Big { const uint4* s; const void* x; uint4* d; unsigned u, t; long long n; long long pad[12]; };
extern "C" __global__ void naive_big_i32(const Big b)
{ naive<int>(b.s, (const int*)b.x, b.d, b.u, b.t, b.n); }
extern "C" __global__ void naive_big_i64(const Big b)
{ naive<long long>(b.s, (const long long*)b.x, b.d, b.u, b.t, b.n); }
"""
MOD = cp.RawModule(code=NAIVE, options=("-std=c++17",))
EMPTY = MOD.get_function("empty_kernel")


def variant_kernel(plan, edits):
    src = render(plan.main.key)
    text = src.text
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    ck = compile_source(dataclasses.replace(src, text=text), arch_for_device(0), ())
    from cupy.cuda import function as cf
    module = cf.Module()
    module.load(ck.binary)
    lk = LoadedKernel(ck, 0, module, module.get_function(plan.main.key.entry))
    return BoundKernel(lk, plan.main)


LEAN_LOAD = "keep ? __ldg((const U*)(a.data + (i64)o * a.s_outer + i * a.s_axis) + u)"
EDITS = {
    "nocs": [("#define CG_STREAM_STORES 1", "#define CG_STREAM_STORES 0")],
    "lean1": [("divmod<M>(a.n_div, row, o, n);", "o = 0; n = row;")],
    "noldg": [(LEAN_LOAD, "keep ? *((const U*)(a.data + (i64)o * a.s_outer + i * a.s_axis) + u)"),
              ("i64 i = load_index(idx + n);", "i64 i = (i64)idx[n];")],
}

GEOS = [  # name, shape, dtype, n indices, index dtype (axis 0)
    ("c128_rb2656_n21", (638, 1, 166), np.complex128, 21, np.int32),
    ("f32_rb3552_n28", (7, 4, 37, 6), np.float32, 28, np.int32),
    ("f32_rb208_n55", (2457, 4, 13), np.float32, 55, np.int32),
    ("c128_rb14640_n72", (2275, 5, 3, 61), np.complex128, 72, np.int64),
    ("c128_rb3328_n44", (30000, 208), np.complex128, 44, np.int64),
    ("c128_rb1392_n62_big", (391000, 87), np.complex128, 62, np.int64),
    ("c128_rb8176_n20_big", (77030, 511), np.complex128, 20, np.int32),
]

if os.environ.get("PROBE_ONLY"):
    GEOS = [g for g in GEOS if g[0] in os.environ["PROBE_ONLY"].split(",")]
for name, shape, dtype, n, idt in GEOS:
    rng = cp.random.default_rng(7)
    words = int(np.prod(shape)) * np.dtype(dtype).itemsize // 4
    data = rng.integers(0, 1 << 30, size=words, dtype=np.int32).view(dtype).reshape(shape)
    idx = rng.integers(0, shape[0], size=n, dtype=np.int64).astype(idt)
    neg = idx.copy()
    neg[::2] -= shape[0]
    ref = cp.take(data, idx, axis=0)
    refb = ref.view(cp.uint8)
    op = cugather.GatherOp(0, mode="wrap")
    operand = Operand(data.shape, data.strides, data.itemsize, alignment(data.data.ptr))
    plan = plan_gather(operand, idx.shape, str(idx.dtype), 0, "wrap", limits=CUDA.limits(0))
    g, b = plan.main.grid, plan.main.block
    res = {"plan": [plan.main.key.entry, list(g), list(b)], "out_bytes": int(ref.nbytes)}
    out = cp.empty_like(ref)
    sp = lambda: cp.cuda.get_current_stream().ptr
    fns = {}
    fns["op"] = lambda: op(data, idx)
    fns["op_neg"] = lambda: op(data, neg)
    bk = BoundKernel(bind(plan, 0, None, CUDA, data.dtype).main.kernel, plan.main)
    fns["bound"] = lambda bk=bk: bk.launch(sp(), data.data.ptr, idx.data.ptr, out.data.ptr, 0)
    threads = b[0] * b[1]
    for bt in (32, 64, 128, 256):
        if bt == threads or b[1] != 1:
            continue
        gx = -(-g[0] * threads // bt)
        p2 = dataclasses.replace(plan, main=dataclasses.replace(plan.main, grid=(gx, 1, 1), block=(bt, 1, 1)))
        k2 = BoundKernel(bk.kernel, p2.main)
        fns[f"b{bt}"] = lambda k2=k2: k2.launch(sp(), data.data.ptr, idx.data.ptr, out.data.ptr, 0)
    for vn, edits in EDITS.items():
        if plan.main.key.kind != "lean" and vn in ("noldg", "lean1"):
            continue
        try:
            kv = variant_kernel(plan, edits)
        except AssertionError as e:
            res[vn] = f"edit not found: {e}"
            continue
        fns[vn] = lambda kv=kv: kv.launch(sp(), data.data.ptr, idx.data.ptr, out.data.ptr, 0)
    rb = ref.nbytes // n
    if rb % 16 == 0 and data.flags.c_contiguous:
        units = rb // 16
        total = units * n
        kn = MOD.get_function("naive_i32" if idt == np.int32 else "naive_i64")
        grid = min(-(-total // 128), 132 * 8)
        fns["naive"] = lambda: kn((grid,), (128,), (data, idx, out, np.uint32(units), np.uint32(total),
                                                     np.int64(shape[0])))
        kb = MOD.get_function("naive_big_i32" if idt == np.int32 else "naive_big_i64")
        big = np.zeros(1, dtype=[("s", "<u8"), ("x", "<u8"), ("d", "<u8"), ("u", "<u4"), ("t", "<u4"),
                                 ("n", "<i8"), ("pad", "<i8", (12,))])
        big["s"], big["x"], big["d"] = data.data.ptr, idx.data.ptr, out.data.ptr
        big["u"], big["t"], big["n"] = units, total, shape[0]
        fns["naive_big"] = lambda: kb((grid,), (128,), (big[0],))
    td, ti = torch.from_dlpack(data), torch.from_dlpack(idx)
    fns["torch"] = None  # torch's timer
    fns["torch_c"] = lambda: torch.index_select(td, 0, ti)
    fns["op_t"] = None
    fns["empty"] = lambda: EMPTY((1,), (32,), ())
    fns["empty_t"] = None
    src = cp.empty(ref.nbytes, cp.uint8)
    dst = cp.empty(ref.nbytes, cp.uint8)
    rt = cp.cuda.runtime
    fns["copy"] = lambda: rt.memcpyAsync(dst.data.ptr, src.data.ptr, ref.nbytes,
                                         rt.memcpyDeviceToDevice, sp())
    # check every variant that writes the output
    bad = []
    for vn, f in fns.items():
        try:
            if vn in ("op", "op_neg"):
                r = f()
            elif vn == "torch_c":
                r = cp.from_dlpack(f())
            elif vn in ("empty", "copy") or f is None:
                continue
            else:
                out.fill(0)
                f()
                r = out
            cp.cuda.Device().synchronize()
            if not bool((r.view(cp.uint8) == refb).all()):
                bad.append(vn)
        except Exception as e:  # a variant that cannot launch: noted, not timed
            res[vn + "_error"] = repr(e)[:200]
            bad.append(vn)
    res["mismatch"] = bad
    timers = {
        "torch": lambda: time_torch(torch, lambda: torch.index_select(td, 0, ti), REP),
        "op_t": lambda: time_torch(torch, lambda: op(data, idx), REP),
        "empty_t": lambda: time_torch(torch, lambda: EMPTY((1,), (32,), ()), REP),
        "torch_50": lambda: time_torch(torch, b50(lambda: torch.index_select(td, 0, ti)), REP // 2),
    }
    for vn, f in fns.items():
        if f is not None and vn not in bad:
            timers[vn] = (lambda f=f: time_cupy(cp, f, REP))
            if vn in ("op", "bound", "naive", "naive_big", "lean1", "b128", "b256", "torch_c"):
                timers[vn + "_50"] = (lambda f=f: time_cupy(cp, b50(f), REP // 2))
    per = {k: [] for k in timers}
    for r in range(ROUNDS):
        for k, t in timers.items():
            v = ms_med(t())
            per[k].append(v / 50 if k.endswith("_50") else v)
    res["us"] = {k: round(float(np.median(v)), 3) for k, v in per.items()}
    res["rounds_us"] = {k: [round(x, 3) for x in v] for k, v in per.items()}
    R["geometries"][name] = res
    print(name, json.dumps({"plan": res["plan"], "mismatch": bad, "us": res["us"]}), flush=True)
    del data, idx, neg, ref, out, src, dst, td, ti
    cp.get_default_memory_pool().free_all_blocks()
    torch.cuda.empty_cache()

json.dump(R, open(os.path.join(OUT, "lean.json"), "w"), indent=1)
