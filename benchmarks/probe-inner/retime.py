"""Time inner again, under the shipped chunk rule, on the tuning geometries whose
inner launch the rule changed (BENCHMARKS.md, "inner's records retimed"):

    python benchmarks/probe-inner/retime.py   # writes $OUT/tune-sm_90-seed{S}-inner3.jsonl

For tuning seeds 1000, 1001 and 1002 (the first 2000 geometries each, as
`python -m cugather tune` draws them), every geometry inner applies to whose
grid or block differs between the shipped rule and the rule before
(INNER_CHUNK_BYTES = INNER_ROW_CHUNKS = 0) is timed as
`tune --only inner --partial` times it: checked bit for bit, inner's time
alone, a partial record that `tune --fit` lays over the earlier record of the
same seed and geometry.  The files: inner2 under the rule of 2026-12-04
afternoon (32 KiB or one row, INNER_BALANCE off), inner3 under the shipped one
(RETIME_TAG names the file).
"""
import json, os, sys, time
import cupy as cp
import cugather.plan.tuning as tuning
from cugather.bench.tune import draw_where, tune_shape
from cugather.plan.core import Operand
from cugather.plan.gather import plan_gather
from cugather.runtime.launch import CUDA

OUT = os.environ.get("OUT", "/tmp")
SEEDS = [int(s) for s in sys.argv[1:]] or [1000, 1001, 1002]
TAG = os.environ.get("RETIME_TAG", "inner3")


def launch(s, limits, before):
    saved = tuning.INNER_CHUNK_BYTES, tuning.INNER_ROW_CHUNKS
    if before:
        tuning.INNER_CHUNK_BYTES = tuning.INNER_ROW_CHUNKS = 0  # INNER_BALANCE then moot
    try:
        p = plan_gather(Operand.contiguous(s.shape, s.itemsize), s.indices, s.index_dtype,
                        s.axis, "wrap", limits=limits, kind="inner")
    finally:
        tuning.INNER_CHUNK_BYTES, tuning.INNER_ROW_CHUNKS = saved
    return p.main.grid, p.main.block


def main():
    device = cp.cuda.Device().id
    limits = CUDA.limits(device)
    name = cp.cuda.runtime.getDeviceProperties(device)["name"].decode()
    for seed in SEEDS:
        t0, n = time.perf_counter(), 0
        path = os.path.join(OUT, f"tune-{limits.arch}-seed{seed}-{TAG}.jsonl")
        with open(path, "w") as f:
            for index, s in draw_where(2000, seed):
                try:
                    if launch(s, limits, False) == launch(s, limits, True):
                        continue
                except ValueError:  # inner does not apply
                    continue
                rec = tune_shape(cp, s, seed * 1_000_003 + index, device, "inner", True)
                if rec is None:
                    continue
                rec.update(arch=limits.arch, device=name, seed=seed, index=index)
                f.write(json.dumps(rec) + "\n")
                f.flush()
                n += 1
                cp.get_default_memory_pool().free_all_blocks()
        print(f"seed {seed}: {n} geometries in {time.perf_counter() - t0:.1f} s -> {path}",
              flush=True)


if __name__ == "__main__":
    main()
