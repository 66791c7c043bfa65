"""Run every cugather kernel variant under compute-sanitizer.

Two ways to use it (from the repository root, on a machine with a GPU)::

    # compute-sanitizer runs this script: the workload alone
    compute-sanitizer --tool memcheck --error-exitcode 1 python tests/tools/sanitize.py

    # this script drives compute-sanitizer: memcheck over every variant (split
    # over --jobs processes), racecheck and synccheck over the kernels that use
    # shared memory, all at once with --parallel; one log per run
    python tests/tools/sanitize.py --drive [--log-dir DIR] [--parallel --jobs 4]
                                           [--tools memcheck,racecheck,synccheck]

    # what would run, and whether every variant is reached (no GPU needed)
    python tests/tools/sanitize.py --list
    python tests/tools/sanitize.py --plan-only

The workload enumerates ``cugather.plan.keys.all_kernel_keys()``.  For each kernel
(kind x unit width x index dtype x index math x mode) it searches a small set
of geometries for ones whose plan, with the kind, index math and grid forced
the way the tests force them (the ``kind``/``math_name``/``max_grid`` knobs
of ``GatherOp.plan`` and of the GatherElements/GatherND planners), selects
exactly that kernel; each is run through the library's own bind and launch
path (``cugather.runtime.run_plan``) with in-range indices (negative ones included) and with
out-of-range ones (the extremes of the index dtype included), and compared
with NumPy.  Raise mode must raise IndexError and leave ``out`` untouched,
which also runs the bounds-check kernels.  CuPy's memory pool is switched
off so that every array is its own allocation and memcheck sees its exact
bounds.  Exit status: nonzero on any mismatch, uncovered kernel, error, or
(with ``--drive``) any sanitizer error.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
ROOT = os.path.dirname(TESTS)
for _path in (TESTS, ROOT):  # the support package; this checkout's cugather
    if _path not in sys.path:
        sys.path.insert(0, _path)

import numpy as np  # noqa: E402

#: dtype whose item size is the unit (bytes are what kernels move).
UNIT_DTYPES = {1: "uint8", 2: "float16", 4: "float32", 8: "int64", 16: "complex128"}
#: Kinds whose unit is not the element: pack moves rows shorter than its unit.
KIND_DTYPES = {"pack": "uint8", "span": "uint8", "bcastw": "uint8"}
FILLS = {"uint8": 0xA7, "float16": -2.5, "float32": 3.25, "int64": -(1 << 40) - 3,
         "complex128": complex(1.5, -7.0)}
GATHER_KINDS = ("rows", "chunks", "chunks16", "scalar", "inner", "slab", "slabw", "window", "pack",
                "weave", "slabr", "flat", "slabf", "flatv", "span", "lean", "strided", "bcast",
                "bcastw")
# kinds that stage data in shared memory
SHARED_KINDS = ("inner", "slab", "slabw", "slabf", "slabr", "span", "weave", "elements_row")


@dataclass(frozen=True)
class Geometry:
    """One candidate launch: data shape and layout, axis (batch_dims for nd), indices."""

    shape: tuple
    axis: int
    index_shape: tuple
    layout: str = "c"            # "c", "transposed", "reversed", "strided"
    max_grid: Optional[int] = None

    def __str__(self):
        grid = f" max_grid={self.max_grid}" if self.max_grid else ""
        return (f"data {self.shape} {self.layout} axis {self.axis} indices "
                f"{self.index_shape}{grid}")


# Several blocks with a partial last one, and a tiny grid so that grid-stride
# loops iterate.  Row lengths are odd multiples of the item size, so the
# unit is the item size.
CANDIDATES = {
    "rows": [Geometry((3, 40, 3), 1, (900,)), Geometry((3, 40, 3), 1, (30, 30), max_grid=1),
             Geometry((7, 301), 0, (5,)), Geometry((7, 301), 0, (5,), max_grid=1)],
    "chunks": [Geometry((4, 1101), 0, (6,)), Geometry((4, 1101), 0, (2, 3), max_grid=1),
               Geometry((3, 7, 301), 1, (5,))],
    "chunks16": [Geometry((4, 1101), 0, (7,)), Geometry((4, 1101), 0, (2, 3), max_grid=1),
                 Geometry((3, 4099), 0, (5,))],
    "scalar": [Geometry((2, 50), 1, (1300,)), Geometry((2, 50), 1, (26, 50), max_grid=1)],
    "inner": [Geometry((5, 50), 1, (700,)), Geometry((7, 50), 1, (200,), max_grid=2),
              Geometry((40,), 0, (3, 7))],
    "slab": [Geometry((5, 50), 1, (700,)), Geometry((7, 50), 1, (200,), max_grid=2),
             Geometry((40,), 0, (3, 7))],
    # index counts that start each outer row at another phase of slabw's word
    "slabw": [Geometry((5, 50), 1, (701,)), Geometry((7, 50), 1, (201,), max_grid=2),
              Geometry((40,), 0, (3, 7))],
    "window": [Geometry((50, 3), 0, (330,)), Geometry((3, 40, 5), 1, (20, 11), max_grid=1)],
    "pack": [Geometry((50, 7), 0, (1300,)), Geometry((3, 40, 5), 1, (20, 11), max_grid=1)],
    # rows of 3 units (3, 6 or 12 bytes): tiles over several blocks, the last
    # partial; warps of one block looping over tiles of rows that cross outer slices
    "weave": [Geometry((50, 3), 0, (1300,)), Geometry((3, 40, 3), 1, (30, 13), max_grid=1)],
    # rows of 3 units from staged groups: groups of outer rows whose tiles cross
    # the groups' edges, two blocks looping over them; one block looping over
    # tiles; order 1 (groups of two outer rows of 1040 picks, each starting
    # 16-byte aligned)
    "slabr": [Geometry((2200, 3, 3), 1, (11,), max_grid=2), Geometry((3, 40, 3), 1, (1300,),
                                                                     max_grid=1),
              Geometry((300, 20, 3), 1, (1040,))],
    "flat": [Geometry((50, 7), 0, (1300,)), Geometry((3, 40, 5), 1, (20, 11), max_grid=1),
             Geometry((6, 30), 1, (50,))],
    # groups of three outer rows (2200 of them fill the GPU) whose output no chunk
    # width divides, two blocks looping over them; one block looping over groups
    # and chunks
    "slabf": [Geometry((2200, 3, 5), 1, (11,), max_grid=2), Geometry((6, 40, 7), 1, (300,)),
              Geometry((3, 40, 7), 1, (1300,), max_grid=1), Geometry((40,), 0, (3, 7))],
    "flatv": [Geometry((2, 50), 1, (1600,)), Geometry((6, 30), 1, (5, 8), max_grid=1),
              Geometry((40,), 0, (8, 3))],
    "span": [Geometry((50, 301), 0, (33,)), Geometry((3, 7, 301), 1, (5,), max_grid=1),
             Geometry((4, 16417), 0, (3,))],
    "lean": [Geometry((50, 7), 0, (130,)), Geometry((3, 40, 5), 1, (20, 11), max_grid=1),
             Geometry((40,), 0, (3, 7))],
    # an axis of length 1: rows of several units, of one unit, and on a grid
    # of one block
    "bcast": [Geometry((50, 1, 7), 1, (130,)), Geometry((3, 1), 1, (20, 11), max_grid=1),
              Geometry((1, 9), 0, (1300,))],
    # bcastw: rows of 37 B (chunks straddle repeats and outer slices), one block
    "bcastw": [Geometry((50, 1, 37), 1, (130,)), Geometry((3, 1, 21), 1, (20, 11), max_grid=1)],
    "strided": [Geometry((13, 30), 0, (25,), "transposed"), Geometry((4, 9, 5), 1, (4, 10), "reversed"),
             Geometry((6, 7, 5), 2, (9,), "strided", max_grid=1)],
    "elements": [Geometry((6, 5), 0, (4, 5)), Geometry((4, 9, 5), 1, (4, 12, 5), "reversed"),
                 Geometry((300, 7), 1, (300, 3), max_grid=1), Geometry((13, 30), 0, (20, 30), "transposed")],
    "elements_row": [Geometry((6, 37), 1, (5, 300)),
                     Geometry((4, 3, 37), 2, (3, 2, 5), max_grid=2)],
    "nd": [Geometry((5, 6, 3), 0, (7, 2)), Geometry((4, 5, 7), 1, (4, 6, 1), "reversed"),
           Geometry((2, 3, 301), 0, (5, 2)), Geometry((50, 6, 3), 0, (40, 2), max_grid=1)],
    # QuantizedRunner: the data's bytes are the table (4-bit under 2-byte outputs,
    # 8-bit under 4-byte ones), 8-/16-byte rows and odd ones
    **{kind: [Geometry((7, 40), 0, (30,)), Geometry((7, 41), 0, (5, 6), max_grid=1)]
       for kind in ("quantized", "quantized_bf16", "quantized_general",
                    "quantized_general_bf16")},
    # rows split over three shards, the middle one empty (ShardedRunner)
    "sharded": [Geometry((23, 3), 0, (700,)), Geometry((23, 3), 0, (30, 30), max_grid=1),
                Geometry((9, 301), 0, (5,)), Geometry((9, 301), 0, (7,), max_grid=1)],
}


# ---------------------------------------------------------------- arrays
def _cp():
    import cupy

    return cupy


def aligned_copy(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy at a 256-byte aligned address, as cupy.asarray gives."""
    raw = np.empty(a.nbytes + 256, np.uint8)
    start = -raw.ctypes.data % 256
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


