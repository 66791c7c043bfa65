"""The span, lean and elements_row kernels against the plans before them, the
copy ceiling and the peers, on a GPU (BENCHMARKS.md, "Long rows, short calls,
GatherElements rows"):

    python benchmarks/probe-span/probe.py [PARTS]   # writes $OUT/probe-span.json (default /tmp)

PARTS is any of A, B and C (default ABC).  PROBE_SPAN_V=N builds the span
kernel with N chunks per thread, PROBE_SPAN_THREADS=N plans it with blocks of
N threads, instead of cugather/plan/tuning.py's; the result file is named
after them.

A: long rows (4 KB and more, lengths that are not multiples of 16, 4- and
   8-byte units) through span, the kernel the rules plan (chunks or window)
   and torch.index_select; the copy is cudaMemcpyAsync of the output bytes.
B: short calls (one call between events on a held stream): lean against the
   plan of the shipped table and cupy.take.
C: GatherElements along the last axis: the elements kernel (direct picks)
   against elements_row (a data row staged per output row) and torch.gather.

Every variant is checked bit for bit against cupy.take / torch.gather first.
"""
import json, os, sys
import numpy as np
from cugather.plan import tuning

VARIANT = ""
if os.environ.get("PROBE_SPAN_V"):  # the plans read SPAN_V, the renderer CG_SPAN_V
    tuning.SPAN_V = tuning.KERNEL_DEFINES["CG_SPAN_V"] = int(os.environ["PROBE_SPAN_V"])
    VARIANT = f"-v{tuning.SPAN_V}"
if os.environ.get("PROBE_SPAN_THREADS"):
    tuning.SPAN_THREADS = int(os.environ["PROBE_SPAN_THREADS"])
    VARIANT += f"-t{tuning.SPAN_THREADS}"
import cupy as cp
import cugather
from cugather.plan.core import Operand, alignment
from cugather.plan.gather import plan_gather
from cugather.runtime.binding import bind
from cugather.runtime.launch import CUDA, execute
from cugather.bench.peers import time_cupy, time_torch

try:
    import torch
except ImportError:  # the probe runs without torch, its columns empty
    torch = None

OUT = os.environ.get("OUT", "/tmp")
R = {"A": [], "B": [], "C": []}


def us(t):
    return float(np.median(t)) * 1000


def tc(fn, rep=30):
    return us(time_cupy(cp, fn, rep))


def gather_plan(data, idx, axis, kind=None, rules=False):
    operand = Operand(data.shape, data.strides, data.itemsize, alignment(data.data.ptr))
    limits = CUDA.limits(0)
    if rules:
        limits = type(limits)(limits.sm_count, limits.max_shared_mem, "")
    return plan_gather(operand, idx.shape, str(idx.dtype), axis, "wrap", limits=limits, kind=kind)


def runner(plan, data, idx):
    bound = bind(plan, 0, None, CUDA, data.dtype)
    return lambda: execute(bound, data, data.data.ptr, idx, None, None, 0)


def table(shape, dtype, seed=0):
    rng = cp.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape, dtype=np.float32).astype(dtype)
    n = int(np.prod(shape)) * dtype.itemsize  # random bytes, no wider temporary
    raw = rng.random(size=(n + 3) // 4, dtype=np.float32).view(np.uint8)[:n]
    if dtype.kind == "b":
        raw &= 1
    return raw.view(dtype).reshape(shape)


def idx_for(n, shape, dtype, seed=1):
    return cp.random.default_rng(seed).integers(0, n, size=shape, dtype=np.int64).astype(dtype)


def copy_us(nbytes):
    src, dst = cp.empty(nbytes, cp.uint8), cp.empty(nbytes, cp.uint8)
    rt = cp.cuda.runtime
    return tc(lambda: rt.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, rt.memcpyDeviceToDevice,
                                     cp.cuda.get_current_stream().ptr))


def gather_case(part, shape, dtype, axis, ishape, idtype, kinds):
    data = table(shape, dtype)
    idx = idx_for(shape[axis], ishape, idtype)
    ref = cp.take(data, idx, axis=axis)
    row = {"shape": shape, "dtype": dtype, "axis": axis, "indices": ishape, "index_dtype": idtype,
           "out_bytes": int(ref.nbytes), "us": {}, "kernel": {}}
    row["us"]["copy"] = copy_us(ref.nbytes)
    for label, kind, rules in kinds:
        try:
            plan = gather_plan(data, idx, axis, kind, rules)
        except ValueError as e:
            row["kernel"][label] = f"n/a: {e}"
            continue
        fn = runner(plan, data, idx)
        if not bool((fn().view(cp.uint8) == ref.view(cp.uint8)).all()):
            raise AssertionError(f"{label} differs from cupy.take on {shape}")
        row["kernel"][label] = plan.key.entry
        row["us"][label] = tc(fn)
    row["us"]["cupy.take"] = tc(lambda: cp.take(data, idx, axis=axis))
    if torch is not None:
        td, ti = torch.from_dlpack(data), torch.from_dlpack(idx.reshape(-1))
        f = lambda: torch.index_select(td, axis, ti)  # noqa: E731
        got = cp.from_dlpack(f().contiguous()).reshape(ref.shape)
        assert bool((got.view(cp.uint8) == ref.view(cp.uint8)).all())
        row["us"]["torch"] = us(time_torch(torch, f, 30))
    R[part].append(row)
    print(part, shape, dtype, axis, ishape, idtype,
          {k: round(v, 2) for k, v in row["us"].items()}, flush=True)
    del data, idx, ref
    cp.get_default_memory_pool().free_all_blocks()


