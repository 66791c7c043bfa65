"""Kernel keys: the frozen values that name one compiled kernel.

A key says everything the CUDA source depends on; shapes never enter it (they
travel as kernel arguments), so one compiled kernel serves every shape.
:func:`all_kernel_keys` enumerates what the library can produce; the NVRTC and
host-execution test tiers iterate over it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

__all__ = [
    "KernelKey", "KINDS", "UNITS", "INDEX_DTYPES", "MATHS", "KERNEL_MODES",
    "all_kernel_keys",
]

#: Kernel kinds of the gather family (see kernels/gather.cuh) and the
#: bounds check that raise mode runs first; then GatherElements, GatherND and
#: GatherND's bounds check (kernels/gather_family.cuh); the gather from a
#: row-sharded table (kernels/sharded.cuh, cugather.distributed).
KINDS = ("rows", "chunks", "scalar", "inner", "elem", "check", "elements", "nd", "check_nd",
         "sharded")
#: Bytes moved per load/store.
UNITS = (1, 2, 4, 8, 16)
INDEX_DTYPES = ("int32", "int64")
#: Index math: 32-bit or 64-bit fast_divmod, or plain 64-bit division.
MATHS = ("fast32", "fast64", "div64")
#: Compile-time out-of-range policies.  "raise" kernels trust a prior check;
#: "clip_numpy" is numpy.take's clip (negatives become 0).
KERNEL_MODES = ("raise", "wrap", "clip", "clip_numpy", "fill")

# Which index maths each kind is built with.  Plain division is kept for the
# fallback only, as the reference fast_divmod is measured against.
_KIND_MATHS = {
    "rows": ("fast32", "fast64"),
    "chunks": ("fast32", "fast64"),
    "scalar": ("fast32", "fast64"),
    "inner": ("fast32", "fast64"),
    "elem": ("fast32", "fast64", "div64"),
    "check": ("fast64",),
    "elements": ("fast32", "fast64"),
    "nd": ("fast32", "fast64"),
    "check_nd": ("fast64",),
    "sharded": ("fast64",),  # divides nothing: one fixed value, as for the checks
}

# Bounds checks move no data (unit 0) and exist in raise mode only.
_CHECK_KINDS = ("check", "check_nd")
# GatherElements and GatherND have no numpy.take clip.
_KIND_MODES = {
    "elements": ("raise", "wrap", "clip", "fill"),
    "nd": ("raise", "wrap", "clip", "fill"),
}


def _kind_units(kind: str) -> tuple:
    return (0,) if kind in _CHECK_KINDS else UNITS


def _kind_modes(kind: str) -> tuple:
    return ("raise",) if kind in _CHECK_KINDS else _KIND_MODES.get(kind, KERNEL_MODES)


@dataclass(frozen=True, order=True)
class KernelKey:
    """Name of one kernel: kind, unit width, index dtype, index math, mode."""

    kind: str
    unit: int
    index_dtype: str
    math: str
    mode: str

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown kernel kind {self.kind!r}; expected one of {KINDS}")
        units = _kind_units(self.kind)
        if self.unit not in units:
            raise ValueError(f"unit for kind {self.kind!r} must be one of {units}, got {self.unit!r}")
        if self.index_dtype not in INDEX_DTYPES:
            raise ValueError(f"index_dtype must be one of {INDEX_DTYPES}, got {self.index_dtype!r}")
        if self.math not in _KIND_MATHS[self.kind]:
            raise ValueError(
                f"math for kind {self.kind!r} must be one of {_KIND_MATHS[self.kind]}, got {self.math!r}")
        modes = _kind_modes(self.kind)
        if self.mode not in modes:
            raise ValueError(f"mode for kind {self.kind!r} must be one of {modes}, got {self.mode!r}")

    @property
    def entry(self) -> str:
        """Name of the ``extern "C"`` entry point."""
        if self.kind in _CHECK_KINDS:
            return f"cugather_{self.kind}_{_IDX_TAG[self.index_dtype]}"
        return (f"cugather_{self.kind}_u{self.unit}_{_IDX_TAG[self.index_dtype]}"
                f"_{self.math}_{self.mode}")

    def __str__(self) -> str:
        return self.entry


_IDX_TAG = {"int32": "i32", "int64": "i64"}


def all_kernel_keys() -> Iterator[KernelKey]:
    """Yield every kernel key the library can produce, in a stable order."""
    for kind in KINDS:
        units = _kind_units(kind)
        modes = _kind_modes(kind)
        for unit in units:
            for index_dtype in INDEX_DTYPES:
                for math in _KIND_MATHS[kind]:
                    for mode in modes:
                        yield KernelKey(kind, unit, index_dtype, math, mode)
