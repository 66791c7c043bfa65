"""The window kernel on tables of a few rows (BENCHMARKS.md, "GatherElements
tuning table", the losses left):

    python benchmarks/probe-window-edge/probe.py   # writes $OUT/probe-window-edge.json

41-byte int8 rows (and 30-byte rows of int16), 3.8M int64 picks uniform over
tables of 1 to 4096 rows: the same output and index bytes whatever the table.
The window kernel reads aligned 16-byte blocks and reads a block that reaches
past either end of data byte by byte (load_block); on a table of one 41-byte
row, one block in three is such a block.  If that path is the cost, time falls
as the table grows.  Each is checked against cupy.take; torch.index_select
beside it.
"""
import json
import os

import cupy as cp
import numpy as np

from cugather.bench.peers import time_cupy, time_torch
from cugather.plan.core import Operand, alignment
from cugather.plan.gather import plan_gather
from cugather.runtime.binding import bind
from cugather.runtime.launch import CUDA, execute

try:
    import torch
except ImportError:
    torch = None

OUT = os.environ.get("OUT", "/tmp")


def main():
    rows_out = []
    for dtype, width in (("int8", 41), ("int16", 15)):
        for n_rows in (1, 2, 4, 16, 256, 4096):
            data = cp.random.default_rng(1).integers(0, 100, size=(n_rows, width)).astype(dtype)
            idx = cp.random.default_rng(2).integers(0, n_rows, size=3829588, dtype=cp.int64)
            ref = cp.take(data, idx, axis=0)
            moved = 2 * ref.nbytes + idx.nbytes
            operand = Operand(data.shape, data.strides, data.itemsize, alignment(data.data.ptr))
            row = {"dtype": dtype, "row_bytes": data.itemsize * width, "table_rows": n_rows}
            for kind in ("window", "flat", "rows"):
                try:
                    plan = plan_gather(operand, idx.shape, "int64", 0, "wrap",
                                       limits=CUDA.limits(0), kind=kind)
                except ValueError:
                    continue
                bound = bind(plan, 0, None, CUDA, data.dtype)
                fn = lambda: execute(bound, data, data.data.ptr, idx, None, None, 0)  # noqa: E731
                assert bool((fn() == ref).all()), kind
                row[f"{kind}_tb_s"] = moved / float(np.median(time_cupy(cp, fn, 30))) / 1e9
            src = cp.empty(moved // 2, dtype=cp.uint8)
            dst = cp.empty_like(src)
            row["copy_tb_s"] = moved / float(np.median(time_cupy(
                cp, lambda: dst.__setitem__(Ellipsis, src), 30))) / 1e9
            if torch is not None:
                td, ti = torch.from_dlpack(data), torch.from_dlpack(idx)
                row["torch_tb_s"] = moved / float(np.median(time_torch(
                    torch, lambda: torch.index_select(td, 0, ti), 30))) / 1e9
            print(row, flush=True)
            rows_out.append(row)
    with open(os.path.join(OUT, "probe-window-edge.json"), "w") as f:
        json.dump(rows_out, f, indent=1)


if __name__ == "__main__":
    main()