class _HostArrays:
    """Stands in for CuPy in --plan-only runs: 256-byte aligned NumPy copies."""

    asarray = staticmethod(aligned_copy)


def _ptr(arr) -> int:
    data = getattr(arr, "data", None)
    return data.ptr if hasattr(data, "ptr") else arr.ctypes.data


def make_data(rng, geo: Geometry, dtype: str, xp=None):
    """(NumPy array, device array) with the same values and the same layout."""
    from support.reference import random_data

    cp = xp or _cp()
    shape = geo.shape
    if geo.layout == "c":
        host = random_data(rng, shape, dtype)
        return host, cp.asarray(host)
    if geo.layout == "transposed":
        host = random_data(rng, shape[::-1], dtype)
        return host.T, cp.asarray(host).T
    if geo.layout == "reversed":
        host = random_data(rng, shape, dtype)
        rev = (slice(None, None, -1),) * len(shape)
        return host[rev], cp.asarray(host)[rev]
    if geo.layout == "strided":
        host = random_data(rng, shape[:-1] + (2 * shape[-1],), dtype)
        return host[..., ::2], cp.asarray(host)[..., ::2]
    raise ValueError(geo.layout)


def make_indices(rng, shape, bounds, index_dtype: str, out_of_range: bool, nd: bool):
    """In-range indices with 0, n-1, -1, -n among them, or some out of range as well."""
    info = np.iinfo(index_dtype)
    cols = list(bounds) if nd else [bounds[0]]
    idx = np.empty(shape, np.int64)
    view = idx.reshape(-1, len(cols)) if nd else idx.reshape(-1, 1)
    for k, n in enumerate(cols):
        col = rng.integers(-n, n, size=view.shape[0]) if n else np.zeros(view.shape[0], np.int64)
        edges = [0, n - 1, -1, -n]
        if out_of_range:
            edges = [n, -n - 1, int(info.max), int(info.min), 2 * n + 1, -(1 << 31)] + edges
            bad = rng.choice(col.size, size=max(1, col.size // 9), replace=False)
            col[bad] = rng.choice(np.array([n, -n - 1, int(info.max), int(info.min)]), size=bad.size)
        spots = rng.choice(col.size, size=min(len(edges), col.size), replace=False)
        col[spots] = np.array(edges[:spots.size], dtype=np.int64)
        view[:, k] = np.clip(col, info.min, info.max)
    return idx.astype(index_dtype)


# ---------------------------------------------------------------- references
def expected(kind: str, mode: str, data, idx, geo: Geometry, fill):
    from support import fuzzcases
    from support.reference import gather_ref

    try:
        if kind.startswith("quantized"):
            return QuantizedRunner.expected(kind, mode, data, idx, fill)
        if kind in ("elements", "elements_row"):
            return fuzzcases.elements_ref(data, idx, geo.axis, mode, fill)
        if kind == "nd":
            return fuzzcases.nd_ref(data, idx, geo.axis, mode, fill)
        n = data.shape[geo.axis]
        i = idx.astype(np.int64)
        if mode == "clip_numpy":
            return np.take(data, i, axis=geo.axis, mode="clip")
        if mode == "wrap":
            i = np.mod(i, n)
        return gather_ref(data, i, geo.axis, mode, fill)
    except IndexError:
        return IndexError


# ---------------------------------------------------------------- launching
class Runner:
    """Binds and launches one kernel key through the library's own path."""

    def __init__(self, key, geo: Geometry, data, indices, fill):
        self.key, self.geo, self.data, self.indices, self.fill = key, geo, data, indices, fill

    def force(self) -> dict:
        force = {"math_name": self.key.math}
        if self.geo.max_grid:
            force["max_grid"] = self.geo.max_grid
        return force

    def plan(self):
        raise NotImplementedError

    def plan_key(self):
        return self.plan().key

    def run(self, out):
        raise NotImplementedError


class GatherRunner(Runner):
    def _op(self):
        from cugather import GatherOp
        from cugather.ops.gather import take_op

        mode = self.key.mode
        if mode == "clip_numpy":  # numpy.take's clip, as cugather.take builds its op
            return take_op(self.geo.axis, "clip")
        return GatherOp(self.geo.axis, mode=mode, fill_value=self.fill if mode == "fill" else 0)

    def plan(self):
        return self._op().plan(self.data, self.indices, **self.force(), kind=self.key.kind)


class ElementsNDRunner(Runner):
    def plan(self):
        from cugather.ops import elements, nd
        from cugather.plan.core import DeviceLimits
        from cugather.runtime.key import call_key, geometry_of_key

        module, op = (nd, "nd") if self.key.kind == "nd" else (elements, "elements")
        key = call_key(None, 0, self.data, _ptr(self.data), self.indices, 0)
        geo = geometry_of_key(op, key, self.geo.axis, self.key.mode)
        force = self.force()
        if op == "elements":
            force["kind"] = self.key.kind
        return module.plan_for(geo, DeviceLimits(), **force)


def _run(runner, out):
    """The plan of ``runner`` through the library's own bind and launch path."""
    from cugather import validate
    from cugather.runtime import run_plan

    plan = runner.plan()
    if plan.key != runner.key:
        raise AssertionError(f"the call planned {plan.key}, not {runner.key}")
    fill = validate.fill_bytes(runner.fill, runner.data.dtype) if runner.key.mode == "fill" else None
    return run_plan(plan, runner.data, runner.indices, fill=fill, out=out)


GatherRunner.run = ElementsNDRunner.run = _run


class ShardedRunner(Runner):
    """The sharded kernel (cugather.distributed) over shards that are separate
    allocations of one GPU: memcheck sees each shard's exact bounds."""

    def __init__(self, key, geo, data, indices, fill):
        super().__init__(key, geo, data, indices, fill)
        n = data.shape[0]
        cuts = [0, n // 3, n // 3, n]
        on_gpu = type(data).__module__.startswith("cupy")
        self.shards = [data[a:b].copy() if on_gpu else aligned_copy(np.asarray(data[a:b]))
                       for a, b in zip(cuts, cuts[1:])]
        self.offsets = cuts

    def _options(self) -> dict:
        return {"max_grid": self.geo.max_grid} if self.geo.max_grid else {}

    def plan(self):
        from cugather.distributed.plan import plan_sharded
        from cugather.plan.core import alignment

        aligns = [alignment(_ptr(s)) for s in self.shards if s.size]
        return plan_sharded(self.data.shape[1:], self.data.itemsize, self.offsets,
                            self.indices.shape, self.indices.dtype.name, self.key.mode,
                            base_aligns=aligns, **self._options())

    def run(self, out):
        from cugather.distributed.peer import PeerGather

        plan = self.plan()
        if plan.key != self.key:
            raise AssertionError(f"the call planned {plan.key}, not {self.key}")
        op = PeerGather([_ptr(s) if s.size else 0 for s in self.shards], self.offsets,
                        self.data.shape[1:], self.data.dtype, self.data.data.device_id,
                        plan_options=self._options())
        return op(self.indices, mode=self.key.mode, fill_value=self.fill, out=out)


class QuantizedRunner(Runner):
    """gather_block_quantized: ``data``'s bytes (C-contiguous) are the packed table,
    4-bit where the output element has 2 bytes, 8-bit where it has 4; scales and
    zero points follow from the table's shape.  bfloat16 kinds write through a
    bfloat16 view of ``out``."""

    BLOCK = 16

    @staticmethod
    def operands(kind, data):
        """(table, scales, zero_points, bits), NumPy or on the device as ``data`` is."""
        from support.quantized_reference import out_dtype, quantized_shapes_of

        bits = 4 if data.itemsize == 2 else 8
        table = data.view(np.uint8)
        s_shape, z_shape = quantized_shapes_of(table.shape, bits, QuantizedRunner.BLOCK)
        dt = out_dtype("bfloat16" if kind.endswith("_bf16") else data.dtype.name)
        scales = ((np.arange(math.prod(s_shape)) % 7 + 1) / 8).reshape(s_shape).astype(dt)
        zps = (np.arange(math.prod(z_shape)) * 37 % 256).astype(np.uint8).reshape(z_shape)
        if type(data).__module__.startswith("cupy"):
            cp = _cp()
            return table, cp.asarray(scales), cp.asarray(zps), bits
        return table, aligned_copy(scales), aligned_copy(zps), bits

    @staticmethod
    def expected(kind, mode, data, idx, fill):
        from support.quantized_reference import quantized_ref

        table, scales, zps, bits = QuantizedRunner.operands(kind, data)
        ref = quantized_ref(table, idx, scales, zps, block_size=QuantizedRunner.BLOCK,
                            bits=bits, mode=mode, fill_value=fill)
        return ref.view(data.dtype)  # bfloat16 results compared as the bytes of out

    def plan(self):
        from cugather.ops import quantized as quantized_op
        from cugather.plan.core import DeviceLimits
        from cugather.runtime.key import call_key

        table, scales, zps, bits = self.operands(self.key.kind, self.data)
        self._operands = (table, scales, zps)
        key = call_key(None, 0, table, _ptr(table), self.indices, 0,
                       (0, -1, self.BLOCK, bits, self.key.mode, None, scales.shape,
                        scales.dtype, zps.shape, zps.dtype))
        force = {"kind": "general" if "general" in self.key.kind else "rows"}
        if self.geo.max_grid:
            force["max_grid"] = self.geo.max_grid
        return quantized_op.plan_for(quantized_op._geometry(key), DeviceLimits(), **force)

    def run(self, out):
        from cugather import validate
        from cugather.runtime import bind, execute
        from cugather.runtime.launch import CUDA

        plan = self.plan()
        if plan.key != self.key:
            raise AssertionError(f"the call planned {plan.key}, not {self.key}")
        table, scales, zps = self._operands
        fill = validate.fill_bytes(self.fill, scales.dtype) if self.key.mode == "fill" else None
        device = table.data.device_id
        bound = bind(plan, device, fill, CUDA, plan.out_dtype)
        target = out if out.dtype == scales.dtype else out.view(scales.dtype)
        got = execute(bound, table, table.data.ptr, self.indices, target, None, device,
                      (("scales", scales), ("zero_points", zps)))
        return out if got is target else got


RUNNERS = {**{k: GatherRunner for k in GATHER_KINDS}, "elements": ElementsNDRunner,
           "elements_row": ElementsNDRunner,
           "nd": ElementsNDRunner, "sharded": ShardedRunner,
           **{k: QuantizedRunner for k in CANDIDATES if k.startswith("quantized")}}


# ---------------------------------------------------------------- the workload
@dataclass
class Tally:
    keys: int = 0
    covered: int = 0
    cases: int = 0
    raised: int = 0
    failures: int = 0


def target_keys(kinds=None, shared_only=False):
    from cugather.plan.keys import all_kernel_keys

    keys = [k for k in all_kernel_keys() if k.unit]  # bounds checks run with raise mode
    if kinds:
        keys = [k for k in keys if k.kind in kinds]
    if shared_only:
        keys = [k for k in keys if k.kind in SHARED_KINDS]
    return keys


def run_key(key, rng, tally: Tally, failures: list, max_cases: int,
            plan_only: bool = False) -> None:
    cp = _HostArrays if plan_only else _cp()
    dtype = KIND_DTYPES.get(key.kind, UNIT_DTYPES[key.unit])
    fill = FILLS[dtype]
    runner_type = RUNNERS.get(key.kind)
    if runner_type is None:
        failures.append(f"{key.entry}: no runner for kernel kind {key.kind!r} in {__file__}")
        return
    matched = 0
    for geo in CANDIDATES.get(key.kind, []):
        if matched >= max_cases:
            break
        host, dev = make_data(rng, geo, dtype, cp)
        nd = key.kind == "nd"
        bounds = (host.shape[geo.axis:geo.axis + geo.index_shape[-1]] if nd
                  else (host.shape[geo.axis],))
        probe = cp.asarray(make_indices(rng, geo.index_shape, bounds, key.index_dtype, False, nd))
        try:
            plan = runner_type(key, geo, dev, probe, fill).plan()
        except (ValueError, IndexError):  # this geometry cannot take that variant
            continue
        if plan.key != key:
            continue
        if getattr(plan, "shared_mem", 0) and key.kind not in SHARED_KINDS:
            failures.append(f"{key.entry} uses shared memory: add {key.kind!r} to SHARED_KINDS "
                            f"in {__file__} so that racecheck and synccheck run it")
        matched += 1
        if plan_only:
            tally.cases += 2
            continue
        for out_of_range in (False, True):
            idx = make_indices(rng, geo.index_shape, bounds, key.index_dtype, out_of_range, nd)
            run_case(key, geo, host, dev, idx, fill, out_of_range, tally, failures)
    tally.keys += 1
    tally.covered += matched > 0
    if not matched:
        failures.append(f"{key.entry}: no candidate geometry plans this kernel "
                        f"(tried {[str(g) for g in CANDIDATES.get(key.kind, [])]})")


def run_case(key, geo, host, dev, idx, fill, out_of_range, tally, failures) -> None:
    cp = _cp()
    from support.reference import assert_same

    want = expected(key.kind, key.mode, host, idx, geo, fill)
    shape = want.shape if want is not IndexError else _out_shape(key.kind, host, idx, geo)
    pattern = np.frombuffer(np.random.default_rng(7).bytes(
        max(1, math.prod(shape)) * host.itemsize), dtype=host.dtype)[:math.prod(shape)]
    out = cp.asarray(pattern.reshape(shape))
    d_idx = cp.asarray(idx)
    where = f"{key.entry} [{geo}; {'out-of-range' if out_of_range else 'in-range'} indices]"
    tally.cases += 1
    try:
        runner = RUNNERS[key.kind](key, geo, dev, d_idx, fill)
        try:
            got = runner.run(out)
            error = None
        except IndexError as e:
            got, error = None, e
        cp.cuda.runtime.deviceSynchronize()  # surface any launch failure here
        if want is IndexError:
            if error is None:
                raise AssertionError("expected IndexError, got a result")
            tally.raised += 1
            if out.get().tobytes() != pattern.tobytes():
                raise AssertionError("out was written although the call raised IndexError")
        else:
            if error is not None:
                raise AssertionError(f"unexpected IndexError: {error}")
            if got is not out:
                raise AssertionError("the result is not the out= array")
            assert_same(got.get(), want, where)
    except Exception as e:  # count and report, keep going
        tally.failures += 1
        failures.append(f"{where}: {type(e).__name__}: {str(e)[:500]}")


def _out_shape(kind, host, idx, geo):
    if kind.startswith("quantized"):  # 2-byte outputs: 4-bit values, two per byte
        return idx.shape + host.shape[1:-1] + (host.shape[-1] * host.itemsize * (
            2 if host.itemsize == 2 else 1),)
    if kind in ("elements", "elements_row"):
        return idx.shape
    if kind == "nd":
        return idx.shape[:-1] + host.shape[geo.axis + idx.shape[-1]:]
    a = geo.axis
    return host.shape[:a] + idx.shape + host.shape[a + 1:]


def workload(args) -> int:
    from cugather.env import no_gpu_reason

    reason = no_gpu_reason()
    if reason is not None:
        print(f"sanitizer workload: no GPU ({reason})")
        return 2
    cp = _cp()
    import cugather
    from cugather.compile import compiler as _compiler

    cp.cuda.set_allocator(None)  # one cudaMalloc per array: memcheck sees exact bounds
    keys = target_keys(args.kinds, args.shared_only)
    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    print(f"cugather {cugather.__version__} sanitizer workload: {len(keys)} kernel variants on "
          f"GPU 0 ({name}, {_compiler.arch_for_device(0)})", flush=True)
    tallies = defaultdict(Tally)
    failures: list = []
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    for n, key in enumerate(keys):
        try:
            run_key(key, rng, tallies[key.kind], failures, args.cases_per_key)
        except Exception:
            tallies[key.kind].failures += 1
            failures.append(f"{key.entry}: {traceback.format_exc(limit=3)}")
        if n + 1 == len(keys) or keys[n + 1].kind != key.kind:  # progress, for logs cut short
            print(f"  {key.kind}: done, {tallies[key.kind].cases} cases, {len(failures)} problems "
                  f"so far, {time.perf_counter() - start:.0f} s", flush=True)
    loaded = {lk.compiled.key for lk in _compiler.loaded_kernels()}
    print(f"\n{'kind':10} {'variants':>8} {'covered':>8} {'cases':>6} {'raised':>6} {'failed':>6}")
    total = Tally()
    for kind, t in sorted(tallies.items()):
        print(f"{kind:10} {t.keys:8d} {t.covered:8d} {t.cases:6d} {t.raised:6d} {t.failures:6d}")
        for f in ("keys", "covered", "cases", "raised", "failures"):
            setattr(total, f, getattr(total, f) + getattr(t, f))
    print(f"{'total':10} {total.keys:8d} {total.covered:8d} {total.cases:6d} {total.raised:6d} "
          f"{total.failures:6d}")
    checks = sorted(k.entry for k in loaded if not k.unit)
    print(f"bounds-check kernels run: {', '.join(checks) or 'none'}")
    not_loaded = sorted(k.entry for k in keys if k not in loaded)
    if not_loaded:
        failures.append(f"{len(not_loaded)} targeted kernels were never loaded: {not_loaded[:10]}")
    print(f"time {time.perf_counter() - start:.1f} s")
    for line in failures[:200]:
        print("FAIL", line)
    print(f"WORKLOAD RESULT: {'OK' if not failures else 'FAILED'} "
          f"({len(failures)} problems, {total.cases} cases, {total.covered}/{total.keys} "
          f"variants covered)")
    return 1 if failures else 0


# ---------------------------------------------------------------- without a GPU
def plan_only(args) -> int:
    """The variant search alone, on NumPy arrays: which kernels the candidates reach."""
    keys = target_keys(args.kinds, args.shared_only)
    tallies = defaultdict(Tally)
    failures: list = []
    rng = np.random.default_rng(args.seed)
    for key in keys:
        run_key(key, rng, tallies[key.kind], failures, args.cases_per_key, plan_only=True)
    for kind, t in sorted(tallies.items()):
        print(f"{kind:10} {t.covered}/{t.keys} variants reached, {t.cases} cases")
    for line in failures:
        print("FAIL", line)
    print(f"PLAN RESULT: {'OK' if not failures else 'FAILED'}")
    return 1 if failures else 0


# ---------------------------------------------------------------- listing
def list_variants(args) -> int:
    keys = target_keys(args.kinds, args.shared_only)
    by_kind = defaultdict(list)
    for k in keys:
        by_kind[k.kind].append(k)
    for kind, ks in sorted(by_kind.items()):
        print(f"{kind}: {len(ks)} variants; candidate geometries:")
        for g in CANDIDATES.get(kind, []):
            print(f"    {g}")
    print(f"total {len(keys)} variants (each: in-range and out-of-range indices)")
    return 0


# ---------------------------------------------------------------- driving compute-sanitizer
def find_sanitizer(explicit: Optional[str]) -> Optional[str]:
    if explicit:
        return explicit
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for root in ("/usr/local/cuda/bin", "/opt/nvidia/cuda/bin"):
        path = os.path.join(root, "compute-sanitizer")
        if os.access(path, os.X_OK):
            return path
    import glob

    for pattern in ("/usr/local/cuda-*/bin/compute-sanitizer",
                    "/usr/local/cuda-*/compute-sanitizer/compute-sanitizer"):
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    return None


_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+error")
_RACE = re.compile(r"RACECHECK SUMMARY:\s*(\d+)\s+hazards? displayed\s*\((\d+)\s+errors?,\s*(\d+)\s+warnings?\)")


def _finish(run: dict, timeout: float) -> None:
    """Wait for one sanitizer run (killing it past ``timeout`` s from its start)."""
    if "seconds" in run:
        return
    left = max(1.0, timeout - (time.perf_counter() - run["start"]))
    try:
        run["proc"].wait(timeout=left)
    except subprocess.TimeoutExpired:
        run["proc"].kill()
        run["proc"].wait()
        run["file"].write(f"\nKILLED after {timeout:.0f} s\n")
    run["seconds"] = time.perf_counter() - run["start"]
    run["file"].close()


def drive(args) -> int:
    exe = find_sanitizer(args.sanitizer)
    if exe is None:
        print("compute-sanitizer not found (PATH, /usr/local/cuda*/bin); pass --sanitizer PATH")
        return 2
    log_dir = args.log_dir or os.path.join(os.getcwd(), "sanitize-logs")
    os.makedirs(log_dir, exist_ok=True)
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    all_kinds = args.kinds or sorted({k.kind for k in target_keys()})
    runs = []
    for tool in tools:
        shared = tool in ("racecheck", "synccheck")
        # memcheck covers every kind: split over several processes to save time
        jobs = 1 if shared else max(1, min(args.jobs, len(all_kinds)))
        for j in range(jobs):
            kinds = all_kinds[j::jobs] if jobs > 1 else args.kinds
            cmd = [exe, "--tool", tool, "--error-exitcode", "86", "--print-limit", "200"]
            if tool == "racecheck":
                cmd += ["--racecheck-report", "all"]
            cmd += [sys.executable, os.path.abspath(__file__), "--seed", str(args.seed),
                    "--cases-per-key", str(args.cases_per_key)]
            if kinds:
                cmd += ["--kinds", ",".join(kinds)]
            if shared:
                cmd += ["--shared-only"]
            name = tool if jobs == 1 else f"{tool}-{j + 1}"
            log = os.path.join(log_dir, f"{name}.log")
            f = open(log, "w")
            f.write("$ " + " ".join(cmd) + "\n")
            f.flush()
            scope = ("kernels using shared memory" if shared else
                     "kinds " + ",".join(kinds) if kinds else "all kernels")
            run = dict(tool=name, scope=scope, log=log, file=f, start=time.perf_counter(),
                       proc=subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT))
            runs.append(run)
            if not args.parallel:
                _finish(run, args.timeout)
    rows, bad = [], 0
    for run in runs:
        _finish(run, args.timeout)
        tool, scope, log, proc, seconds = (run[k] for k in ("tool", "scope", "log", "proc",
                                                             "seconds"))
        text = open(log, errors="replace").read()
        m = _SUMMARY.search(text)
        errors = int(m.group(1)) if m else None
        race = _RACE.search(text)
        if race and (errors is None or int(race.group(2)) > errors):
            errors = int(race.group(2))
        workload_ok = "WORKLOAD RESULT: OK" in text
        wl = re.search(r"WORKLOAD RESULT: .*", text)
        ok = proc.returncode == 0 and errors == 0 and workload_ok
        bad += not ok
        rows.append((tool, scope, "?" if errors is None else errors, proc.returncode,
                     wl.group(0) if wl else "workload did not finish", seconds, log))
    print(f"compute-sanitizer: {exe}")
    for tool, scope, errors, rc, wl, seconds, log in rows:
        print(f"{tool:11} ({scope}): {errors} errors, exit {rc}, {seconds:.0f} s; {wl}\n"
              f"{'':12}log: {log}")
    print(f"SANITIZER RESULT: {'OK' if not bad else 'FAILED'}")
    return 1 if bad else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--drive", action="store_true", help="run compute-sanitizer on this workload")
    p.add_argument("--list", action="store_true", help="list the variants; no GPU needed")
    p.add_argument("--plan-only", action="store_true",
                   help="check that every variant is reached by a candidate; no GPU needed")
    p.add_argument("--tools", default="memcheck,racecheck,synccheck",
                   help="with --drive: comma-separated tools (racecheck and synccheck run "
                        "the shared-memory kernels only)")
    p.add_argument("--log-dir", help="with --drive: where the logs go")
    p.add_argument("--timeout", type=float, default=1800,
                   help="with --drive: seconds a tool may run before it is stopped")
    p.add_argument("--jobs", type=int, default=1,
                   help="with --drive: memcheck processes, each over some of the kinds")
    p.add_argument("--parallel", action="store_true",
                   help="with --drive: run the tools at the same time")
    p.add_argument("--sanitizer", help="path of compute-sanitizer")
    p.add_argument("--kinds", type=lambda s: [k for k in s.split(",") if k],
                   help="comma-separated kernel kinds (default: all)")
    p.add_argument("--shared-only", action="store_true",
                   help="only kernels that use shared memory")
    p.add_argument("--cases-per-key", type=int, default=2,
                   help="geometries per variant (each with in- and out-of-range indices)")
    p.add_argument("--seed", type=int, default=20240607)
    args = p.parse_args(argv)
    if args.list:
        return list_variants(args)
    if args.plan_only:
        return plan_only(args)
    if args.drive:
        return drive(args)
    return workload(args)


if __name__ == "__main__":
    sys.exit(main())