LONG = [  # (shape, dtype, axis, indices, index dtype): the sweeps' long-row losers, KV blocks
    ((63792, 2646), "float16", 0, (180088,), "int32"),      # 5292 B: 4-byte units
    ((53293, 1887), "float32", 0, (15459, 3), "int64"),     # 7548 B: 4-byte units
    ((20742, 5363), "float64", 0, (18830,), "int64"),       # 42904 B: 8-byte units
    ((5, 2, 14119, 2451), "int64", 2, (346, 13), "int32"),  # 19608 B: 8-byte units
    ((400000, 4347), "bool", 0, (48060,), "int32"),         # 4347 B: window
    ((119102, 62314), "bool", 0, (5197,), "int64"),         # 62314 B: window
    ((230338, 36631), "uint8", 0, (5488,), "int32"),        # 36631 B: window
    ((8192, 16, 8, 128), "float16", 0, (32, 128), "int32"),  # 32 KB KV-cache blocks
    ((8192, 16, 8, 128), "float16", 0, (32, 128), "int64"),
    ((31381, 5100), "float32", 0, (166, 9), "int32"),       # 20400 B: 16-byte units
    # held-out sweeps' rows of 4 KB and more below 90% of copy (seeds 3907, 2971)
    ((197364, 413, 7, 1), "int32", 0, (44433,), "int32"),   # 11564 B
    ((38849, 1693), "float32", 0, (1, 14188), "int64"),     # 6772 B
    ((9475, 1849, 31), "int8", 0, (7857,), "int32"),        # 57319 B
    ((67, 16616, 129, 19), "float32", 1, (14, 104), "int64"),  # 9804 B, 67 outer rows
    ((12431, 137, 1, 146), "uint8", 0, (34337,), "int32"),  # 20002 B
    ((106870, 3477), "int32", 0, (6675,), "int32"),         # 13908 B
    ((66254, 15, 1, 410), "float32", 0, (844, 8), "int32"),  # 24600 B
]
SHORT = [
    ((181, 1, 5, 1), "int8", 3, (9,), "int32"),
    ((7,), "complex128", 0, (6052,), "int32"),
    ((35145, 1436, 44), "int8", 0, (1, 2), "int32"),
    ((3194, 127, 3), "complex128", 0, (50,), "int64"),
    ((66390342,), "float32", 0, (15234,), "int64"),
    ((5004,), "int32", 0, (6428,), "int32"),
    ((100247, 20), "complex128", 0, (82,), "int64"),
    ((1445, 884), "float32", 0, (5,), "int64"),
]


def elements_case(shape, dtype, ishape, idtype):
    from cugather.ops import elements as el
    from cugather.runtime import run_plan
    from cugather.runtime.key import call_key, geometry_of_key

    data = table(shape, dtype)
    idx = idx_for(shape[-1], ishape, idtype)
    ref = cp.take_along_axis(data, idx.astype(np.int64), axis=-1)
    out_bytes = ref.nbytes
    row = {"shape": shape, "dtype": dtype, "indices": ishape, "index_dtype": idtype,
           "moved_bytes": int(2 * out_bytes + idx.nbytes), "us": {}}
    row["us"]["copy"] = copy_us(out_bytes)
    geo = geometry_of_key("elements", call_key(None, 0, data, data.data.ptr, idx, 0),
                          len(shape) - 1, "wrap")
    for kind in ("elements", "elements_row"):
        plan = el.plan_for(geo, CUDA.limits(0), kind=kind)
        bound = bind(plan, 0, None, CUDA, data.dtype)
        fn = lambda: execute(bound, data, data.data.ptr, idx, None, None, 0)  # noqa: E731
        assert bool((fn().view(cp.uint8) == ref.view(cp.uint8)).all()), kind
        row["us"][kind] = tc(fn)
    if torch is not None:
        td, ti = torch.from_dlpack(data), torch.from_dlpack(idx.astype(np.int64))
        row["us"]["torch.gather"] = us(time_torch(torch, lambda: torch.gather(td, -1, ti), 30))
    R["C"].append(row)
    print("C", shape, dtype, ishape, idtype, {k: round(v, 2) for k, v in row["us"].items()},
          {k: round(row["moved_bytes"] / v / 1e6, 2) for k, v in row["us"].items()
           if k != "copy"}, flush=True)


def guarded(fn, *args):
    try:
        fn(*args)
    except Exception as e:  # one failing case leaves the others measured
        print("FAILED", args[:4], type(e).__name__, str(e)[:300], flush=True)
        R.setdefault("failed", []).append([repr(args[:5]), f"{type(e).__name__}: {e}"])
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    parts = sys.argv[1] if len(sys.argv) > 1 else "ABC"
    for c in LONG if "A" in parts else ():
        guarded(gather_case, "A", *c, [("span", "span", False), ("rules", None, True),
                                       ("table", None, False), ("window", "window", False),
                                       ("chunks", "chunks", False), ("flat", "flat", False)])
    for c in SHORT if "B" in parts else ():
        guarded(gather_case, "B", *c, [("lean", "lean", False), ("table", None, False)])
    for c in [((4096, 4096), "float32", (4096, 1024), "int64"),
              ((4096, 4096), "float32", (4096, 4096), "int64"),
              ((16384, 1024), "float16", (16384, 256), "int64"),
              ((1024, 8192), "float32", (1024, 2048), "int32"),
              ((512, 4096), "float32", (512, 1024), "int64"),
              ((100000, 128), "float32", (100000, 64), "int64"),
              ((64, 4096, 128), "float16", (64, 4096, 32), "int32")] if "C" in parts else ():
        guarded(elements_case, *c)
    R["device"] = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    with open(os.path.join(OUT, f"probe-span-{parts}{VARIANT}.json"), "w") as f:
        json.dump(R, f, indent=1)
