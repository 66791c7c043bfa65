"""GatherElements along the first axis against the rate at which an H200 serves
random 32-byte sectors (BENCHMARKS.md, "GatherElements tuning table"):

    python benchmarks/probe-elements/probe.py   # writes $OUT/probe-elements.json (default /tmp)

A: random 4-byte loads, one 32-byte sector each, from buffers of 256 KiB to
   1 GiB (addresses from a hash, no index loads; each thread sums K loads and
   writes one word): picks per second by buffer size, the ceiling of any kernel
   whose every pick is a sector of its own.
B: ge_first_axis of the fixed suite, (16384, 1024) float32 data, (4096, 1024)
   int64 indices, axis 0, through the elements kernel in flat order and in
   column tiles, and torch.gather; checked against cupy.take_along_axis; the
   copy of the same bytes (2 x output + indices) for the ceiling.
"""
import json
import os

import cupy as cp
import numpy as np

from cugather.bench.peers import time_cupy, time_torch
from cugather.plan.core import Operand, alignment
from cugather.plan.elements import plan_elements
from cugather.runtime.binding import bind
from cugather.runtime.launch import CUDA, execute

try:
    import torch
except ImportError:
    torch = None

OUT = os.environ.get("OUT", "/tmp")
R = {"A": [], "B": []}

_SRC = r"""
extern "C" __global__ void sector_reads(const float* __restrict__ t, float* __restrict__ out,
                                        unsigned long long words, unsigned int k_per_thread,
                                        unsigned long long seed)
{
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    float acc = 0.f;
    for (unsigned int k = 0; k < k_per_thread; ++k) {
        unsigned long long z = seed + (i * k_per_thread + k) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        acc += __ldg(t + (z % words));
    }
    out[i] = acc;
}
"""


def med_ms(t):
    return float(np.median(t))


def part_a():
    kern = cp.RawKernel(_SRC, "sector_reads")
    threads = 1 << 20
    k = 8
    out = cp.empty(threads, dtype=cp.float32)
    for size in (256 << 10, 1 << 21, 8 << 20, 32 << 20, 64 << 20, 1 << 30):
        t = cp.ones(size // 4, dtype=cp.float32)
        fn = lambda: kern((threads // 256,), (256,), (t, out, np.uint64(size // 4),  # noqa: E731
                                                      np.uint32(k), np.uint64(12345)))
        ms = med_ms(time_cupy(cp, fn, 30))
        picks = threads * k
        R["A"].append({"buffer_bytes": size, "picks": picks, "ms": ms,
                       "gpicks_per_s": picks / ms / 1e6,
                       "sector_tb_per_s": picks * 32 / ms / 1e9})
        print(R["A"][-1], flush=True)
        del t


def part_b():
    shape, ishape = (16384, 1024), (4096, 1024)
    rng = cp.random.default_rng(0)
    data = rng.random(shape, dtype=cp.float32)
    idx = rng.integers(0, shape[0], size=ishape, dtype=cp.int64)
    ref = cp.take_along_axis(data, idx, axis=0)
    moved = 2 * ref.nbytes + idx.nbytes
    operand = Operand(data.shape, data.strides, data.itemsize, alignment(data.data.ptr))
    limits = CUDA.limits(0)
    row = {"shape": list(shape), "indices": list(ishape), "moved_bytes": moved}
    src = cp.empty(moved // 2, dtype=cp.uint8)
    dst = cp.empty_like(src)
    row["copy_tb_s"] = moved / med_ms(time_cupy(cp, lambda: dst.__setitem__(Ellipsis, src),
                                                30)) / 1e9
    for label, tiles in (("flat", False), ("tiles", True)):
        plan = plan_elements(operand, ishape, "int64", 0, "wrap", limits=limits,
                             column_tiles=tiles)
        bound = bind(plan, 0, None, CUDA, data.dtype)
        fn = lambda: execute(bound, data, data.data.ptr, idx, None, None, 0)  # noqa: E731
        assert bool((fn() == ref).all()), label
        row[f"{label}_tb_s"] = moved / med_ms(time_cupy(cp, fn, 30)) / 1e9
    if torch is not None:
        td, ti = torch.from_dlpack(data), torch.from_dlpack(idx)
        assert bool((cp.from_dlpack(torch.gather(td, 0, ti)) == ref).all())
        row["torch_gather_tb_s"] = moved / med_ms(time_torch(torch, lambda: torch.gather(td, 0, ti),
                                                             30)) / 1e9
    R["B"].append(row)
    print(row, flush=True)


if __name__ == "__main__":
    part_a()
    part_b()
    dev = cp.cuda.runtime.getDeviceProperties(0)["name"]
    R["gpu"] = dev.decode() if isinstance(dev, bytes) else str(dev)
    with open(os.path.join(OUT, "probe-elements.json"), "w") as f:
        json.dump(R, f, indent=1)
