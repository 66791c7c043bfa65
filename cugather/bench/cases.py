"""Benchmark cases: fixed shapes, each with the bytes it must move."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy

__all__ = ["Case", "CASES", "QUICK", "by_name"]


@dataclass(frozen=True)
class Case:
    name: str
    shape: tuple
    dtype: str
    n_indices: tuple  # indices shape
    axis: int = 0
    index_dtype: str = "int64"
    note: str = ""

    @property
    def out_shape(self) -> tuple:
        return self.shape[:self.axis] + self.n_indices + self.shape[self.axis + 1:]

    @property
    def out_bytes(self) -> int:
        return math.prod(self.out_shape) * numpy.dtype(self.dtype).itemsize

    @property
    def index_bytes(self) -> int:
        return math.prod(self.n_indices) * numpy.dtype(self.index_dtype).itemsize

    @property
    def moved_bytes(self) -> int:
        """Bytes a gather must move at least: output written and read back by
        the copy it replaces (2 x output) plus the indices."""
        return 2 * self.out_bytes + self.index_bytes

    @property
    def row_bytes(self) -> int:
        return math.prod(self.shape[self.axis + 1:]) * numpy.dtype(self.dtype).itemsize


M = 1 << 20
CASES = [
    Case("emb512_f32_i64", (50000, 512), "float32", (256, 300)),
    Case("emb512_f32_i32", (50000, 512), "float32", (256, 300), index_dtype="int32"),
    Case("mid_axis_f32", (4, 256, 1024), "float32", (32,), axis=1),
    Case("wide8k_f16", (65536, 4096), "float16", (16384,)),
    Case("rows1k_f32", (1000000, 256), "float32", (262144,)),
    Case("rows256B_f16", (1000000, 128), "float16", (2000000,)),
    Case("rows128B_f16", (1000000, 64), "float16", (2000000,)),
    Case("rows64B_f32", (1000000, 16), "float32", (4000000,)),
    Case("rows6B_f16", (10000000, 3), "float16", (20000000,)),
    Case("inner_axis_f32", (8192, 8192), "float32", (4096,), axis=1),
    Case("mid_axis_f16", (64, 1024, 256), "float16", (512,), axis=1),
    Case("scalar_64M_f32", (64 * M,), "float32", (32 * M,)),
    Case("scalar_4M_f32", (4 * M,), "float32", (32 * M,), note="table fits in L2"),
    Case("rows100B_u8", (1000000, 100), "uint8", (1000000,)),
    Case("c128_rows", (100000, 64), "complex128", (200000,)),
    Case("tiny", (1000, 64), "float32", (10,), note="launch-bound; host overhead case"),
]
QUICK = ["emb512_f32_i64", "emb512_f32_i32", "rows64B_f32", "inner_axis_f32", "scalar_64M_f32",
         "rows6B_f16", "tiny"]


def by_name(name: str) -> Case:
    for c in CASES:
        if c.name == name:
            return c
    raise ValueError(f"unknown case {name!r}; cases: {', '.join(c.name for c in CASES)}")
